"""The demo: each run writes its own channel and ids, linked as in the file; what it
suggests is printed whole; it says what it left running."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from projections.model import utc_now
from streams.interfaces import demo
from streams.interfaces.demo import scenario_messages, scenario_records
from streams.settings import Settings


def test_each_run_gets_its_own_ids_and_keeps_the_replies_linked() -> None:
    start = utc_now()
    first = scenario_messages(start, 2.0, "demo/release-notes-aaa111", "aaa111")
    second = scenario_messages(start, 2.0, "demo/release-notes-bbb222", "bbb222")
    assert {m.channel for m in first} == {"demo/release-notes-aaa111"}
    assert not {m.id for m in first} & {m.id for m in second}
    by_record = dict(zip((r["id"] for r in scenario_records()), first, strict=True))
    for record, message in zip(scenario_records(), first, strict=True):
        if record.get("in_reply_to"):
            assert message.in_reply_to == by_record[record["in_reply_to"]].id
        if record.get("correlation_id"):
            assert message.correlation_id == record["correlation_id"] + "-aaa111"


def test_the_suggested_commands_say_how_to_run_a_chorus_that_is_not_on_the_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(demo.shutil, "which", lambda _: None)
    monkeypatch.chdir(Path(sys.executable).parents[2])  # the folder holding .venv
    command = demo.chorus_command()
    assert command == str(Path(sys.executable).parent.relative_to(Path.cwd()) / "chorus")
    text = demo.try_these(["demo/agents", "demo/meeting"], command)
    assert f"  {command} context demo/agents --max-tokens 200" in text
    assert f"  {command} context demo/agents --for worker-a --max-tokens 300" in text
    assert f"`source {Path(command).parent / 'activate'}` first" in text


def test_a_chorus_on_the_path_is_suggested_bare(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo.shutil, "which", lambda _: str(Path(sys.executable).parent / "chorus"))
    command = demo.chorus_command()
    assert command == "chorus"
    text = demo.try_these(["demo/agents", "demo/meeting"], command)
    assert "Try (in another terminal):\n  chorus context demo/agents" in text


def test_a_driver_event_line_says_which_commitments_changed() -> None:
    from streams.interfaces.demo import driver_event_line

    opened = {"id": "m1", "state": "OPEN", "requester": "planner", "obligor": "role:writer"}
    event = {
        "offset": 3,
        "projections": {
            "commitments": {"changes": {"commitments": [opened]}, "live": {"active": []}}
        },
        "decision": {"decision": "CONTINUE"},
    }
    seen: dict[str, dict[str, object]] = {}
    line = driver_event_line(event, seen)
    assert line is not None and "commitment open: planner → writer" in line
    assert seen == {"m1": opened}
    omitted = {"offset": 4, "projections": {"commitments": {"live": None}}}
    assert driver_event_line(omitted, seen) is None


def test_the_suggested_commands_are_printed_whole_however_narrow_the_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    printed = io.StringIO()
    monkeypatch.setattr(demo, "console", Console(file=printed, width=40))
    long = "/home/someone/projects/with/a/long/path/.venv/bin/chorus"
    monkeypatch.setattr(demo, "chorus_command", lambda: long)
    demo.suggest(["demo/release-notes-abc123", "demo/meeting-abc123"])
    lines = printed.getvalue().splitlines()
    assert f"  {long} context demo/release-notes-abc123 --for worker-a --max-tokens 300" in lines
    assert f"  {long} summary demo/meeting-abc123" in lines


def test_the_demo_says_what_it_left_running_and_how_to_stop_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    running = SimpleNamespace(bootstrap_servers="127.0.0.1:9092")
    monkeypatch.setattr(demo, "local_run_dir", lambda _: tmp_path)
    monkeypatch.setattr(demo, "cluster_status", lambda _: running)
    said = demo.left_running(settings, "chorus", own_worker=True)
    assert said == (
        "The demo's worker has stopped; the local Kafka broker keeps running "
        f"(127.0.0.1:9092, data in {tmp_path}). Stop it with `chorus broker stop` "
        "(or `make broker-stop` in the checkout)."
    )
    # Without a terminal the worker could not stay: one line says how to start one.
    unattended = demo.left_running(settings, ".venv/bin/chorus", own_worker=True, kept=False)
    assert unattended.startswith(
        "The demo's worker has stopped (no terminal to keep it for): start one with "
        "`.venv/bin/chorus worker` (it runs until Ctrl-C) for the commands above and the "
        "README's agent example; the local Kafka broker keeps running"
    )
    assert "\n" not in unattended
    monkeypatch.setattr(demo, "cluster_status", lambda _: None)
    assert demo.left_running(settings, "chorus", own_worker=False) == (
        "The worker you started keeps running (Ctrl-C in its terminal stops it); "
        "no local Kafka broker is running."
    )
    elsewhere = Settings(_env_file=None, bootstrap_servers="kafka:9092")  # type: ignore[call-arg]
    assert "kafka:9092 (CHORUS_BOOTSTRAP_SERVERS) is not chorus's to stop" in (
        demo.left_running(elsewhere, "chorus", own_worker=True)
    )


def test_the_conversation_is_dated_now_like_the_scenario() -> None:
    before = utc_now()
    conversation = demo.first_conversation(4)
    messages = demo.conversation_messages(conversation, "demo/talk-abc123")
    assert len(messages) == len(conversation.turns) and messages[0].created_at >= before
    assert {m.channel for m in messages} == {"demo/talk-abc123"}


def test_no_driver_event_at_all_says_which_worker_is_missing() -> None:
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    said = str(demo.NoDriverEvents(settings, "demo/talk-abc123", 60))
    assert said == (
        "no driver event of demo/talk-abc123 arrived in 60 s: is a worker consuming "
        "chorus.messages? Start one with `chorus worker` (the same CHORUS_BOOTSTRAP_SERVERS "
        "and CHORUS_TOPIC_PREFIX), or drop --no-worker."
    )
