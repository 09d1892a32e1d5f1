"""Summaries on a real broker: thresholds, the compacted topic, and every reader."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from projections.model import ActorType, Message, MessageType
from streams.interfaces.control import configure_channel, set_summary
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.settings import Settings
from tests.conftest import REPO, WorkerProcess, read_until

pytestmark = pytest.mark.kafka

CHANNEL = "standup/daily"


def talk(count: int, senders: list[str], start: int = 0) -> list[Message]:
    t0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
    return [
        Message(
            channel=CHANNEL,
            sender=senders[i % len(senders)],
            type=MessageType.STATUS,
            actor_type=ActorType.HUMAN,
            content=f"update {i}: working on item {i % 7}",
            topic=["planning", "testing", "release"][i % 3],
            created_at=t0 + timedelta(seconds=10 * i),
        )
        for i in range(start, start + count)
    ]


async def wait_for_config(settings: Settings, worker: WorkerProcess) -> None:
    """Config and messages are separate topics: fold one message, see the config, go on."""
    await send_messages(settings, talk(1, ["warmup"], start=1000))
    for _ in range(120):
        response = worker.get(f"/channels/{CHANNEL}/state")
        if response.status_code == 200 and response.json()["config"]:
            return
        await asyncio.sleep(0.5)
    pytest.fail("channel config never reached the worker")


async def test_threshold_of_20_gives_three_summaries_readable_everywhere(
    chorus_settings: Settings, chorus_env: dict[str, str], start_worker: object
) -> None:
    await create_topics(chorus_settings)
    worker: WorkerProcess = start_worker(CHORUS_SUMMARY_AFTER_MESSAGES="1000")  # type: ignore[operator]
    await configure_channel(chorus_settings, CHANNEL, summary_after_messages=20)
    await wait_for_config(chorus_settings, worker)

    await send_messages(chorus_settings, talk(19, ["alice", "bob"]))
    await send_messages(chorus_settings, talk(20, ["bob", "carol"], start=19))
    await send_messages(chorus_settings, talk(20, ["dave"], start=39))
    records = await read_until(chorus_settings, "summaries", lambda rs: len(rs) >= 3, 90)
    assert len(records) == 3
    summaries = [r.value for r in records]
    assert [s["total_messages"] for s in summaries] == [20, 40, 60]
    assert summaries[1]["first_offset"] == summaries[0]["last_offset"] + 1
    # 20 messages: above the medium tier, no LLM configured -> the digest
    assert summaries[0]["annotations"]["tier"] == "digest"
    assert summaries[0]["annotations"]["fallbackReason"] == "no LLM configured"
    # participants accumulate across runs; the text is rewritten within the budget
    assert summaries[2]["annotations"]["participants"] == "warmup,alice,bob,carol,dave"
    assert summaries[2]["text"].startswith("Participants: warmup, alice, bob, carol, dave")
    assert "working on item" in summaries[2]["text"]
    assert all(len(s["text"]) <= 500 * 4 for s in summaries)

    for _ in range(40):  # the worker records the summary when it reads it back
        over_http = worker.get(f"/channels/{CHANNEL}/summary").json()
        if over_http["total_messages"] == 60:
            break
        await asyncio.sleep(0.25)
    assert over_http["content"] == summaries[-1]["text"]
    assert over_http["annotations"] == summaries[-1]["annotations"]

    env = {**os.environ, **chorus_env}
    cli = subprocess.run(
        [sys.executable, "-m", "streams.interfaces.cli", "summary", CHANNEL, "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert orjson.loads(cli.stdout)["content"] == summaries[-1]["text"], cli.stderr

    server = StdioServerParameters(
        command=sys.executable, args=["-m", "streams.interfaces.cli", "mcp"], env=env, cwd=str(REPO)
    )
    async with Client(server) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"get_channel_summary", "get_channel_state", "list_channels"} <= tools
        result = await client.call_tool("get_channel_summary", {"channel": CHANNEL})
        assert result.structured_content["content"] == summaries[-1]["text"]
        listed = await client.call_tool("list_channels", {})
        assert CHANNEL in str(listed.structured_content)
        missing = await client.call_tool("get_channel_summary", {"channel": "nobody/here"})
        assert missing.is_error
        assert missing.content[0].text == "no messages folded for channel 'nobody/here'"


async def test_manual_summary_keeps_annotations_and_time_threshold_fires(
    chorus_settings: Settings, start_worker: object
) -> None:
    await create_topics(chorus_settings)
    worker: WorkerProcess = start_worker(  # type: ignore[operator]
        CHORUS_SUMMARY_AFTER_MESSAGES="1000", CHORUS_SUMMARY_AFTER_SECONDS="2"
    )
    await send_messages(chorus_settings, talk(2, ["erin"]))
    first = await read_until(chorus_settings, "summaries", lambda rs: len(rs) >= 1, 60)
    assert first[0].value["annotations"]["tier"] == "verbatim"  # 2 items, by time
    await set_summary(chorus_settings, CHANNEL, "Erin is on items 0 and 1.", "user:test")
    records = await read_until(chorus_settings, "summaries", lambda rs: len(rs) >= 2, 30)
    manual = records[-1].value
    assert manual["text"] == "Erin is on items 0 and 1."
    assert manual["annotations"] == first[0].value["annotations"]
    assert manual["updated_by"] == "user:test"
    for _ in range(40):
        if worker.get(f"/channels/{CHANNEL}/summary").json()["content"] == manual["text"]:
            break
        await asyncio.sleep(0.25)
    else:
        pytest.fail("manual summary not served over HTTP")


async def test_a_burst_of_ten_times_the_pending_bound_leaves_no_message_out(
    chorus_settings: Settings, start_worker: object
) -> None:
    await create_topics(chorus_settings)
    bound, count = 10, 100
    start_worker(  # type: ignore[operator]
        CHORUS_SUMMARY_AFTER_MESSAGES="5",
        CHORUS_SUMMARY_MAX_PENDING=str(bound),
        CHORUS_SUMMARY_AFTER_SECONDS="1",
    )
    await send_messages(chorus_settings, talk(count, ["fay", "gus"]))

    def covered(records: list[Any]) -> bool:
        return bool(records) and records[-1].value["total_messages"] == count

    records = [r.value for r in await read_until(chorus_settings, "summaries", covered, 120)]
    # Consecutive records cover consecutive offsets, from the first message to the last.
    assert records[0]["first_offset"] == 0
    assert all(b["first_offset"] == a["last_offset"] + 1 for a, b in itertools.pairwise(records))
    assert records[-1]["last_offset"] == count - 1
    assert sum(b["last_offset"] - b["first_offset"] + 1 for b in records) == count
    assert not any("droppedItems" in r["annotations"] for r in records)
