"""How the summary and recap stages (the context role) store messages: the summary stage
keeps positions only (bodies in memory, else the log), the recap window positions, and the
deadline index the timers read. Through Faust's test harness: no Kafka, sends captured."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest.mock import patch

import orjson
import pytest

from projections.recap.window import RECAP_WINDOW
from projections.summarise.pending import MAX_COMPACTED_PARTS, spoken
from streams.kafka.batches import Published, Record
from streams.records import SummaryRecord, key_partition
from streams.worker.runtime import Runtime
from streams.worker.stages.recaps import Recapper
from streams.worker.stages.summaries import InFlight, Summariser, header_batch, header_of
from tests.unit.streams.worker.offline import TopicRecords, offline_worker, taking, turns_given

CHANNEL = "store/age"
HOME = key_partition(CHANNEL.encode(), 4)
FAR = datetime.now(UTC) + timedelta(days=30)


async def fold_messages(
    count: int, published: Sequence[SummaryRecord] = (), **settings: Any
) -> tuple[Runtime, Summariser, Recapper]:
    worker = offline_worker("context", stages=("summaries", "recaps"), **settings)
    chorus, summariser, recapper = worker.runtime, worker.summariser, worker.recapper
    assert isinstance(summariser, Summariser) and recapper is not None
    summaries = TopicRecords(CHANNEL.encode())
    summariser.latest.reader = summaries  # type: ignore[assignment]

    async def discard(*_: Any, **__: Any) -> None:
        return None

    async def publish(*_: Any, **__: Any) -> list[Any]:
        return []

    with patch("faust.topics.Topic.send", discard), patch.object(Runtime, "publish", publish):
        async with taking(chorus) as put:
            for n in range(count):
                message = {"channel": CHANNEL, "sender": "ann", "type": "STATUS"}
                message["content"] = f"m{n}"
                await put(orjson.dumps(message), key=CHANNEL.encode(), partition=HOME)
        # What the agent reads of the summaries topic, in order, after the messages.
        for offset, record in enumerate(published):
            summaries.records[(HOME, offset)] = record.to_bytes()
            await summariser.followed.take(CHANNEL.encode(), record.to_bytes(), HOME, offset)
        await chorus.checkpoint.checkpoint()  # what the tables hold from now on
    return chorus, summariser, recapper


@contextmanager
def launches_recorded(chorus: Runtime, summariser: Summariser) -> Iterator[list[str]]:
    """The summariser owning the channel's partition and reading no log, its launches
    recorded (each channel whose summary it starts) instead of summarised."""
    chorus.ownership.owned_partitions = lambda: frozenset({HOME})  # type: ignore[method-assign]
    summariser.bodies.reader = TopicRecords()  # type: ignore[assignment]
    launched: list[str] = []

    async def summarise(channel: str, *_: Any) -> None:
        launched.append(channel)

    with patch.object(summariser, "summarise", summarise):
        yield launched


def stored(chorus: Runtime) -> dict[str, Any]:
    """The channel's record in the context role's table: one for all its stages."""
    record: dict[str, Any] = chorus.app.tables["channel-state"][CHANNEL]
    return record


async def test_pending_batch_is_positions_and_no_table_holds_a_message_body() -> None:
    chorus, summariser, _ = await fold_messages(5, summary_after_messages=50)

    header = stored(chorus)["pending"]
    assert header["offsets"] == [0, 1, 2, 3, 4] and "items" not in header
    # The bodies are in memory (the log is their copy), so no read goes to Kafka here.
    batch = summariser.batch_of(CHANNEL, HOME)
    messages = await summariser.messages_of(CHANNEL, batch, HOME)
    assert [m.content for m in messages] == ["m0", "m1", "m2", "m3", "m4"]
    # Not due yet (5 of 50 messages): the deadline index holds the time threshold.
    assert batch.pending_since is not None
    ((entry,),) = [summariser.index.due(HOME, FAR, 10)]
    assert entry.channel == CHANNEL and entry.at > batch.pending_since


async def test_recap_window_is_positions_read_back_oldest_first() -> None:
    count = RECAP_WINDOW + 7
    chorus, _, recapper = await fold_messages(count)

    status = stored(chorus)["recap"]  # what the changelog holds
    assert "window" not in status and status["message_count"] == count
    assert status["window_offsets"] == list(range(7, count))
    recap = recapper.recap_of(CHANNEL, HOME)
    window = await recapper.window_of(CHANNEL, recap, HOME)
    assert [m.content for m in window] == [f"m{n}" for n in range(7, count)]
    # Memory holds the window only: what left it is forgotten (the log still has it).
    assert sorted(recapper.bodies.memory.of(CHANNEL)) == list(range(7, count))
    # One index entry for the countdown, put when it started (not one per message): it
    # fires at or before the countdown's end, and is moved there then. The index keeps
    # whole milliseconds, rounded up: messages within one millisecond leave the entry up
    # to a millisecond past the end (the fresh-clone run of ca1428f saw 26.961 → 27 ms).
    ((entry,),) = [recapper.index.due(HOME, FAR, 10)]
    due_at = recap.status.due_at
    assert entry.channel == CHANNEL and due_at is not None
    assert entry.at < due_at + timedelta(milliseconds=1)


async def test_a_summary_trims_the_header_and_forgets_the_bodies_it_covers() -> None:
    covered = SummaryRecord(channel=CHANNEL, text="so far", first_offset=0, last_offset=2)
    chorus, summariser, _ = await fold_messages(5, [covered], summary_after_messages=50)

    assert stored(chorus)["pending"]["offsets"] == [3, 4]
    assert stored(chorus)["summary"] == [HOME, 0, 2]  # where it is, what it covers through
    kept = summariser.bodies.memory.of(CHANNEL)
    assert {offset: m.content for offset, m in kept.items()} == {3: "m3", 4: "m4"}
    assert summariser.covered_offset(CHANNEL, HOME) == 2
    assert await summariser.narrative(CHANNEL) == "so far"  # read back by its position


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
    batch = summariser.batch_of(CHANNEL, HOME)
    spans = [(item.start, item.offset) for item in batch.items]
    # The batch in flight (0-4) is left as it is: its summary trims exactly those.
    assert spans[:5] == [(n, n) for n in range(5)] and spans[-1][1] == count - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
    assert batch.covers == count
    messages = await summariser.messages_of(CHANNEL, batch, HOME)
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
        await summariser.summarise(CHANNEL, summariser.batch_of(CHANNEL, HOME), HOME)

    assert asked == [(HOME, 0, 1, None)]
    record = SummaryRecord.model_validate_json(sent[0])
    assert (record.first_offset, record.last_offset, record.total_messages) == (0, 4, 5)
    assert record.annotations["unreadItems"] == "2" and "m4" in record.text


async def test_a_compacted_run_is_read_back_no_further_than_what_it_shows() -> None:
    bound, count = 3, 40
    _, summariser, _ = await fold_messages(
        count, summary_after_messages=50, summary_max_pending=bound
    )
    summariser.bodies.memory.drop_through(CHANNEL, count)  # as after a restart
    batch = summariser.batch_of(CHANNEL, HOME)
    asked: list[tuple[int, int, int | None]] = []

    async def log_of(partition: int, first: int, last: int, _: Any, limit: int | None = None):  # type: ignore[no-untyped-def]
        asked.append((first, last, limit))
        return []

    summariser.bodies.reader.read = log_of  # type: ignore[method-assign]
    await summariser.messages_of(CHANNEL, batch, HOME)

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
    assert summariser.covered_offset(CHANNEL, HOME) == 4
    assert await summariser.narrative(CHANNEL) == "New."


async def test_what_falls_due_is_in_the_tables_and_a_tick_launches_it() -> None:
    """The deadline index is a table: with every cache forgotten (a restart), the summary
    time threshold's tick finds the channel due and launches its batch."""
    chorus, summariser, _ = await fold_messages(5, summary_after_messages=50)
    chorus.ownership.owned_partitions = lambda: frozenset({HOME})  # type: ignore[method-assign]
    for cache in chorus.caches:
        cache.clear()
    log = TopicRecords()  # nothing: the bodies memory forgot are not read here
    summariser.bodies.reader = log  # type: ignore[assignment]
    launched: list[str] = []

    async def summarise(channel: str, *_: Any) -> None:
        launched.append(channel)

    with patch.object(summariser, "summarise", summarise):
        assert await summariser.check_time_thresholds(datetime.now(UTC)) == 0  # not yet
        assert await summariser.check_time_thresholds(FAR) == 1
        await asyncio_idle()
    assert launched == [CHANNEL]
    assert log.reads == [(0, 4, None)]  # the lot's bodies (offsets 0-4), read back at once
    # The entry stays while its summary is in flight: a worker that dies meanwhile leaves
    # it to the next one; the summary read back moves the batch on, and the entry with it.
    assert [e.channel for e in summariser.index.due(HOME, FAR, 10)] == [CHANNEL]


async def test_no_batch_is_summarised_while_its_latest_summary_is_caught_up_with() -> None:
    """After a restart or a move, the agent reads the summaries partition from its committed
    offset: a summary launched before it caught up would not build on the latest."""
    _, summariser, _ = await fold_messages(3, summary_after_messages=50)
    batch = summariser.batch_of(CHANNEL, HOME)
    summariser.followed.catching_up.add(HOME)
    assert not summariser.maybe_launch(CHANNEL, batch, HOME, FAR)
    summariser.followed.catching_up.discard(HOME)
    assert summariser.maybe_launch(CHANNEL, batch, HOME, FAR)


async def asyncio_idle() -> None:
    import asyncio

    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_config_that_brings_a_threshold_sooner_indexes_the_batch_by_it() -> None:
    from streams.records import ChannelConfig

    chorus, summariser, _ = await fold_messages(3, summary_after_seconds=3600)
    batch = summariser.batch_of(CHANNEL, HOME)
    assert batch.pending_since is not None
    soon = batch.pending_since + timedelta(seconds=1)
    assert summariser.index.due(HOME, soon + timedelta(seconds=1), 10) == []
    config = ChannelConfig(channel=CHANNEL, summary_after_seconds=1)
    chorus.configs.cache.put(CHANNEL, (config, chorus.configs.conditions(CHANNEL)), 100, HOME)
    for changed in chorus.configs.listeners:  # as the config stage's put tells them
        changed(CHANNEL, HOME)
    ((entry,),) = [summariser.index.due(HOME, soon + timedelta(seconds=1), 10)]
    assert entry.channel == CHANNEL


async def test_summaries_in_flight_are_bounded_and_a_tick_skips_them_without_reading() -> None:
    """A million channels falling due together: a tick launches only while fewer than
    SUMMARIES_IN_FLIGHT are in flight, and passes over those in flight without reading
    their batches; what is left stays in the index for a later tick."""
    from streams.worker.stages import summaries as stage

    chorus, summariser, _ = await fold_messages(5, summary_after_messages=50)
    with launches_recorded(chorus, summariser) as launched:
        for n in range(stage.SUMMARIES_IN_FLIGHT):  # in flight, as launched by earlier ticks
            summariser.launched[f"team/other-{n}"] = InFlight(0, None)
        assert await summariser.check_time_thresholds(FAR) == 0
        assert [e.channel for e in summariser.index.due(HOME, FAR, 10)] == [CHANNEL]
        summariser.launched[CHANNEL] = InFlight(99, None)  # its own in flight, the others done
        for n in range(stage.SUMMARIES_IN_FLIGHT):
            del summariser.launched[f"team/other-{n}"]
        read: list[str] = []
        batch_of = summariser.batch_of
        summariser.batch_of = lambda c, p: read.append(c) or batch_of(c, p)  # type: ignore[method-assign, func-returns-value]
        assert await summariser.check_time_thresholds(FAR) == 0 and read == []
        del summariser.launched[CHANNEL]
        assert await summariser.check_time_thresholds(FAR) == 1
        await asyncio_idle()
    assert launched == [CHANNEL]


async def test_a_tick_gives_the_event_loop_back_while_it_reads_due_batches() -> None:
    """A tick reads a batch per due entry (a table read and a decode): every
    DUE_ENTRIES_PER_SLICE of them it lets the heartbeats, the fold and the views run."""
    from streams.worker.deadlines import DUE_ENTRIES_PER_SLICE

    chorus, summariser, _ = await fold_messages(5, summary_after_messages=50)
    chorus.ownership.owned_partitions = lambda: frozenset({HOME})  # type: ignore[method-assign]
    stale = 3 * DUE_ENTRIES_PER_SLICE  # entries whose channels have nothing pending
    for n in range(stale):
        summariser.index.put(f"team/emptied-{n}", FAR - timedelta(hours=1), HOME)

    async def summarise(*_: Any) -> None:
        return None

    with patch.object(summariser, "summarise", summarise):
        launched, turns = await turns_given(summariser.check_time_thresholds(FAR))
        await asyncio_idle()
    assert launched == 1  # the channel with a batch; the emptied entries moved away
    assert [e.channel for e in summariser.index.due(HOME, FAR, stale + 10)] == [CHANNEL]
    assert turns >= stale // DUE_ENTRIES_PER_SLICE


async def test_a_tick_reads_the_index_a_slice_at_a_time_past_the_entries_in_flight() -> None:
    """Reading every due entry at once (up to the summaries in flight and a tick's lot:
    600) held the loop 10-17 ms of CPU at 1,000,000 channels, on top of a slice's batch
    reads: the index is read DUE_ENTRIES_PER_SLICE entries at a time, the loop given back
    between, and the entries in flight it passes over never keep it from those due after
    them."""
    from streams.worker.deadlines import DUE_ENTRIES_PER_SLICE
    from streams.worker.stages.summaries import InFlight

    chorus, summariser, _ = await fold_messages(5, summary_after_messages=50)
    chorus.ownership.owned_partitions = lambda: frozenset({HOME})  # type: ignore[method-assign]
    flying = 2 * DUE_ENTRIES_PER_SLICE + 1  # due before the channel, their summaries out
    for n in range(flying):
        summariser.index.put(f"team/flying-{n}", datetime.now(UTC) - timedelta(hours=2), HOME)
        summariser.launched[f"team/flying-{n}"] = InFlight(0, None)
    (first,) = [e for e in summariser.index.due(HOME, FAR, 100) if e.channel == CHANNEL]
    assert summariser.index.due(HOME, FAR, 100)[flying] == first  # read in the third slice
    limits: list[int] = []
    due = summariser.index.due

    def recorded(*args: Any, **kwargs: Any) -> Any:
        limits.append(args[2])
        return due(*args, **kwargs)

    async def summarise(*_: Any) -> None:
        return None

    with (
        patch.object(summariser.index, "due", recorded),
        patch.object(summariser, "summarise", summarise),
    ):
        launched, turns = await turns_given(summariser.check_time_thresholds(FAR))
        await asyncio_idle()
    assert launched == 1  # the channel's batch, past the entries in flight
    # Each slice read on after the last: the third, short, ends the index's due entries.
    assert limits == [DUE_ENTRIES_PER_SLICE] * 3
    assert turns >= len(limits)


@pytest.mark.parametrize("count", [3, 5])
async def test_a_batch_launched_at_its_message_threshold_keeps_one_entry_in_the_index(
    count: int,
) -> None:
    """The message threshold launches the summary as the message is taken: while it is in
    flight (messages after it included) the index keeps the batch's time threshold alone (it
    brings the batch back should the summary fail), not an entry due now for a tick to move
    (four changelog records a summary), since the summary read back moves the batch on."""
    _, summariser, _ = await fold_messages(count, summary_after_messages=3)
    assert CHANNEL in summariser.launched
    (entry,) = summariser.index.due(HOME, FAR, 10)
    since = summariser.batch_of(CHANNEL, HOME).pending_since
    assert since is not None
    threshold = since + timedelta(seconds=summariser.thresholds(CHANNEL, HOME)[1])
    assert timedelta(0) <= entry.at - threshold < timedelta(milliseconds=1)  # ms, rounded up


async def test_a_batch_due_sooner_replaces_its_entry_and_one_due_later_keeps_it() -> None:
    """One entry per channel: a due time that moves sooner replaces the entry (removed, not
    left to fire for nothing), one that moves later leaves it to fire early and be moved."""
    _, summariser, _ = await fold_messages(3, summary_after_seconds=3600)
    (later,) = summariser.index.due(HOME, FAR, 10)
    summariser.index_by(CHANNEL, later.at + timedelta(hours=1), HOME)
    assert summariser.index.due(HOME, FAR, 10) == [later]
    sooner = later.at - timedelta(minutes=30)
    summariser.index_by(CHANNEL, sooner, HOME)
    assert [entry.at for entry in summariser.index.due(HOME, FAR, 10)] == [sooner]


async def test_a_summary_that_failed_is_tried_again_at_its_time_threshold() -> None:
    """A summariser that raises leaves the batch pending (`Summariser.summarise`): its
    entry, the time threshold's, brings it back then (or the channel's next message does),
    never a tick a second."""
    chorus, summariser, _ = await fold_messages(3, summary_after_messages=3)
    summariser.launched.pop(CHANNEL)  # as a summary that raised does
    with launches_recorded(chorus, summariser) as tried:
        assert await summariser.check_time_thresholds(datetime.now(UTC)) == 0
        assert await summariser.check_time_thresholds(FAR) == 1
        await asyncio_idle()
    assert tried == [CHANNEL]


async def test_what_came_after_a_batch_in_flight_waits_its_own_time_threshold() -> None:
    """A summary read back leaves what came after its batch pending: those messages came
    after the batch was launched, so they fall due a time threshold after the launch, not
    after the batch's first message (a summary of the few that came meanwhile, at once)."""
    chorus, summariser, _ = await fold_messages(
        5, summary_after_messages=3, summary_after_seconds=60
    )
    assert summariser.launched[CHANNEL].through == 2  # the first three, in flight
    batch = summariser.batch_of(CHANNEL, HOME)
    long_ago = datetime.now(UTC) - timedelta(hours=1)  # the batch's first message's time
    summariser.pending.set(CHANNEL, batch.model_copy(update={"pending_since": long_ago}), HOME)
    summary = SummaryRecord(channel=CHANNEL, text="m0 m1 m2", first_offset=0, last_offset=2)
    with launches_recorded(chorus, summariser) as launched:
        await summariser.followed.take(CHANNEL.encode(), summary.to_bytes(), HOME, 0)
        await asyncio_idle()
    rest = summariser.batch_of(CHANNEL, HOME)
    assert [item.offset for item in rest.items] == [3, 4]
    assert rest.pending_since is not None and rest.pending_since > long_ago
    assert launched == []  # due a minute after the launch, by which the messages came


async def test_the_next_summary_builds_on_the_one_the_agent_read_without_reading_it_back() -> None:
    """Each summary read the previous one back from the topic by its position, one read at
    a time for the whole role; the agent that follows the topic had just read it."""
    covered = SummaryRecord(channel=CHANNEL, text="so far", first_offset=0, last_offset=2)
    _, summariser, _ = await fold_messages(5, [covered], summary_after_messages=50)
    assert await summariser.narrative(CHANNEL) == "so far"
    assert summariser.latest.reader.reads == []  # type: ignore[attr-defined]


async def test_the_next_recap_reads_the_one_the_agent_read_without_reading_it_back() -> None:
    from projections.recap.phase import RecapPhase
    from streams.records import RecapRecord

    _, _, recapper = await fold_messages(3)
    recaps = TopicRecords(CHANNEL.encode())
    recapper.latest.reader = recaps  # type: ignore[assignment]
    done = RecapRecord(channel=CHANNEL, text="Where it stands.", phase=RecapPhase.COMPLETED)
    recapper.on_recap(CHANNEL.encode(), done.to_bytes(), HOME, 0)
    assert (await recapper.latest.latest(CHANNEL, HOME)).record == done
    assert recaps.reads == []


async def test_summaries_being_written_as_the_role_stops_are_stopped_before_its_producer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 40: summaries still being written when the role stopped published after Faust
    had stopped its producer, a traceback each. The role's stop cancels them first, quietly,
    and none is launched after; the batch stays pending and due in the index, so the next
    start writes it."""
    import logging

    from tests.unit.streams.worker.offline import stopped_while_publishing

    chorus, summariser, _ = await fold_messages(5, summary_after_messages=50)
    chorus.ownership.owned_partitions = lambda: frozenset({HOME})  # type: ignore[method-assign]
    summariser.bodies.reader = TopicRecords()  # type: ignore[assignment]
    taken = await stopped_while_publishing(
        chorus, lambda: summariser.check_time_thresholds(FAR), summariser.outbox
    )
    assert taken == 1 and not summariser.lots
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    summariser.launched.clear()  # as if nothing were in flight: still none launched
    assert await summariser.check_time_thresholds(FAR) == 0
    assert not summariser.launched
    assert [e.channel for e in summariser.index.due(HOME, FAR, 10)] == [CHANNEL]
    assert len(summariser.batch_of(CHANNEL, HOME).items) == 5


async def test_a_batch_due_by_its_time_waits_until_the_log_is_read_up_to_then() -> None:
    """Behind a backlog the feed takes a channel's messages long after they were written:
    a time threshold counted from when they were taken passes before the rest of the
    channel's messages, already in the log, are read, and each batch would be summarised in
    pieces (a summary per 7 messages instead of 20 through the bench's backlog). So a batch
    due by its time alone waits until the role has read the partition up to when it fell
    due: a record stamped after that applied, or nothing left unread."""
    chorus, summariser, _ = await fold_messages(
        5, summary_after_messages=50, summary_after_seconds=60
    )
    batch = summariser.batch_of(CHANNEL, HOME)
    assert batch.pending_since is not None
    fell_due = batch.pending_since + timedelta(seconds=60)
    assert chorus.next_offset(HOME) == 5
    unread = {"highwater": 1005}  # the consumer's last fetch: 1,000 records still to take
    with (
        patch.object(chorus.app.consumer, "highwater", lambda _: unread["highwater"]),
        launches_recorded(chorus, summariser) as launched,
    ):
        assert await summariser.check_time_thresholds(FAR) == 0
        assert not summariser.maybe_launch(CHANNEL, batch, HOME, FAR)
        assert [e.channel for e in summariser.index.due(HOME, FAR, 10)] == [CHANNEL]  # kept
        chorus.read_ms[HOME] = int(fell_due.timestamp() * 1000) + 1  # read up to then
        assert await summariser.check_time_thresholds(FAR) == 1
        summariser.launched.pop(CHANNEL)
        chorus.read_ms[HOME] = 0
        unread["highwater"] = 5  # nothing left unread
        assert summariser.maybe_launch(CHANNEL, batch, HOME, FAR)
        await asyncio_idle()
    assert launched == [CHANNEL, CHANNEL]


async def test_a_batch_at_its_message_threshold_is_launched_however_far_behind_the_role_is() -> (
    None
):
    chorus, summariser, _ = await fold_messages(3, summary_after_messages=3)
    summariser.launched.pop(CHANNEL)  # as a summary that raised does
    batch = summariser.batch_of(CHANNEL, HOME)
    with (
        patch.object(chorus.app.consumer, "highwater", lambda _: 100_000),
        launches_recorded(chorus, summariser) as launched,
    ):
        assert summariser.maybe_launch(CHANNEL, batch, HOME, datetime.now(UTC))
        await asyncio_idle()
    assert launched == [CHANNEL]


async def test_a_summary_on_another_partition_than_its_channels_is_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """chorus.summaries is partitioned like chorus.messages: a record of the channel on
    another partition (a producer with another partitioner) is logged and left out, never
    filed under, nor read with the config of, a partition the channel is not on."""
    _, summariser, _ = await fold_messages(3, summary_after_messages=50)
    elsewhere = (HOME + 1) % 4
    record = SummaryRecord(channel=CHANNEL, text="Misplaced.", last_offset=2)
    await summariser.followed.take(CHANNEL.encode(), record.to_bytes(), elsewhere, 0)
    assert summariser.covered_offset(CHANNEL, elsewhere) == -1
    assert summariser.covered_offset(CHANNEL, HOME) == -1
    assert len(summariser.batch_of(CHANNEL, HOME).items) == 3
    assert f"partition {elsewhere}" in caplog.text and CHANNEL in caplog.text
