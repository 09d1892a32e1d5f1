"""`chorus` as a process against a stub worker: text for a person, --json for scripts, notes on
their own line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.fakes.worker_stub import stub_worker


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No configured cluster; the local broker's home is an empty temp folder."""
    monkeypatch.delenv("CHORUS_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("CHORUS_BROKER_HOME", str(tmp_path))


VIEWS: dict[str, Any] = {
    "/channels": {
        "channels": ["team/plan"],
        "decisions": {"team/plan": {"decision": "COMPLETE", "detail": "All done", "offset": 3}},
    },
    "/channels/team/plan/state": {
        "channel": "team/plan",
        "decision": {"decision": "COMPLETE", "detail": "All done", "offset": 3},
        "projections": {
            "overview": {
                "version": 2,
                "offset": 3,
                "state": {
                    "message_count": 4,
                    "participants": {"planner": 3, "worker-a": 1},
                    "last_activity": "2026-12-01T10:02:04+00:00",
                },
            }
        },
        "config": None,
    },
    "/channels/team/plan/summary": {
        "channel": "team/plan",
        "content": "Discussed:\n- [planner] asked worker-a: Write the docs",
        "annotations": {"tier": "verbatim", "digestPool": "[]"},
        "total_messages": 4,
        "last_offset": 3,
        "updated_at": "2026-12-01T10:02:05+00:00",
        "updated_by": "system:summariser",
    },
    "/channels/team/plan/recap": {
        "channel": "team/plan",
        "phase": "COMPLETED",
        "label": "done",
        "title": "docs",
        "text": "Goal: the docs. Done.",
        "recap": {"generated_at": "2026-12-01T10:02:09+00:00", "tier": "extractive"},
    },
    "/channels/team/plan/context": {
        "channel": "team/plan",
        "text": "Channel team/plan: COMPLETE (All done). 4 messages; state as of partition "
        "offset 3.",
        "tokens": 19,
        "min_tokens": 19,
        "decision": None,
        "parts": {},
    },
}


@pytest.fixture
def worker_port() -> Iterator[int]:
    with stub_worker(VIEWS.get) as port:
        yield port


def merged(port: int, *args: str) -> list[str]:
    """The lines `chorus ARGS` prints on stdout and stderr together, as a terminal (or a
    tool that reads both) shows them."""
    done = subprocess.run(
        [sys.executable, "-m", "streams.interfaces.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "CHORUS_WEB_PORT": str(port)},
    )
    assert done.returncode == 0, done.stdout
    return done.stdout.splitlines()


@pytest.mark.parametrize(
    ("args", "first", "note"),
    [
        (
            ["summary", "team/plan"],
            "Summary of team/plan (4 messages through partition offset 3; "
            "updated 2026-12-01 10:02:05 UTC; tier verbatim):",
            "(from the worker)",
        ),
        (["recap", "team/plan"], "Recap of team/plan, “docs”: written.", "(from the worker)"),
        (
            ["context", "team/plan"],
            VIEWS["/channels/team/plan/context"]["text"],
            "(19 of 1000 tokens)",
        ),
    ],
)
def test_text_for_a_person_and_the_note_on_a_line_of_its_own(
    worker_port: int, args: list[str], first: str, note: str
) -> None:
    lines = merged(worker_port, *args)
    assert lines[0] == first and lines[-1] == note
    assert not any(line.startswith("{") or "digestPool" in line for line in lines)


@pytest.mark.parametrize(
    ("args", "view"),
    [
        (["summary", "team/plan"], "/channels/team/plan/summary"),
        (["recap", "team/plan"], "/channels/team/plan/recap"),
        (["state", "team/plan"], "/channels/team/plan/state"),
        (["channels"], "/channels"),
    ],
)
def test_json_for_scripts_is_the_worker_s_answer(
    worker_port: int, args: list[str], view: str
) -> None:
    lines = merged(worker_port, *args, "--json")
    assert json.loads(lines[0]) == VIEWS[view]


def test_summary_says_when_the_next_one_comes(worker_port: int) -> None:
    # All 4 messages the fold holds are summarised; no config: this command's defaults.
    assert merged(worker_port, "summary", "team/plan")[-2] == (
        "The next comes once 20 more messages arrive, or 5 min after the first of them."
    )


def test_state_and_channels_print_text(worker_port: int) -> None:
    assert merged(worker_port, "state", "team/plan")[:2] == [
        "Channel team/plan: COMPLETE (All done). 4 messages; state as of partition offset 3, "
        "2026-12-01 10:02:04 UTC.",
        "Participants (2, by messages): planner 3, worker-a 1.",
    ]
    assert merged(worker_port, "channels") == ["team/plan  COMPLETE (All done)"]
