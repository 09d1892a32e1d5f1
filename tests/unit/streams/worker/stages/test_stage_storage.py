"""How the summary and recap stages (the context role) store messages: the summary stage
keeps positions only (bodies in memory, else the log), the recap window one key per slot,
and in-memory indexes for the timers. Through Faust's test harness: no Kafka, sends captured."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

import orjson

from projections.summarise.pending import MAX_COMPACTED_PARTS, spoken
from streams.kafka.batches import Published, Record
from streams.records import SummaryRecord
from streams.settings import Settings
from streams.worker.compose import build_worker
from streams.worker.runtime import Runtime
from streams.worker.stages.recaps import RECAP_WINDOW
from streams.worker.stages.summaries import Summariser, header_batch, header_of

CHANNEL = "store/age"


async def fold_messages(
    count: int, published: Sequence[SummaryRecord] = (), **settings: Any
) -> tuple[Runtime, Any, Any]:
    worker = build_worker(
        Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1", **settings),
        broker="127.0.0.1:1",
        stages=("summaries", "recaps"),
        role="context",
    )
    chorus, summariser, recapper = worker.runtime, worker.summariser, worker.recapper
    assert isinstance(summariser, Summariser) and recapper is not None

    async def discard(*_: Any, **__: Any) -> None:
        return None

    async def publish(*_: Any, **__: Any) -> list[Any]:
        return []

    with patch("faust.topics.Topic.send", discard), patch.object(Runtime, "publish", publish):
        async with chorus.app.agents["feed-messages"].test_context() as agent:
            for n in range(count):
                message = {"channel": CHANNEL, "sender": "ann", "type": "STATUS"}
                message["content"] = f"m{n}"
                await agent.put(orjson.dumps(message), key=CHANNEL.encode())
        # What the follower reads of the summaries topic, in order, after the messages.
        for offset, record in enumerate(published):
            summariser.latest.on_consumed(
                SimpleNamespace(  # type: ignore[arg-type]
                    key=CHANNEL.encode(), value=record.to_bytes(), partition=0, offset=offset
                )
            )
        await chorus.checkpoint.checkpoint()  # what the tables hold from now on
    return chorus, summariser, recapper


def stored(chorus: Runtime) -> dict[str, Any]:
    """The channel's record in the context role's table: one for all its stages."""
    record: dict[str, Any] = chorus.app.tables["channel-state"][CHANNEL]
    return record


async def test_pending_batch_is_positions_and_no_table_holds_a_message_body() -> None:
    chorus, summariser, _ = await fold_messages(5, summary_after_messages=50)

    header = stored(chorus)["pending"]
    assert header["offsets"] == [0, 1, 2, 3, 4] and "items" not in header
    assert not any("summary-items" in name for name in chorus.app.tables)
    # The bodies are in memory (the log is their copy), so no read goes to Kafka here.
    batch = summariser.batch_of(CHANNEL)
    messages = await summariser.messages_of(CHANNEL, batch, partition=0)
    assert [m.content for m in messages] == ["m0", "m1", "m2", "m3", "m4"]
    # Not due yet (5 of 50 messages): the timer index holds the time threshold.
    assert batch.pending_since is not None
    assert summariser.due_at[CHANNEL] > batch.pending_since


async def test_recap_window_is_positions_read_back_oldest_first() -> None:
    count = RECAP_WINDOW + 7
    chorus, _, recapper = await fold_messages(count)

    status = stored(chorus)["recap"]  # what the changelog holds
    assert "window" not in status and status["message_count"] == count
    assert status["window_offsets"] == list(range(7, count))
    assert not any("recap-window" in name for name in chorus.app.tables)
    recap = recapper.recap_of(CHANNEL)
    window = await recapper.window_of(CHANNEL, recap)
    assert [m.content for m in window] == [f"m{n}" for n in range(7, count)]
    # Memory holds the window only: what left it is forgotten (the log still has it).
    assert sorted(recapper.bodies.memory.of(CHANNEL)) == list(range(7, count))
    assert recapper.statuses[CHANNEL] == recap.status


async def test_a_summary_trims_the_header_and_forgets_the_bodies_it_covers() -> None:
    covered = SummaryRecord(channel=CHANNEL, text="so far", first_offset=0, last_offset=2)
    chorus, summariser, _ = await fold_messages(5, [covered], summary_after_messages=50)

    assert stored(chorus)["pending"]["offsets"] == [3, 4]
    kept = summariser.bodies.memory.of(CHANNEL)
    assert {offset: m.content for offset, m in kept.items()} == {3: "m3", 4: "m4"}
    assert summariser.covered_offset(CHANNEL) == 2
    summariser.moved({1})  # its partition (0) went to another worker
    assert summariser.covered_offset(CHANNEL) == -1
    summariser.on_summary(covered, 0)  # read again once the partition is back
    assert summariser.covered_offset(CHANNEL) == 2


def test_a_stored_header_reads_back_as_its_batch() -> None:
    stored_header = {"offsets": [3, 9], "pending_since": None, "spans": {"9": [4, 6]}}
    batch = header_batch(stored_header)
    assert [(i.start, i.offset, i.covers) for i in batch.items] == [(3, 3, 1), (4, 9, 6)]
    assert header_of(batch) == stored_header
    header = header_batch({"offsets": [4, 5], "pending_since": "2026-03-01T12:00:00+00:00"})
    assert header.last_offset == 5 and header.pending_since == datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert header_batch(None).items == []


async def test_a_burst_of_ten_times_the_bound_is_compacted_never_dropped() -> None:
    # The first batch is in flight (its summary never comes back here), so the burst piles up.
    bound, count = 10, 100
    chorus, summariser, _ = await fold_messages(
        count, summary_after_messages=5, summary_max_pending=bound
    )

    header = stored(chorus)["pending"]
    assert len(header["offsets"]) == bound
    batch = summariser.batch_of(CHANNEL)
    spans = [(item.start, item.offset) for item in batch.items]
    # The batch in flight (0-4) is left as it is: its summary trims exactly those.
    assert spans[:5] == [(n, n) for n in range(5)] and spans[-1][1] == count - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
    assert batch.covers == count
    messages = await summariser.messages_of(CHANNEL, batch, partition=0)
    said = [content for m in messages for _, content in spoken(m)]
    assert said == [f"m{n}" for n in range(count)]
    start, end = spans[5]
    assert start < end and messages[5].payload == {
        "compacted": {"messages": end - start + 1, "senders": ["ann"]}
    }


async def test_bodies_memory_let_go_are_read_back_and_what_the_log_lacks_is_counted() -> None:
    _, summariser, _ = await fold_messages(5, summary_after_messages=50)
    summariser.bodies.memory.drop_through(CHANNEL, 1)  # as after a restart, for 0 and 1
    asked: list[tuple[int, int, int, int | None]] = []

    async def log_without_them(
        partition: int, first: int, last: int, _: Any, limit: int | None = None
    ) -> list[Any]:
        asked.append((partition, first, last, limit))
        return []  # as if the log's retention had been cut

    sent: list[bytes] = []

    async def capture(_: Runtime, topic: Any, records: Sequence[Record]) -> Published:
        sent.extend(value for _, value, _ in records if value is not None)
        return Published(list(range(len(records))), [])

    summariser.bodies.reader.read = log_without_them  # type: ignore[method-assign]
    with patch.object(Runtime, "publish", capture):
        await summariser.summarise(CHANNEL, summariser.batch_of(CHANNEL), partition=3)

    assert asked == [(3, 0, 1, None)]
    record = SummaryRecord.model_validate_json(sent[0])
    assert (record.first_offset, record.last_offset, record.total_messages) == (0, 4, 5)
    assert record.annotations["unreadItems"] == "2" and "m4" in record.text


async def test_a_compacted_run_is_read_back_no_further_than_what_it_shows() -> None:
    bound, count = 3, 40
    _, summariser, _ = await fold_messages(
        count, summary_after_messages=50, summary_max_pending=bound
    )
    summariser.bodies.memory.drop_through(CHANNEL, count)  # as after a restart
    batch = summariser.batch_of(CHANNEL)
    asked: list[tuple[int, int, int | None]] = []

    async def log_of(partition: int, first: int, last: int, _: Any, limit: int | None = None):  # type: ignore[no-untyped-def]
        asked.append((first, last, limit))
        return []

    summariser.bodies.reader.read = log_of  # type: ignore[method-assign]
    await summariser.messages_of(CHANNEL, batch, partition=0)

    compacted = [(i.start, i.offset, MAX_COMPACTED_PARTS) for i in batch.items if i.compacted]
    singles = [i.offset for i in batch.items if not i.compacted]
    assert compacted and asked[: len(compacted)] == compacted
    assert asked[len(compacted) :] == ([(min(singles), max(singles), None)] if singles else [])


async def test_an_older_summary_read_again_never_replaces_the_latest() -> None:
    """Bug 19's rule, kept without the state refresh that triggered it: a copy of an older
    summary read (again) after a newer one is ignored, so the next batch builds on the
    newer one."""
    newer = SummaryRecord(channel=CHANNEL, text="New.", narrative="New.", last_offset=4)
    older = SummaryRecord(channel=CHANNEL, text="Old.", narrative="Old.", last_offset=2)
    _, summariser, _ = await fold_messages(5, [newer, older], summary_after_messages=50)
    assert summariser.covered_offset(CHANNEL) == 4
    assert summariser.narrative(CHANNEL) == "New."


async def test_the_timers_rebuild_their_indexes_from_the_tables() -> None:
    """After a restart or a partition move the in-memory indexes are empty: the timers'
    full scans find the pending batches and the recap statuses in the tables."""
    chorus, summariser, recapper = await fold_messages(5, summary_after_messages=50)
    due_at, statuses = dict(summariser.due_at), dict(recapper.statuses)
    assert due_at and statuses
    summariser.due_at.clear()
    recapper.statuses.clear()
    chorus.forget_cached()  # the scans are due at the next tick
    await summariser.check_time_thresholds()
    await recapper.check_deadlines()
    assert summariser.due_at == due_at and recapper.statuses == statuses


async def test_no_batch_is_summarised_while_its_latest_summary_is_read_back() -> None:
    """After a restart or a move, a channel's partition of the summaries topic is read from
    its beginning: a summary launched before would not build on the latest."""
    from datetime import timedelta

    _, summariser, _ = await fold_messages(3, summary_after_messages=50)
    batch = summariser.batch_of(CHANNEL)
    later = datetime.now(UTC) + timedelta(days=1)  # past the time threshold
    summariser.latest.restoring[3] = 10
    assert not summariser.maybe_launch(CHANNEL, batch, 3, later)
    del summariser.latest.restoring[3]
    assert summariser.maybe_launch(CHANNEL, batch, 3, later)
