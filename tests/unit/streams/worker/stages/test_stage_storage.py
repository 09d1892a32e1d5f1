"""How the summary and recap stages store messages: one key per message, small headers, and
in-memory indexes for the timers. Through Faust's test harness: no Kafka, sends captured."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from unittest.mock import patch

import orjson

from projections.summarise.pending import spoken
from streams.records import SummaryRecord
from streams.settings import Settings
from streams.worker.compose import build_worker
from streams.worker.runtime import Runtime
from streams.worker.stages.recaps import RECAP_WINDOW
from streams.worker.stages.summaries import header_batch, item_key

CHANNEL = "store/age"


async def fold_messages(
    count: int, published: Sequence[SummaryRecord] = (), **settings: Any
) -> tuple[Runtime, Any, Any]:
    worker = build_worker(
        Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1", **settings),
        broker="127.0.0.1:1",
        stages=("fold", "summaries", "recaps"),
    )
    chorus, summariser, recapper = worker.runtime, worker.summariser, worker.recapper
    assert summariser is not None and recapper is not None

    async def discard(*_: Any, **__: Any) -> None:
        return None

    with patch("faust.topics.Topic.send", discard), patch.object(Runtime, "publish", discard):
        async with chorus.app.agents["fold-messages"].test_context() as agent:
            for n in range(count):
                message = {"channel": CHANNEL, "sender": "ann", "type": "STATUS"}
                message["content"] = f"m{n}"
                await agent.put(orjson.dumps(message), key=CHANNEL.encode())
        async with chorus.app.agents["record-summaries"].test_context() as agent:
            for record in published:
                await agent.put(record.to_bytes(), key=CHANNEL.encode())
    return chorus, summariser, recapper


async def test_pending_batch_is_a_header_and_each_message_is_stored_once() -> None:
    _, summariser, _ = await fold_messages(5, summary_after_messages=50)

    header = summariser.pending.get(CHANNEL)
    assert header["offsets"] == [0, 1, 2, 3, 4] and "items" not in header
    stored = [summariser.items.get(item_key(CHANNEL, offset)) for offset in range(5)]
    assert [m["content"] for m in stored] == ["m0", "m1", "m2", "m3", "m4"]

    batch = summariser.with_messages(CHANNEL, summariser.batch_of(CHANNEL))
    assert [m.content for m in batch.messages()] == ["m0", "m1", "m2", "m3", "m4"]
    # Not due yet (5 of 50 messages): the timer index holds the time threshold.
    assert summariser.due_at[CHANNEL] > batch.pending_since


async def test_recap_window_is_a_ring_read_back_oldest_first() -> None:
    count = RECAP_WINDOW + 7
    _, _, recapper = await fold_messages(count)

    status = recapper.table.get(CHANNEL)
    assert "window" not in status and status["message_count"] == count
    recap = recapper.with_window(CHANNEL, recapper.recap_of(CHANNEL))
    assert [m.content for m in recap.messages()] == [f"m{n}" for n in range(7, count)]
    assert recapper.statuses[CHANNEL] == recap.status


async def test_a_summary_trims_the_header_and_deletes_the_messages_it_covers() -> None:
    covered = SummaryRecord(channel=CHANNEL, text="so far", first_offset=0, last_offset=2)
    _, summariser, _ = await fold_messages(5, [covered], summary_after_messages=50)

    assert summariser.pending.get(CHANNEL)["offsets"] == [3, 4]
    kept = [summariser.items.get(item_key(CHANNEL, offset)) for offset in range(5)]
    assert [m and m["content"] for m in kept] == [None, None, None, "m3", "m4"]
    assert summariser.covered_offset(CHANNEL) == 2


def test_an_old_format_batch_with_inline_messages_is_read_as_it_is() -> None:
    message = {"channel": CHANNEL, "sender": "ann", "type": "STATUS", "content": "old"}
    old = {"items": [{"offset": 3, "message": message}], "pending_since": None, "dropped": 2}

    batch = header_batch(old)

    assert [(i.offset, i.message["content"]) for i in batch.items] == [(3, "old")]
    header = header_batch({"offsets": [4, 5], "pending_since": "2026-03-01T12:00:00+00:00"})
    assert header.last_offset == 5 and header.pending_since == datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert header_batch(None).items == []


async def test_a_burst_of_ten_times_the_bound_is_compacted_never_dropped() -> None:
    # The first batch is in flight (its summary never comes back here), so the burst piles up.
    bound, count = 10, 100
    _, summariser, _ = await fold_messages(
        count, summary_after_messages=5, summary_max_pending=bound
    )

    header = summariser.pending.get(CHANNEL)
    assert len(header["offsets"]) == bound
    batch = summariser.with_messages(CHANNEL, summariser.batch_of(CHANNEL))
    spans = [(item.start, item.offset) for item in batch.items]
    # The batch in flight (0-4) is left as it is: its summary trims exactly those.
    assert spans[:5] == [(n, n) for n in range(5)] and spans[-1][1] == count - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
    assert batch.covers == count
    said = [content for m in batch.messages() for _, content in spoken(m)]
    assert said == [f"m{n}" for n in range(count)]
    # What compaction merged away is no longer stored on its own.
    start, end = spans[5]
    assert start < end and summariser.items.get(item_key(CHANNEL, start)) is None
    assert summariser.items.get(item_key(CHANNEL, end))["payload"]["compacted"]
