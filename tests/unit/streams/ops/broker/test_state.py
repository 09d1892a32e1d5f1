"""streams.ops.broker.state: the run folder's cluster.json, typed, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams.ops.broker import BrokerError
from streams.ops.broker.state import ClusterState, NodeInfo, load_state, save_state


def _state(tmp_path: Path) -> ClusterState:
    nodes = tuple(
        NodeInfo(
            node_id=i,
            port=9000 + i,
            controller_port=9100 + i,
            pid=100 + i,
            dir=tmp_path / f"node-{i}",
            config=tmp_path / f"node-{i}" / "server.properties",
            log_file=tmp_path / f"node-{i}" / "logs" / "server.log",
            command=("java", "kafka.Kafka"),
        )
        for i in (1, 2)
    )
    return ClusterState(
        cluster_id="abc", kafka_version="4.1.1", bootstrap_servers="127.0.0.1:9001", nodes=nodes
    )


def test_state_round_trips_through_the_file(tmp_path: Path) -> None:
    state = _state(tmp_path)
    save_state(tmp_path, state)
    assert load_state(tmp_path) == state
    written = json.loads((tmp_path / "cluster.json").read_text())
    assert written["nodes"][0]["config"] == str(tmp_path / "node-1" / "server.properties")


def test_no_file_is_no_state(tmp_path: Path) -> None:
    assert load_state(tmp_path) is None


def test_unreadable_and_foreign_files_are_errors(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(BrokerError, match="is unreadable"):
        load_state(tmp_path)
    (tmp_path / "cluster.json").write_text('{"nodes": "none"}')
    with pytest.raises(BrokerError, match="is not a chorus cluster state file"):
        load_state(tmp_path)


def test_pid_updates_leave_the_other_nodes_alone(tmp_path: Path) -> None:
    state = _state(tmp_path)
    assert [n.pid for n in state.with_pid(2, None).nodes] == [101, None]
    assert [n.pid for n in state.without_pids().nodes] == [None, None]
    with pytest.raises(BrokerError, match=r"no node 3 in this cluster \(nodes: \[1, 2\]\)"):
        state.node(3)
