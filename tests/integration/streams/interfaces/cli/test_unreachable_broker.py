"""A worker or CLI command that cannot reach its broker at start says so in one line (the
address and the setting) and exits non-zero: no traceback, no client's log lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streams.ops.broker import free_port
from tests.conftest import REPO


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "command",
    [
        ["worker"],
        ["topics", "create"],
        ["consume", "chorus.messages"],
        ["produce", "--channel", "a/b", "--sender", "ann", "--type", "STATUS", "--content", "x"],
    ],
)
def test_a_command_that_cannot_reach_its_broker_says_so_in_one_line(
    command: list[str], tmp_path: Path
) -> None:
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = {
        **os.environ,
        "CHORUS_BOOTSTRAP_SERVERS": closed,
        "CHORUS_DATA_DIR": str(tmp_path / "worker-data"),
        "CHORUS_WEB_PORT": str(free_port()),
    }
    done = subprocess.run(
        [sys.executable, "-m", "streams.interfaces.cli", *command],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode != 0
    assert len(lines) == 1, lines
    assert closed in lines[0] and "CHORUS_BOOTSTRAP_SERVERS" in lines[0]
