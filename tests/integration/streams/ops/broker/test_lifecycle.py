"""streams.ops.broker.lifecycle without a JVM: a pid in the state file that is not our node
is never signalled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from streams.ops.broker import cluster_status, stop_cluster


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
