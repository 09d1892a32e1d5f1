"""streams.ops.broker.cluster without a JVM: error messages, the jar cache, and pid safety."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.ops.broker import cluster as broker
from streams.ops.broker.cluster import (
    BrokerError,
    cluster_status,
    ensure_kafka_jars,
    free_port,
    free_ports,
    start_cluster,
    stop_cluster,
)


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    path.chmod(0o755)
    return path


def _fake_java(bin_dir: Path, version: str = '"17.0.2" 2022-01-18') -> None:
    _script(
        bin_dir / "java",
        f"sys.stderr.write('openjdk version {version}\\nOpenJDK Runtime Environment\\n')",
    )


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH is only this (initially empty) folder; no JAVA_HOME; no cached java check."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(broker, "_JAVA_CHECKED", set())
    return path


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


def test_missing_java_is_reported(tmp_path: Path, bin_dir: Path) -> None:
    with pytest.raises(BrokerError, match=r"Java 17\+ is required .* found none"):
        ensure_kafka_jars(tmp_path / "home", "4.1.1")


def test_old_java_is_reported(tmp_path: Path, bin_dir: Path) -> None:
    _fake_java(bin_dir, '"1.8.0_392"')
    with pytest.raises(BrokerError, match=r"Java 17\+ is required .* found Java 8"):
        ensure_kafka_jars(tmp_path / "home", "4.1.1")


def test_java_home_wins_over_path(
    tmp_path: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_java(bin_dir, '"11.0.20"')
    java_home = tmp_path / "jdk21"
    (java_home / "bin").mkdir(parents=True)
    _fake_java(java_home / "bin", '"21.0.1"')
    monkeypatch.setenv("JAVA_HOME", str(java_home))
    # Java is fine, so the next problem is the missing Maven.
    with pytest.raises(BrokerError, match="Maven"):
        ensure_kafka_jars(tmp_path / "home", "4.1.1")


def test_missing_maven_is_reported(tmp_path: Path, bin_dir: Path) -> None:
    _fake_java(bin_dir)
    with pytest.raises(BrokerError) as err:
        ensure_kafka_jars(tmp_path / "home", "4.1.1")
    message = str(err.value)
    assert "Maven (mvn) is required" in message
    assert "apt-get install maven" in message
    assert "CHORUS_BOOTSTRAP_SERVERS" in message


def test_maven_failure_shows_its_output_and_leaves_nothing(tmp_path: Path, bin_dir: Path) -> None:
    _fake_java(bin_dir)
    _script(
        bin_dir / "mvn",
        "print('[ERROR] Failed to execute goal: Could not resolve dependencies')\n"
        "print('[ERROR] org.apache.kafka:kafka_2.13:jar:9.9.9 was not found')\n"
        "sys.exit(1)",
    )
    home = tmp_path / "home"
    with pytest.raises(BrokerError) as err:
        ensure_kafka_jars(home, "9.9.9")
    message = str(err.value)
    assert "could not be resolved from Maven Central" in message
    assert "kafka_2.13:jar:9.9.9 was not found" in message
    assert not (home / "kafka-9.9.9").exists()
    assert not [p for p in home.iterdir() if p.is_dir()]  # no half download left behind


def test_maven_runs_once_and_the_result_appears_atomically(tmp_path: Path, bin_dir: Path) -> None:
    _fake_java(bin_dir)
    calls = tmp_path / "mvn-calls"
    _script(
        bin_dir / "mvn",
        "import pathlib\n"
        f"pathlib.Path({str(calls)!r}).open('a').write('x')\n"
        "out = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('-DoutputDirectory='))\n"
        "assert any(a == '-Dkafka.version=9.9.9' for a in sys.argv)\n"
        "pathlib.Path(out).mkdir(parents=True)\n"
        "(pathlib.Path(out) / 'kafka_2.13-9.9.9.jar').write_text('jar')\n",
    )
    home = tmp_path / "home"
    lib = ensure_kafka_jars(home, "9.9.9")
    assert lib == home / "kafka-9.9.9" / "lib"
    assert (lib / "kafka_2.13-9.9.9.jar").is_file()
    marker = json.loads((home / "kafka-9.9.9" / ".complete").read_text())
    assert marker["jars"] == ["kafka_2.13-9.9.9.jar"]
    assert ensure_kafka_jars(home, "9.9.9") == lib
    assert calls.read_text() == "x"


def test_unfinished_cache_is_replaced(tmp_path: Path, bin_dir: Path) -> None:
    _fake_java(bin_dir)
    _script(
        bin_dir / "mvn",
        "import pathlib\n"
        "out = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('-DoutputDirectory='))\n"
        "pathlib.Path(out).mkdir(parents=True)\n"
        "(pathlib.Path(out) / 'kafka_2.13-9.9.9.jar').write_text('jar')\n",
    )
    stale = tmp_path / "home" / "kafka-9.9.9" / "lib"
    stale.mkdir(parents=True)
    (stale / "half.jar").write_text("")
    lib = ensure_kafka_jars(tmp_path / "home", "9.9.9")
    assert sorted(p.name for p in lib.iterdir()) == ["kafka_2.13-9.9.9.jar"]


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('Picked up JAVA_TOOL_OPTIONS: -Xss1m\nopenjdk version "25-ea" 2025-09-16', 25),
        ("garbage", None),
    ],
)
def test_parse_java_major(output: str, major: int | None) -> None:
    assert broker._parse_java_major(output) == major


def test_no_state_means_nothing_running(tmp_path: Path) -> None:
    assert cluster_status(tmp_path) is None
    assert stop_cluster(tmp_path) is False


def test_stop_never_signals_an_unrelated_pid(tmp_path: Path) -> None:
    """A recycled pid in cluster.json must not be killed: its cmdline isn't our kafka.Kafka."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        state = {
            "version": 1,
            "cluster_id": "x",
            "bootstrap_servers": "127.0.0.1:1",
            "nodes": [
                {
                    "node_id": 1,
                    "port": 1,
                    "controller_port": 2,
                    "pid": sleeper.pid,
                    "dir": str(tmp_path / "node-1"),
                    "config": str(tmp_path / "node-1" / "server.properties"),
                    "log_file": str(tmp_path / "node-1" / "logs" / "server.log"),
                    "command": [],
                }
            ],
        }
        (tmp_path / "cluster.json").write_text(json.dumps(state))
        assert cluster_status(tmp_path) is None
        assert stop_cluster(tmp_path, timeout=1) is False
        time.sleep(0.2)
        assert sleeper.poll() is None
        os.kill(sleeper.pid, 0)
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()


def test_multi_node_properties() -> None:
    props = broker._server_properties(
        node_id=2,
        port=19092,
        controller_port=19093,
        voters="1@127.0.0.1:1,2@127.0.0.1:19093,3@127.0.0.1:3",
        data_dir=Path("/x/node-2/data"),
        nodes=3,
    )
    lines = set(props.splitlines())
    for expected in [
        "node.id=2",
        "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
        "advertised.listeners=PLAINTEXT://127.0.0.1:19092",
        "controller.quorum.voters=1@127.0.0.1:1,2@127.0.0.1:19093,3@127.0.0.1:3",
        "default.replication.factor=3",
        "min.insync.replicas=2",
        "offsets.topic.replication.factor=3",
        "transaction.state.log.min.isr=2",
        "share.coordinator.state.topic.min.isr=2",
        "unclean.leader.election.enable=false",
        "broker.session.timeout.ms=4000",
        "auto.create.topics.enable=false",
    ]:
        assert expected in lines


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_free_ports_are_distinct_and_all_bindable_together() -> None:
    # Bug: the secure test broker asked free_port() five times; ports freed between calls can
    # come back, and Kafka refused CONTROLLER and SASL_SSL listeners on one port (CI, stop 19).
    ports = free_ports(64)
    assert len(set(ports)) == 64
    held = [socket.socket() for _ in ports]
    try:
        for sock, port in zip(held, ports, strict=True):
            sock.bind(("127.0.0.1", port))
    finally:
        for sock in held:
            sock.close()


def test_free_ports_skip_a_port_the_kernel_hands_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    handed_out = iter([5000, 5000, 5001, 5002])

    class OnePortTwice:
        def __init__(self, *args: object) -> None:
            self.port = 0

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(handed_out)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

        def close(self) -> None:
            pass

    monkeypatch.setattr(broker.socket, "socket", OnePortTwice)
    assert free_ports(3) == [5000, 5001, 5002]


def test_restarted_node_counts_as_running_before_its_command_line_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in a fault run: right after launch the new process did not yet look like a
    Kafka node, so readiness waited for 2 brokers while the other nodes listed 3, until the
    timeout."""
    nodes = [
        {"node_id": i, "port": 9000 + i, "log_file": str(tmp_path / f"{i}.log"), "pid": i}
        for i in (1, 2, 3)
    ]
    nodes[0]["pid"] = None
    state = {"nodes": nodes}
    live = {2, 3}  # the fresh pid (4242) is not recognisable yet
    waited: list[tuple[list[int], int]] = []

    class Launched:
        pid = 4242

    monkeypatch.setattr(broker, "_live_pid", lambda n: n["pid"] if n["pid"] in live else None)
    monkeypatch.setattr(broker, "_port_free", lambda port: True)
    monkeypatch.setattr(broker, "_check_java", lambda: None)
    monkeypatch.setattr(broker, "_launch", lambda node: Launched())
    monkeypatch.setattr(broker, "_save_state", lambda run_dir, state: None)
    monkeypatch.setattr(
        broker,
        "_wait_ready",
        lambda starting, ports, expected, timeout: waited.append((sorted(ports), expected)),
    )

    broker._restart_locked(tmp_path, state, 1, 5.0)

    assert waited == [([9001, 9002, 9003], 3)]
