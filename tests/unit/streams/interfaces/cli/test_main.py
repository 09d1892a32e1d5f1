"""The `chorus` command line without a broker or worker: help texts, argument errors and
exit codes (0 done, 1 a one-line error, 2 a usage error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from projections.context import MAX_CONTEXT_TOKENS, budget_refusal
from streams.interfaces.cli.main import main, parse_duration
from streams.settings import get_settings
from tests.conftest import REPO


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No configured cluster; the local broker's home is an empty temp folder."""
    monkeypatch.delenv("CHORUS_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("CHORUS_BROKER_HOME", str(tmp_path))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def chorus(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_help_lists_every_command() -> None:
    result = chorus("--help")
    assert result.exit_code == 0
    for command in ("broker", "topics", "produce", "consume", "worker", "context", "replay"):
        assert f"  {command}" in result.output


def test_an_unknown_command_is_a_usage_error() -> None:
    result = chorus("frobnicate")
    assert result.exit_code == 2
    assert "No such command 'frobnicate'" in result.output


def test_mcp_help_names_its_tools() -> None:
    result = chorus("mcp", "--help")
    assert result.exit_code == 0
    assert "get_channel_context(channel, max_tokens=1000, for_agent=None)" in result.output


@pytest.mark.parametrize("command", ["state", "context", "summary", "recap"])
def test_an_invalid_channel_name_is_one_line_and_exit_1(command: str) -> None:
    result = chorus(command, "Not A Channel")
    assert result.exit_code == 1
    assert result.output.startswith("Error: invalid channel name 'Not A Channel'")
    assert "Traceback" not in result.output


@pytest.mark.parametrize("max_tokens", [-1, MAX_CONTEXT_TOKENS + 1])
def test_context_refuses_a_budget_out_of_range(max_tokens: int) -> None:
    result = chorus("context", "team/plan", "--max-tokens", str(max_tokens))
    assert result.exit_code == 2
    assert f"Invalid value for '--max-tokens': {budget_refusal(max_tokens)}" in result.output


def test_a_retired_setting_stops_any_command_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHORUS_CONTEXT_URL", "http://127.0.0.1:6067")
    result = chorus("worker", "--role", "fold")
    assert result.exit_code == 1
    assert result.output.startswith("Error: CHORUS_CONTEXT_URL is no longer read")
    assert result.output.count("\n") == 1


def test_broker_status_without_a_broker_exits_1() -> None:
    result = chorus("broker", "status")
    assert result.exit_code == 1
    assert result.output == "no local broker running\n"


def test_broker_stop_without_a_broker_says_so() -> None:
    result = chorus("broker", "stop")
    assert result.exit_code == 0
    assert result.output == "no local broker was running\n"


def test_broker_start_uses_a_configured_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORUS_BOOTSTRAP_SERVERS", "kafka.example:9092")
    result = chorus("broker", "start")
    assert result.exit_code == 0
    assert result.output == "CHORUS_BOOTSTRAP_SERVERS is set; using kafka.example:9092\n"


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--channel", "team/plan"], "give --file, or --channel, --sender and --type"),
        (["--type", "telepathy"], "Invalid value for '--type'"),
        (["--payload", "[1, 2]"], "must be a JSON object, got list"),
        (["--payload", "{nope"], "not valid JSON"),
        (["--deadline", "0s"], "a delay must be more than 0 seconds"),
        (["--deadline", "next tuesday"], "is neither an ISO time"),
    ],
)
def test_produce_argument_errors_are_usage_errors(flags: list[str], problem: str) -> None:
    result = chorus("produce", *flags)
    assert result.exit_code == 2
    assert problem in result.output


def test_a_channel_first_group_shows_by_default() -> None:
    # `chorus recap CHANNEL` is `chorus recap show CHANNEL`; a subcommand name still wins.
    result = chorus("recap", "configure", "team/plan", "--debounce", "soon")
    assert result.exit_code == 2
    assert "'soon' is not a duration like 30s, 5m or 1h" in result.output
    assert chorus("recap", "--help").exit_code == 0


@pytest.mark.parametrize(
    ("text", "seconds"), [("30", 30.0), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("1.5", 1.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_bad_duration_is_a_bad_parameter() -> None:
    with pytest.raises(click.BadParameter):
        parse_duration("5 minutes")


# --- against a stub worker: text for a person, --json for scripts, notes on their own line


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


class _Worker(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        found = VIEWS.get(self.path.split("?")[0])
        body = json.dumps(found or {"error": "no messages folded"}).encode()
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def worker_port() -> Iterator[int]:
    stub = HTTPServer(("127.0.0.1", 0), _Worker)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    yield stub.server_port
    stub.shutdown()


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
        env={**os.environ, "CHORUS_WEB_PORT": str(port), "CHORUS_API_TOKEN": ""},
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


def test_state_and_channels_print_text(worker_port: int) -> None:
    assert merged(worker_port, "state", "team/plan")[:2] == [
        "Channel team/plan: COMPLETE (All done). 4 messages; state as of partition offset 3, "
        "2026-12-01 10:02:04 UTC.",
        "Participants (2, by messages): planner 3, worker-a 1.",
    ]
    assert merged(worker_port, "channels") == ["team/plan  COMPLETE (All done)"]


@pytest.mark.parametrize(
    ("view", "topic", "record", "shown"),
    [
        ("summary", "summaries", {"channel": "team/plan", "text": "Said."}, "Said."),
        ("recap", "recaps", {"channel": "team/plan", "phase": "COMPLETED"}, "written."),
    ],
)
def test_with_no_worker_summary_and_recap_show_the_latest_record_of_their_topic(
    monkeypatch: pytest.MonkeyPatch, view: str, topic: str, record: dict[str, Any], shown: str
) -> None:
    from streams.interfaces import control

    async def latest(_: object, read: str, channel: str) -> dict[str, Any]:
        assert (read, channel) == (topic, "team/plan")
        return record

    monkeypatch.setattr(control, "latest_value", latest)
    monkeypatch.setenv("CHORUS_WEB_PORT", "1")  # no worker listens there
    result = chorus(view, "team/plan")
    assert result.exit_code == 0, result.output
    assert shown in result.stdout
    assert result.stderr == f"(from chorus.{topic}; no worker answered)\n"
