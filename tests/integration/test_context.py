"""The budgeted context on a real broker: the HTTP endpoint, `chorus context`, and
`chorus summary` / `chorus recap` answering from the compacted topics without a worker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from projections.model import Message, MessageType, utc_now
from projections.readable import commitment_views
from projections.summarise import estimate_tokens
from streams.interfaces.demo import SCENARIO_CHANNEL, scenario_messages
from streams.kafka.consume import read_topic
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.settings import Settings
from tests.conftest import REPO, WorkerProcess
from tests.context_checks import contradictions

pytestmark = pytest.mark.kafka


def chorus(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams.interfaces.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, **env},
    )


async def test_context_endpoint_and_cli_stay_within_budget(
    chorus_settings: Settings,
    chorus_env: dict[str, str],
    start_worker: Callable[..., WorkerProcess],
) -> None:
    await create_topics(chorus_settings)
    worker = start_worker(
        CHORUS_SUMMARY_AFTER_MESSAGES="4",
        CHORUS_RECAP_DEBOUNCE_SECONDS="1",
        CHORUS_RECAP_CHECK_SECONDS="0.2",
    )
    await send_messages(chorus_settings, scenario_messages(utc_now(), rate=50))
    url = f"{worker.base_url}/channels/{SCENARIO_CHANNEL}/context"
    found: dict[str, object] = {}
    for _ in range(120):
        answer = httpx.get(url, params={"max_tokens": 2000}, timeout=10)
        if answer.status_code == 200:  # 404 until the fold has the channel's first message
            found = answer.json()
            parts = found["parts"]
            if parts["summary"] and parts["recap"] and parts["messages"]["total"] == 14:
                break
        await asyncio.sleep(0.5)
    text = str(found["text"])
    assert text.startswith(f"Channel {SCENARIO_CHANNEL}: ")
    assert "Summary of what was said (through partition offset " in text, text
    assert "Open commitments" in text, text
    assert "worker-a owes planner: “Fix the sample service config" in text
    assert found["decision"]["decision"] in ("CONTINUE", "COMPLETE", "FAILED", "ESCALATE")
    for budget in (0, 7, 50, 120, 400):
        small = httpx.get(url, params={"max_tokens": budget}, timeout=10).json()
        assert estimate_tokens(small["text"]) <= budget == small["max_tokens"]
    assert httpx.get(url, params={"max_tokens": "-1"}, timeout=10).status_code == 400
    assert httpx.get(url, params={"max_tokens": "many"}, timeout=10).status_code == 400

    cli = chorus(chorus_env, "context", SCENARIO_CHANNEL, "--max-tokens", "120")
    assert cli.returncode == 0, cli.stderr
    assert estimate_tokens(cli.stdout.rstrip("\n")) <= 120
    assert cli.stdout.startswith(f"Channel {SCENARIO_CHANNEL}: ")
    as_json = orjson.loads(chorus(chorus_env, "context", SCENARIO_CHANNEL, "--json").stdout)
    assert as_json["parts"]["commitments"]["total"] >= 1
    # Offset 13 is the last message sent; 14 the expiry event of its deadline, when it passed.
    assert as_json["text"] and as_json["decision"]["offset"] in (13, 14)

    unknown = chorus(chorus_env, "context", "nobody/here")
    assert unknown.returncode != 0
    assert "no messages folded for channel 'nobody/here'" in unknown.stderr
    invalid = chorus(chorus_env, "context", "Not A Channel")
    assert invalid.returncode != 0 and "lowercase kebab-case" in invalid.stderr
    assert httpx.get(f"{worker.base_url}/channels/nobody/here/context").status_code == 404
    assert httpx.get(f"{worker.base_url}/channels/Bad Name/context").status_code == 400

    shown = chorus(chorus_env, "summary", SCENARIO_CHANNEL, "--json")
    assert shown.stderr == "(from the worker)\n"
    content = orjson.loads(shown.stdout)["content"]
    read = chorus(chorus_env, "summary", SCENARIO_CHANNEL)
    assert read.stdout.startswith(f"Summary of {SCENARIO_CHANNEL} (") and content in read.stdout
    assert "digestPool" not in read.stdout
    assert "sked worker-a: Collect the pull requests merged since v2.3" in read.stdout
    worker.stop()
    offline = chorus(chorus_env, "summary", SCENARIO_CHANNEL, "--json")
    assert offline.returncode == 0, offline.stderr
    assert "no worker answered" in offline.stderr and "summaries" in offline.stderr
    # The topic carries the narrative; the worker renders the state part beside it.
    worker_view = orjson.loads(shown.stdout)
    assert orjson.loads(offline.stdout)["content"] == worker_view["narrative"]
    assert worker_view["content"].startswith(worker_view["narrative"])
    assert "Open (1):" in worker_view["content"] and "Open (" not in worker_view["narrative"]
    recap = chorus(chorus_env, "recap", SCENARIO_CHANNEL, "--json")
    assert recap.returncode == 0 and "no worker answered" in recap.stderr
    assert orjson.loads(recap.stdout)["phase"] == "COMPLETED"
    told = chorus(chorus_env, "recap", SCENARIO_CHANNEL)
    assert told.stdout.startswith(f"Recap of {SCENARIO_CHANNEL}: written.\nLatest recap (")


def scripted_channel(channel: str, start: datetime) -> list[Message]:
    """Known outcomes (fulfilled, declined, failed, expired, handed off and still open,
    asked and still open), with chatter between them so summaries run in between."""
    plan: list[tuple[MessageType, str | None, str, str | None, str, str | None]] = [
        (MessageType.COMMAND, "c-ok", "planner", "role:worker-a", "Write the user docs", None),
        (MessageType.COMMAND, "c-no", "planner", "role:worker-b", "Port the lexer to Rust", None),
        (MessageType.COMMAND, "c-fail", "planner", "role:worker-a", "Run the load test", None),
        (MessageType.QUERY, "c-late", "planner", "role:worker-b", "Which cache wins", None),
        (MessageType.COMMAND, "c-hand", "planner", "role:worker-a", "Review the grammar", None),
        (MessageType.QUERY, "c-open", "planner", "role:reviewer", "Is the API frozen", None),
        (MessageType.DONE, "c-ok", "worker-a", None, "Docs written and published", "c-ok"),
        (MessageType.DECLINE, "c-no", "worker-b", None, "No Rust toolchain here", "c-no"),
        (MessageType.FAILURE, "c-fail", "worker-a", None, "The cluster is down", "c-fail"),
        (MessageType.HANDOFF, "c-hand", "worker-a", "role:worker-b", "Over to you", "c-hand"),
    ]
    messages: list[Message] = []
    for index, (kind, cid, sender, target, content, answers) in enumerate(plan):
        at = start + timedelta(milliseconds=100 * len(messages))
        messages.append(
            Message(
                id=f"{channel}-{cid}-{kind.value.lower()}",
                channel=channel,
                sender=sender,
                type=kind,
                content=content,
                correlation_id=cid,
                in_reply_to=f"{channel}-{answers}-{'query' if answers == 'c-late' else 'command'}"
                if answers
                else None,
                target=target,
                deadline=at + timedelta(seconds=3) if cid == "c-late" and not answers else None,
                created_at=at,
            )
        )
        for chat in range(2):
            messages.append(
                Message(
                    channel=channel,
                    sender="reviewer",
                    type=MessageType.STATUS,
                    content=f"Parser note {index}.{chat}: the grammar tables look stable.",
                    created_at=at + timedelta(milliseconds=10 * (chat + 1)),
                )
            )
    return messages


async def test_no_view_says_an_ended_commitment_is_open(
    chorus_settings: Settings,
    chorus_env: dict[str, str],
    start_worker: Callable[..., WorkerProcess],
) -> None:
    await create_topics(chorus_settings)
    # The default 300 s: the last messages wait for their narrative, while every view says
    # at once where the commitments stand (the topic names none).
    worker = start_worker(
        CHORUS_SUMMARY_AFTER_MESSAGES="4",
        CHORUS_SUMMARY_AFTER_SECONDS="300",
        CHORUS_RECAP_DEBOUNCE_SECONDS="1",
        CHORUS_RECAP_CHECK_SECONDS="0.2",
    )
    channel = "team/scripted"
    await send_messages(chorus_settings, scripted_channel(channel, utc_now()))

    # Quiet: the deadline passed (the expiry went through the log) and summaries of what
    # came before it were written.
    state: dict[str, Any] = {}
    records: list[dict[str, Any]] = []
    for _ in range(120):
        state = worker.get(f"/channels/{channel}/state").json()
        folded = state.get("projections", {}).get("commitments", {})
        ended = (folded.get("state") or {}).get("ended", {})
        records = [
            r.value
            async for r in read_topic(
                chorus_settings, chorus_settings.topic("summaries"), channels=[channel]
            )
        ]
        if ended.get("EXPIRED") and len(records) >= 3:
            break
        await asyncio.sleep(0.5)
    else:
        pytest.fail(f"the channel never went quiet with its summaries: {records}")
    views = commitment_views(state["projections"]["commitments"]["state"])
    assert {v.correlation_id: v.state for v in views if v.is_open} == {
        "c-hand": "OPEN",
        "c-open": "OPEN",
    }
    assert state["decision"]["decision"] == "ESCALATE"  # the expiry, by default conditions
    assert state["decision"]["offset"] == state["projections"]["commitments"]["offset"]

    # The topic: every record is a narrative, naming no commitment as open.
    for record in records:
        assert contradictions(record["text"], views) == [], record["text"]
        assert "Open (" not in record["text"] and record["text"] == record["narrative"]
    # The views: the state part rendered from the fold when read.
    shown = orjson.loads(chorus(chorus_env, "summary", channel, "--json").stdout)
    assert contradictions(shown["content"], views) == []
    assert "Open (2):" in shown["content"] and "expired: “Which cache wins”" in shown["content"]
    assert shown["state_offset"] == state["projections"]["commitments"]["offset"]
    recap = worker.get(f"/channels/{channel}/recap").json()
    if recap["text"] is not None:  # the recap, once written, says what is open now
        assert contradictions(recap["text"], views) == [], recap["text"]

    url = f"{worker.base_url}/channels/{channel}/context"
    for budget in (150, 400, 1500):
        found = httpx.get(url, params={"max_tokens": budget}, timeout=10).json()
        text = found["text"]
        assert estimate_tokens(text) <= budget
        assert contradictions(text, views) == [], (budget, text)
        assert text.startswith(f"Channel {channel}: ESCALATE")
        if budget >= 400:
            assert "Is the API frozen" in text and "Review the grammar" in text, text
        if budget >= 1500:
            for outcome, asked in [
                ("declined", "Port the lexer to Rust"),
                ("failed", "Run the load test"),
                ("expired", "Which cache wins"),
            ]:
                assert f"{outcome}: “{asked}”" in text

    mine = chorus(chorus_env, "context", channel, "--for", "worker-b", "--max-tokens", "400")
    assert mine.returncode == 0, mine.stderr
    assert mine.stdout.split("\n\n")[1].startswith("Yours, worker-b (1 open")
    assert "Review the grammar" in mine.stdout.split("\n\n")[1]
    cli_state = orjson.loads(chorus(chorus_env, "state", channel, "--json").stdout)
    assert cli_state["decision"]["decision"] == "ESCALATE"
    told = chorus(chorus_env, "state", channel).stdout
    assert told.startswith(f"Channel {channel}: ESCALATE (1 commitment expired (threshold: 0)).")
    assert "Open (2, newest first):" in told and contradictions(told, views) == []

    env = {**os.environ, **chorus_env}
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "streams.interfaces.cli", "mcp"], env=env, cwd=str(REPO)
    )
    async with Client(server) as client:
        result = await client.call_tool(
            "get_channel_context", {"channel": channel, "max_tokens": 250}
        )
        assert not result.is_error
        text = result.content[0].text
        assert estimate_tokens(text) <= 250 and contradictions(text, views) == []
        assert result.structured_content["decision"]["decision"] == "ESCALATE"
        tiny = await client.call_tool("get_channel_context", {"channel": channel, "max_tokens": 5})
        assert tiny.is_error and "max_tokens 5 is below the " in tiny.content[0].text
        least = int(tiny.content[0].text.rsplit(" ", 1)[1])
        header = await client.call_tool(
            "get_channel_context", {"channel": channel, "max_tokens": least}
        )
        assert header.content[0].text.startswith(f"Channel {channel}: ESCALATE")
        assert "[truncated]" not in header.content[0].text
        negative = await client.call_tool(
            "get_channel_context", {"channel": channel, "max_tokens": -3}
        )
        assert negative.is_error and "max_tokens must be between 0" in negative.content[0].text
        unknown = await client.call_tool("get_channel_state", {"channel": "nobody/here"})
        assert unknown.is_error and "no messages folded" in unknown.content[0].text
        state_result = await client.call_tool("get_channel_state", {"channel": channel})
        assert state_result.structured_content["decision"]["decision"] == "ESCALATE"
