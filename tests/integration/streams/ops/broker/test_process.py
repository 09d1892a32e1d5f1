"""streams.ops.broker.process: only our own Kafka node processes are ever signalled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from streams.ops.broker.process import is_our_node, pid_running, terminate, wait_gone


def _stand_in_node(config: Path) -> subprocess.Popen[bytes]:
    """A process whose command line names kafka.Kafka and config, like a node's; returned
    once it runs. Popen returns while the child is still inside exec, when its
    /proc/<pid>/cmdline can read empty (so it does not look like our node yet): the stand-in
    says it started on stdout, and that line is awaited."""
    code = "import time; print('started', flush=True); time.sleep(60)"
    node = subprocess.Popen(
        [sys.executable, "-c", code, "kafka.Kafka", str(config)], stdout=subprocess.PIPE
    )
    assert node.stdout is not None
    with node.stdout:
        assert node.stdout.readline() == b"started\n"
    return node


def test_an_unrelated_process_is_not_our_node(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert pid_running(sleeper.pid)
        assert not is_our_node(sleeper.pid, tmp_path / "server.properties")
        assert not is_our_node(None, tmp_path / "server.properties")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not pid_running(sleeper.pid)


def test_terminate_stops_a_node(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    node = _stand_in_node(config)
    terminate([(node.pid, config)], timeout=5.0)
    assert node.wait(timeout=5) != 0
    assert not is_our_node(node.pid, config)


def test_wait_gone_returns_what_still_runs(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    node = _stand_in_node(config)
    try:
        assert is_our_node(node.pid, config)
        assert wait_gone([(node.pid, config)], timeout=0.2) == [(node.pid, config)]
    finally:
        node.kill()
        node.wait()
    assert wait_gone([(node.pid, config)], timeout=1.0) == []
