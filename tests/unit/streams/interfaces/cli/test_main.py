"""The `chorus` command line without a broker or worker: help texts, argument errors and
exit codes (0 done, 1 a one-line error, 2 a usage error). What it prints from a worker's
answers, a process against a stub worker, is in tests/integration."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from projections.context import MAX_CONTEXT_TOKENS, budget_refusal
from streams.interfaces.cli.main import main, parse_duration
from streams.settings import get_settings


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


@pytest.mark.parametrize("group", [[], ["summary"], ["recap"], ["broker"], ["topics"]])
def test_help_shows_each_commands_description_whole(group: list[str]) -> None:
    result = chorus(*group, "--help")
    listed = result.output.split("Commands:")[1]
    assert result.exit_code == 0 and "..." not in listed, result.output
    described: list[str] = []
    for line in listed.splitlines():
        if line.startswith("  ") and not line.startswith("   "):  # a command's first line
            described.append(line.split(maxsplit=1)[1])
        elif line.strip():
            described[-1] += " " + line.strip()
    assert described and all(text.endswith((".", ")")) for text in described), described
    if not group:
        said = " ".join(listed.split())
        assert (
            "state Where a channel stands, from the worker that owns it: its termination "
            "decision (CONTINUE, COMPLETE, FAILED or ESCALATE, with its detail), who takes "
            "part, the open and the recently ended commitments, the termination conditions."
        ) in said


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
    from streams.interfaces.worker_api import WorkerApi, WorkerUnreachable

    async def unreachable(*_: object, **__: object) -> Any:
        raise WorkerUnreachable("no worker at http://127.0.0.1:1")

    async def latest(_: object, read: str, channel: str) -> dict[str, Any]:
        assert (read, channel) == (topic, "team/plan")
        return record

    monkeypatch.setattr(control, "latest_value", latest)
    monkeypatch.setattr(WorkerApi, "get", unreachable)
    result = chorus(view, "team/plan")
    assert result.exit_code == 0, result.output
    assert shown in result.stdout
    assert result.stderr == f"(from chorus.{topic}; no worker answered)\n"
