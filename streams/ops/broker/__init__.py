"""The embedded Kafka broker (`cluster`): Kafka's jars from Maven Central, KRaft nodes as
local processes, their state file, readiness, and the kill/restart the fault tests use."""

from streams.ops.broker.cluster import (
    BrokerError,
    ClusterInfo,
    NodeInfo,
    cluster_status,
    ensure_kafka_jars,
    free_port,
    free_ports,
    kill_node,
    restart_node,
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
    "kill_node",
    "restart_node",
    "start_cluster",
    "stop_cluster",
]
