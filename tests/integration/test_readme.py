"""The README's Quick start as printed, on a fresh clone (the files git tracks, copied to a
folder of their own: no .venv, no ../shared/data beside it): its three lines run in one
shell without a terminal (`make run`, the worker its last line says to start, the agent),
and the agent prints what the README shows, but for times, offsets and the channel's
suffix. Slow (a virtual environment of its own, then the demo): about three minutes."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.unit.test_docs import readme_block

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]

# What varies from run to run in what the agent prints.
_VARIES = re.compile(r"team/release-[0-9a-f]{6}|\d+")


def fresh_clone(into: Path) -> Path:
    """What a clone of this checkout holds: the files git tracks, as they are on disk."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, tracked):
        source, target = REPO / name.decode(), into / name.decode()
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode)
    return into


def stop_group(group: int, timeout: float = 30.0) -> None:
    """SIGTERM every process of `group`, then wait until none is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            os.killpg(group, 0)  # ProcessLookupError once the group is gone
            time.sleep(0.2)
        os.killpg(group, signal.SIGKILL)


def test_the_quick_start_runs_as_printed_on_a_fresh_clone(
    chorus_env: dict[str, str], tmp_path: Path
) -> None:
    clone = fresh_clone(tmp_path / "chorus")
    steps = readme_block("## Quick start", "sh")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CHORUS_", "VIRTUAL_ENV"))},
        **chorus_env,
    }
    log = tmp_path / "quick-start.log"
    with log.open("w") as out:
        # To a file, not a pipe: the worker the steps leave running keeps its output open.
        shell = subprocess.Popen(
            ["bash", "-e", "-c", steps],
            cwd=clone,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the worker it starts in the background is in its group
        )
        try:
            shell.wait(timeout=540)
        finally:
            stop_group(shell.pid)  # the worker the steps left running
    said = log.read_text()
    assert shell.returncode == 0, said
    lines = said.splitlines()
    # make run: no pip warning box; the demo streams a chat (no ../shared/data here); its
    # last line says to start the worker the next line starts.
    assert not any("Warning" in line or line.strip() == "!!" for line in lines), said
    assert any(line.startswith("chitchat-dataset: 40 turns into channel") for line in lines)
    stopped = next(i for i, line in enumerate(lines) if line.startswith("The demo's worker"))
    assert "start one with `.venv/bin/chorus worker`" in lines[stopped]
    # The agent: what the README shows.
    printed = lines[stopped + 1 :]
    shown = readme_block("The agent prints", "text").splitlines()
    assert [_VARIES.sub("#", line) for line in printed[-len(shown) :]] == [
        _VARIES.sub("#", line) for line in shown
    ], said
