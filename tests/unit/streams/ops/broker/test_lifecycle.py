"""streams.ops.broker.lifecycle without a JVM: port errors, restarts (pid safety, with a
process standing in for a node, is in tests/integration)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from streams.ops.broker import BrokerError, cluster_status, lifecycle, start_cluster, stop_cluster
from streams.ops.broker.state import ClusterState, NodeInfo


def test_port_in_use_names_the_port(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(BrokerError) as err:
            start_cluster(
                home=tmp_path / "home",
                run_dir=tmp_path / "run",
                base_port=port,
                kafka_version="4.1.1",
            )
    message = str(err.value)
    assert f"port {port} is already in use (by the broker of another chorus checkout?" in message
    assert f"CHORUS_BROKER_PORT={port + 100}" in message
    assert f"CHORUS_BOOTSTRAP_SERVERS=127.0.0.1:{port}" in message
    assert "CHORUS_BROKER_HOME" in message


def test_no_state_means_nothing_running(tmp_path: Path) -> None:
    assert cluster_status(tmp_path) is None
    assert stop_cluster(tmp_path) is False


def test_restarted_node_counts_as_running_before_its_command_line_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in a fault run: right after launch the new process did not yet look like a
    Kafka node, so readiness waited for 2 brokers while the other nodes listed 3, until the
    timeout."""

    def node(node_id: int, pid: int | None) -> NodeInfo:
        return NodeInfo(
            node_id=node_id,
            port=9000 + node_id,
            controller_port=9100 + node_id,
            pid=pid,
            dir=tmp_path / f"node-{node_id}",
            config=tmp_path / f"node-{node_id}" / "server.properties",
            log_file=tmp_path / f"{node_id}.log",
            command=("java",),
        )

    state = ClusterState(
        cluster_id="x",
        bootstrap_servers="127.0.0.1:9001",
        nodes=(node(1, None), node(2, 2), node(3, 3)),
    )
    live = {2, 3}  # the fresh pid (4242) is not recognisable yet
    waited: list[tuple[list[int], int]] = []

    class Launched:
        pid = 4242

    monkeypatch.setattr(lifecycle, "live_pid", lambda n: n.pid if n.pid in live else None)
    monkeypatch.setattr(lifecycle, "port_free", lambda port: True)
    monkeypatch.setattr(lifecycle, "check_java", lambda: None)
    monkeypatch.setattr(lifecycle, "launch", lambda node: Launched())
    monkeypatch.setattr(lifecycle, "save_state", lambda run_dir, state: None)
    monkeypatch.setattr(
        lifecycle,
        "wait_ready",
        lambda starting, ports, expected, timeout: waited.append((sorted(ports), expected)),
    )

    restarted = lifecycle.restart_stopped_node(tmp_path, state, 1, 5.0)

    assert waited == [([9001, 9002, 9003], 3)]
    assert restarted.node(1).pid == 4242
