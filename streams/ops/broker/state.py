"""The run folder's state file, ``<run_dir>/cluster.json``: the cluster and its nodes.

It records what was launched (ports, folders, the command) and the pid each node had when
last started or stopped; whether that pid still runs our node is for `process.live_pid`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from streams.ops.broker.errors import BrokerError

STATE_FILE = "cluster.json"
STATE_VERSION = 1


class NodeInfo(BaseModel):
    """One KRaft node (broker and controller in one process) of a local cluster.

    In the state file `pid` is the pid last launched (None once stopped); in a `ClusterInfo`
    it is None unless that process still runs this node.
    """

    model_config = ConfigDict(frozen=True)

    node_id: int
    port: int
    controller_port: int
    pid: int | None
    dir: Path
    config: Path  # server.properties: also how our processes are told apart from others
    log_file: Path
    command: tuple[str, ...]


class ClusterState(BaseModel):
    """What ``cluster.json`` holds."""

    model_config = ConfigDict(frozen=True)

    version: int = STATE_VERSION
    cluster_id: str
    kafka_version: str = ""
    bootstrap_servers: str
    nodes: tuple[NodeInfo, ...]
    started_at: float | None = None

    def node(self, node_id: int) -> NodeInfo:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        ids = [n.node_id for n in self.nodes]
        raise BrokerError(f"no node {node_id} in this cluster (nodes: {ids})")

    def with_pid(self, node_id: int, pid: int | None) -> ClusterState:
        nodes = tuple(
            n.model_copy(update={"pid": pid}) if n.node_id == node_id else n for n in self.nodes
        )
        return self.model_copy(update={"nodes": nodes})

    def without_pids(self) -> ClusterState:
        nodes = tuple(n.model_copy(update={"pid": None}) for n in self.nodes)
        return self.model_copy(update={"nodes": nodes})


def state_path(run_dir: Path) -> Path:
    return Path(run_dir) / STATE_FILE


def load_state(run_dir: Path) -> ClusterState | None:
    """run_dir's cluster state, None when there is no state file."""
    path = state_path(run_dir)
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BrokerError(
            f"{path} is unreadable ({exc}); stop any Kafka started from {run_dir} by hand "
            f"and delete the file"
        ) from exc
    try:
        return ClusterState.model_validate(data)
    except ValidationError as exc:
        raise BrokerError(f"{path} is not a chorus cluster state file ({exc}); delete it") from exc


def save_state(run_dir: Path, state: ClusterState) -> None:
    """Write the state file atomically (a reader never sees half of it)."""
    path = state_path(run_dir)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(state.model_dump_json(indent=2) + "\n", "utf-8")
    os.replace(tmp, path)
