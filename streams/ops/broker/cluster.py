"""The public API of the embedded broker under its historical module name.

No logic: re-exports only, so ``from streams.ops.broker.cluster import ...`` keeps working;
new code imports from `streams.ops.broker`.
"""

from __future__ import annotations

from streams.ops.broker import (
    BrokerError,
    ClusterInfo,
    NodeInfo,
    cluster_status,
    ensure_kafka_jars,
    free_port,
    free_ports,
    start_cluster,
    stop_cluster,
)

__all__ = [
    "BrokerError",
    "ClusterInfo",
    "NodeInfo",
    "cluster_status",
    "ensure_kafka_jars",
    "free_port",
    "free_ports",
    "start_cluster",
    "stop_cluster",
]
