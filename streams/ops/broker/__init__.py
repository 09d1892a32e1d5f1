"""The embedded Kafka broker: a local KRaft cluster, one JVM per node.

One job per module: `java` (finding Java 17+), `maven` (the Kafka jars from Maven Central),
`config` (server.properties, launch command, storage formatting), `ports`, `process`
(launching, recognising and stopping node processes), `state` (the run folder's
``cluster.json``), `readiness` (waiting for Metadata) and `lifecycle` (start, status, stop).
Nodes are started detached (own session), so they outlive the process that started them;
use `stop_cluster` to stop them.
"""

from streams.ops.broker.errors import BrokerError
from streams.ops.broker.lifecycle import ClusterInfo, cluster_status, start_cluster, stop_cluster
from streams.ops.broker.maven import ensure_kafka_jars
from streams.ops.broker.ports import free_port, free_ports
from streams.ops.broker.readiness import READY_LINE
from streams.ops.broker.state import NodeInfo

__all__ = [
    "READY_LINE",
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
