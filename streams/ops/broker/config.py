"""How each node is configured: server.properties, its launch command, KRaft storage.

Layout of a run folder: ``<run_dir>/node-<i>/`` holds node i's ``server.properties``,
``data/`` (log.dirs, formatted once), ``logs/server.log`` and ``stdout.log`` (JVM output
such as crashes); ``<run_dir>/log4j2.properties`` is shared by the nodes.
"""

from __future__ import annotations

import base64
import re
import subprocess
import uuid
from pathlib import Path

from streams.ops.broker.errors import BrokerError
from streams.ops.broker.files import asset_text, tail
from streams.ops.broker.state import NodeInfo

_META_PROPERTIES = "data/meta.properties"


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def server_properties(
    *,
    node_id: int,
    port: int,
    controller_port: int,
    voters: str,
    data_dir: Path,
    nodes: int,
) -> str:
    """node_id's server.properties in a cluster of `nodes` combined broker+controller nodes."""
    rf = min(nodes, 3)
    min_isr = 2 if nodes >= 3 else 1
    internal_partitions = 1 if nodes == 1 else 3
    props: dict[str, str | int] = {
        "process.roles": "broker,controller",
        "node.id": node_id,
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": 1,
        "default.replication.factor": rf,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": internal_partitions,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": internal_partitions,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
        "num.network.threads": 2,
        "num.io.threads": 4,
    }
    if nodes > 1:
        props.update(
            {
                "unclean.leader.election.enable": "false",
                "broker.heartbeat.interval.ms": 500,
                "broker.session.timeout.ms": 4000,
            }
        )
    lines = [f"# Written by chorus (streams/ops/broker/config.py); node {node_id} of {nodes}."]
    lines += [f"{k}={v}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def configure_nodes(
    run_dir: Path, java: str, lib: Path, ports: list[tuple[int, int]]
) -> list[NodeInfo]:
    """Write each node's server.properties (and the shared log4j2 config); not started yet.

    ports: (broker port, controller port) of node 1, 2, ...
    """
    log4j = run_dir / "log4j2.properties"
    log4j.write_text(asset_text("log4j2.properties"), "utf-8")
    nodes = len(ports)
    heap = ["-Xms256m", "-Xmx512m"] if nodes == 1 else ["-Xms128m", "-Xmx384m"]
    voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports, start=1))
    configured: list[NodeInfo] = []
    for i, (port, cport) in enumerate(ports, start=1):
        node_dir = run_dir / f"node-{i}"
        logs_dir = node_dir / "logs"
        logs_dir.mkdir(parents=True, exist_ok=True)
        config = node_dir / "server.properties"
        config.write_text(
            server_properties(
                node_id=i,
                port=port,
                controller_port=cport,
                voters=voters,
                data_dir=node_dir / "data",
                nodes=nodes,
            ),
            "utf-8",
        )
        command = (
            java,
            *heap,
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={logs_dir}",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{lib}/*",
            "kafka.Kafka",
            str(config),
        )
        configured.append(
            NodeInfo(
                node_id=i,
                port=port,
                controller_port=cport,
                pid=None,
                dir=node_dir,
                config=config,
                log_file=logs_dir / "server.log",
                command=command,
            )
        )
    return configured


def formatted_node_ids(run_dir: Path) -> list[int]:
    """The nodes of run_dir whose storage is formatted already, in order."""
    return sorted(
        int(p.parent.parent.name.split("-", 1)[1])
        for p in run_dir.glob(f"node-*/{_META_PROPERTIES}")
        if p.parent.parent.name.split("-", 1)[1].isdigit()
    )


def is_formatted(node: NodeInfo) -> bool:
    return (node.dir / _META_PROPERTIES).exists()


def read_cluster_id(node_dir: Path) -> str | None:
    """The cluster id a node's storage was formatted with, None when unformatted."""
    try:
        text = (node_dir / _META_PROPERTIES).read_text("utf-8")
    except FileNotFoundError:
        return None
    m = re.search(r"^cluster\.id=(\S+)", text, re.M)
    return m.group(1) if m else None


def format_storage(
    java: str, lib: Path, cluster_id: str, nodes: list[NodeInfo], timeout: float
) -> None:
    """Format the nodes' KRaft storage (kafka.tools.StorageTool), all at once."""
    procs: list[tuple[NodeInfo, subprocess.Popen[str]]] = []
    for node in nodes:
        cmd = [
            java,
            "-Xmx256m",
            "-cp",
            f"{lib}/*",
            "kafka.tools.StorageTool",
            "format",
            # One random id in 64 starts with "-", which "-t <id>" would read as an option.
            f"--cluster-id={cluster_id}",
            "-c",
            str(node.config),
        ]
        procs.append(
            (
                node,
                subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                ),
            )
        )
    errors: list[str] = []
    for node, proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            errors.append(f"node {node.node_id}: timed out\n{tail(out or '')}")
            continue
        if proc.returncode != 0:
            errors.append(f"node {node.node_id}: exit code {proc.returncode}\n{tail(out or '')}")
    if errors:
        raise BrokerError(
            "formatting the Kafka storage failed (kafka.tools.StorageTool format); "
            "delete the run dir to start from scratch if its data is disposable.\n"
            + "\n".join(errors)
        )
