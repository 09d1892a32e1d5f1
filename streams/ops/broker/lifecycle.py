"""Starting, finding and stopping a local KRaft cluster from its run folder.

Every change to a run folder's nodes happens under ``<run_dir>/.cluster.lock``, so two
processes never start or stop the same cluster at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from streams.ops.broker.config import (
    configure_nodes,
    format_storage,
    formatted_node_ids,
    is_formatted,
    new_cluster_id,
    read_cluster_id,
)
from streams.ops.broker.errors import BrokerError
from streams.ops.broker.files import file_lock, file_size
from streams.ops.broker.java import check_java
from streams.ops.broker.maven import ensure_kafka_jars
from streams.ops.broker.ports import choose_ports, port_free, port_in_use_error
from streams.ops.broker.process import launch, live_pid, terminate
from streams.ops.broker.readiness import Launched, wait_ready
from streams.ops.broker.state import ClusterState, NodeInfo, load_state, save_state

_PORT_RELEASE_SECONDS = 5.0  # a just-stopped node's port may take a moment to be free
_ABORT_STOP_SECONDS = 10.0
_MIN_FORMAT_SECONDS = 120.0


@dataclass(frozen=True)
class ClusterInfo:
    """A local cluster as it runs now: node pids are None for nodes that do not run."""

    run_dir: Path
    bootstrap_servers: str
    nodes: list[NodeInfo]


def cluster_info(run_dir: Path, state: ClusterState) -> ClusterInfo:
    nodes = [n.model_copy(update={"pid": live_pid(n)}) for n in state.nodes]
    return ClusterInfo(
        run_dir=Path(run_dir), bootstrap_servers=state.bootstrap_servers, nodes=nodes
    )


@contextmanager
def cluster_lock(run_dir: Path) -> Iterator[None]:
    with file_lock(run_dir / ".cluster.lock"):
        yield


def cluster_status(run_dir: Path) -> ClusterInfo | None:
    """The cluster described by run_dir/cluster.json, or None if none of its nodes runs.

    Nodes that are not running have pid None.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    state = load_state(run_dir)
    if state is None:
        return None
    info = cluster_info(run_dir, state)
    if all(n.pid is None for n in info.nodes):
        return None
    return info


def start_cluster(
    *,
    home: Path,
    run_dir: Path,
    nodes: int = 1,
    base_port: int = 9092,
    kafka_version: str,
    timeout: float = 60.0,
) -> ClusterInfo:
    """Start (or find already running) a local KRaft cluster of `nodes` combined nodes.

    Node i listens on 127.0.0.1:base_port+2*(i-1) (base_port=0: any free ports); controller
    ports are picked free. Existing data in run_dir is kept (storage is formatted only once).
    If run_dir's cluster is already running this returns it; if some of its nodes are down
    they are restarted. Returns once every node answers a Metadata request listing all nodes.
    """
    if nodes < 1:
        raise BrokerError(f"nodes must be at least 1, not {nodes}")
    if base_port < 0 or base_port + 2 * nodes > 65535:
        raise BrokerError(f"base_port {base_port} is out of range")
    run_dir = Path(run_dir).expanduser().resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    with cluster_lock(run_dir):
        state = load_state(run_dir)
        if state is not None:
            live = {n.node_id: live_pid(n) for n in state.nodes}
            if any(pid is not None for pid in live.values()):
                if len(state.nodes) != nodes:
                    raise BrokerError(
                        f"a {len(state.nodes)}-node cluster is already running from "
                        f"{run_dir}; stop it first (chorus broker stop) to start {nodes} node(s)"
                    )
                for nid in [nid for nid, pid in live.items() if pid is None]:
                    state = restart_stopped_node(run_dir, state, nid, timeout)
                return cluster_info(run_dir, state)

        ports = choose_ports(nodes, base_port, state)
        java = check_java()
        lib = ensure_kafka_jars(Path(home), kafka_version)
        return _start_new(run_dir, java, lib, kafka_version, ports, state, timeout)


def _existing_cluster_id(run_dir: Path, nodes: int, previous: ClusterState | None) -> str | None:
    """The id run_dir's formatted data belongs to; it must match the requested shape."""
    formatted = formatted_node_ids(run_dir)
    if formatted and (max(formatted) > nodes or (previous and len(previous.nodes) != nodes)):
        raise BrokerError(
            f"{run_dir} holds the data of a cluster with nodes {formatted}, not {nodes}; "
            f"start it with the same number of nodes, or delete {run_dir} to start empty"
        )
    for nid in formatted:
        cluster_id = read_cluster_id(run_dir / f"node-{nid}")
        if cluster_id:
            return cluster_id
    return previous.cluster_id if previous else None


def _start_new(
    run_dir: Path,
    java: str,
    lib: Path,
    kafka_version: str,
    ports: list[tuple[int, int]],
    previous: ClusterState | None,
    timeout: float,
) -> ClusterInfo:
    cluster_id = _existing_cluster_id(run_dir, len(ports), previous) or new_cluster_id()
    configured = configure_nodes(run_dir, java, lib, ports)
    to_format = [n for n in configured if not is_formatted(n)]
    if to_format:
        format_storage(java, lib, cluster_id, to_format, max(timeout, _MIN_FORMAT_SECONDS))

    state = ClusterState(
        cluster_id=cluster_id,
        kafka_version=kafka_version,
        bootstrap_servers=",".join(f"127.0.0.1:{p}" for p, _ in ports),
        nodes=tuple(configured),
    )
    starting: list[Launched] = []
    try:
        for node in configured:
            offset = file_size(node.log_file)
            proc = launch(node)
            starting.append(Launched(node, proc, offset))
            state = state.with_pid(node.node_id, proc.pid)
        state = state.model_copy(update={"started_at": time.time()})
        save_state(run_dir, state)
        wait_ready(starting, [p for p, _ in ports], len(ports), timeout)
    except BaseException:
        terminate([(s.process.pid, s.node.config) for s in starting], _ABORT_STOP_SECONDS)
        save_state(run_dir, state.without_pids())
        raise
    return cluster_info(run_dir, state)


def stop_cluster(run_dir: Path, timeout: float = 20.0) -> bool:
    """Stop every running node of run_dir's cluster (SIGTERM, then SIGKILL after timeout).

    Returns False if nothing was running.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    if load_state(run_dir) is None:
        return False
    with cluster_lock(run_dir):
        state = load_state(run_dir)
        if state is None:
            return False
        running = [(pid, n.config) for n in state.nodes if (pid := live_pid(n)) is not None]
        if running:
            terminate(running, timeout)
        save_state(run_dir, state.without_pids())
        return bool(running)


def restart_stopped_node(
    run_dir: Path, state: ClusterState, node_id: int, timeout: float
) -> ClusterState:
    """Launch a stopped node again with its previous config and data (no-op if it runs);
    the caller holds the cluster lock. Returns the saved state.

    Returns once it logged startup and every running node's Metadata lists all running nodes.
    """
    node = state.node(node_id)
    if live_pid(node) is not None:
        return state
    port_deadline = time.monotonic() + _PORT_RELEASE_SECONDS
    while not port_free(node.port):
        if time.monotonic() >= port_deadline:
            raise port_in_use_error(node.port)
        time.sleep(0.1)
    check_java()
    offset = file_size(node.log_file)
    proc = launch(node)
    state = state.with_pid(node_id, proc.pid)
    save_state(run_dir, state)
    # The new process may not look like a Kafka node yet (its command line appears after
    # exec); counting it by pid would wait for too few brokers while the others list it.
    running = [n for n in state.nodes if n.node_id == node_id or live_pid(n) is not None]
    launched = Launched(state.node(node_id), proc, offset)
    try:
        wait_ready([launched], [n.port for n in running], len(running), timeout)
    except BaseException:
        terminate([(proc.pid, node.config)], _ABORT_STOP_SECONDS)
        save_state(run_dir, state.with_pid(node_id, None))
        raise
    return state
