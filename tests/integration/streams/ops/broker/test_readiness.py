"""streams.ops.broker.readiness without a JVM (a Python process stands in for a node): a node
that dies or stays silent is reported with its log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streams.ops.broker import BrokerError
from streams.ops.broker.process import LAUNCH_HEADER
from streams.ops.broker.readiness import READY_LINE, Launched, wait_ready
from streams.ops.broker.state import NodeInfo


def _node(tmp_path: Path) -> NodeInfo:
    (tmp_path / "logs").mkdir()
    return NodeInfo(
        node_id=1,
        port=1,
        controller_port=2,
        pid=None,
        dir=tmp_path,
        config=tmp_path / "server.properties",
        log_file=tmp_path / "logs" / "server.log",
        command=(),
    )


def _python(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_node_that_exits_during_startup_is_reported_with_its_output(tmp_path: Path) -> None:
    node = _node(tmp_path)
    node.log_file.write_text("[main] ERROR something broke\n")
    (tmp_path / "stdout.log").write_text(
        f"{LAUNCH_HEADER} starting node 1 ===\nError: Could not find or load main class\n"
    )
    process = _python("raise SystemExit(3)")
    process.wait()
    with pytest.raises(BrokerError) as err:
        wait_ready([Launched(node, process, 0)], [1], 1, timeout=5)
    message = str(err.value)
    assert "Kafka node 1 exited during startup with code 3" in message
    assert "something broke" in message
    assert "Could not find or load main class" in message


def test_a_node_that_never_logs_startup_times_out(tmp_path: Path) -> None:
    node = _node(tmp_path)
    process = _python("import time; time.sleep(30)")
    try:
        with pytest.raises(BrokerError) as err:
            wait_ready([Launched(node, process, 0)], [1], 1, timeout=0.5)
    finally:
        process.kill()
        process.wait()
    assert f"node(s) [1] never logged '{READY_LINE}'" in str(err.value)
    assert "CHORUS_BROKER_START_TIMEOUT" in str(err.value)
