"""The fold agent through Faust's test harness: no Kafka, sends captured."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

import orjson
import pytest
from aiokafka.errors import MessageSizeTooLargeError

import streams.worker.stages.fold
from streams.records import DeadLetter, DriverEvent, MisplacedRecord, key_partition
from streams.settings import Settings
from streams.worker.compose import build_worker
from streams.worker.runtime import PublishFailed, Record, Refused, Runtime
from streams.worker.stages.fold import Folder

# Offline, the consumer knows no partition count: the settings' (4) is the topic's.
HOME = key_partition(b"off/line", 4)


async def until(done: Callable[[], bool]) -> None:
    while not done():
        await asyncio.sleep(0.001)


def offline_runtime() -> Runtime:
    """The worker's runtime with no broker: Faust's test harness drives its agents."""
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    return build_worker(settings, broker="127.0.0.1:1").runtime


@contextmanager
def captured(
    on_publish: Callable[[Record], None] = lambda _: None,
) -> Iterator[list[tuple[str, bytes]]]:
    """(topic, value) of every record sent, in order: one at a time through Faust's
    Topic.send (dead letters) or a batch at a time through Runtime.publish (driver events)."""
    sent: list[tuple[str, bytes]] = []

    async def send(topic: Any, key: bytes | None = None, value: bytes = b"", **_: Any) -> None:
        sent.append((topic.get_topic_name(), value))

    async def publish(_: Runtime, topic: Any, records: Sequence[Record]) -> list[Refused]:
        for record in records:
            on_publish(record)
            assert record[1] is not None
            sent.append((topic.get_topic_name(), record[1]))
        return []

    with patch("faust.topics.Topic.send", send), patch.object(Runtime, "publish", publish):
        yield sent


async def test_fold_agent_writes_state_before_it_wakes_drivers() -> None:
    chorus = offline_runtime()

    def state_first(record: Record) -> None:
        key, value, partition = record
        assert value is not None
        event = DriverEvent.model_validate_json(value)
        assert key == b"off/line" and partition == HOME
        assert set(event.projections) == {"commitments", "overview"}  # one event, all of them
        for projection, carried in event.projections.items():
            stored = chorus.folds[projection].get(event.channel)
            assert stored is not None and stored["offset"] == event.offset  # state first
            assert carried.changes is not None

    message = {"channel": "off/line", "sender": "ann", "type": "STATUS", "content": "hi"}
    with captured(state_first) as sent:
        async with chorus.app.agents["fold-messages"].test_context() as agent:
            await agent.put(orjson.dumps(message), key=b"off/line", partition=HOME)
            await agent.put(b"\x00not json", key=b"off/line", partition=HOME)

    # One batch: the dead letter goes out as the record is read, the driver event after
    # the batch's table writes.
    assert sorted(name for name, _ in sent) == ["offline.dead-letters", "offline.driver-events"]
    letter = DeadLetter.model_validate_json(next(v for n, v in sent if n.endswith("letters")))
    assert "not valid UTF-8 JSON" in letter.reason and letter.offset == 1
    overview = chorus.folded("off/line", "overview")
    assert overview is not None
    assert overview.offset == 0 and overview.state["participants"] == {"ann": 1}


async def test_a_misplaced_record_is_dead_lettered_changes_nothing_and_its_partition_folds_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chorus = offline_runtime()
    away = "off/away"  # its records below sit in off/line's partition, not in its own
    assert key_partition(away.encode(), 4) != HOME

    def record(channel: str, content: str) -> bytes:
        return orjson.dumps(
            {"channel": channel, "sender": "ann", "type": "STATUS", "content": content}
        )

    caplog.set_level(logging.DEBUG, logger="streams.worker.stages.fold")
    with captured() as sent:
        async with chorus.app.agents["fold-messages"].test_context() as agent:
            for offset in range(5):  # off/line at 0, 2, 4; off/away (misplaced) at 1, 3
                channel = away if offset % 2 else "off/line"
                await agent.put(record(channel, f"m{offset}"), key=channel.encode(), partition=HOME)

    letters = [DeadLetter.model_validate_json(v) for n, v in sent if n.endswith("dead-letters")]
    assert [letter.offset for letter in letters] == [1, 3]
    for letter in letters:
        assert letter.stage == "validate" and letter.partition == HOME
        assert letter.reason == str(MisplacedRecord(away, HOME, key_partition(away.encode(), 4), 4))
        assert f"'{away}' is on partition {HOME} but belongs on partition" in letter.reason
        assert "partitioner=murmur2_random" in letter.reason
    events = [DriverEvent.model_validate_json(v) for n, v in sent if n.endswith("driver-events")]
    assert {e.channel for e in events} == {"off/line"} and len(
        events
    ) == 3  # one per folded message
    # The record after each misplaced one folds: the partition's next offset moved past it.
    overview = chorus.folds["overview"].get("off/line")
    assert overview["offset"] == 4 and overview["state"]["message_count"] == 3
    assert chorus.positions.get(str(HOME)) == 5
    assert not [r for r in caplog.records if "jumped" in r.getMessage()]
    # No table holds anything of the misplaced channel: no fold, summary or recap input.
    for table in chorus.app.tables.values():
        assert not [k for k in table if away in str(k)], table.name
    assert chorus.meter.registry.get_sample_value("chorus_misplaced_records_total") == 2
    # Explained once per channel; later ones only at debug level.
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and away in r.getMessage()]
    assert len(warned) == 1


async def test_misplaced_records_are_explained_once_per_channel_within_a_bound(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams.worker.stages.fold, "MISPLACED_LOGGED_LIMIT", 2)
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    folder = Folder(Runtime(settings, broker="127.0.0.1:1"))

    caplog.set_level(logging.WARNING, logger="streams.worker.stages.fold")
    with captured():
        for channel in ["a/1", "a/2", "a/1", "a/3", "a/2", "a/1"]:
            error = MisplacedRecord(channel, 0, 1, 4)
            await folder.send_misplaced(error, channel.encode(), b"{}", 0, 0)
    explained = [r.getMessage().split("'")[1] for r in caplog.records]
    # a/1 is remembered while it recurs; a/3 pushes out a/2, which is explained again, and
    # that pushes out a/1 (the oldest seen).
    assert explained == ["a/1", "a/2", "a/3", "a/2", "a/1"]


def test_worker_settings_reach_faust() -> None:
    settings = Settings(
        store="memory://",
        bootstrap_servers="x:1",
        producer_linger_ms=7,
        producer_batch_bytes=65_536,
        standby_replicas=0,
    )
    conf = Runtime(settings, broker="127.0.0.1:1").app.conf
    assert conf.producer_linger == 0.007
    assert conf.producer_max_batch_size == 65_536
    assert conf.table_standby_replicas == 0

    # A produce batch must fit the smallest topic limit (max_message_bytes + 64 KiB).
    small = Settings(store="memory://", bootstrap_servers="x:1", max_message_bytes=25_000)
    assert Runtime(small, broker="127.0.0.1:1").app.conf.producer_max_batch_size == 25_000


async def test_driver_events_the_broker_refused_are_sent_again_until_it_takes_them(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch is acknowledged once wake returns: it must not return (or raise, as Faust
    then acknowledges the batch anyway) before the broker has every driver event."""
    monkeypatch.setattr(streams.worker.stages.fold, "PUBLISH_RETRY_SECONDS", (0.001, 0.002))
    chorus = offline_runtime()
    attempts: list[list[Record]] = []

    async def refused_three_times(
        _: Runtime, topic: Any, records: Sequence[Record]
    ) -> list[Refused]:
        for _key, value, _partition in records:  # state first, on every attempt
            assert value is not None
            event = DriverEvent.model_validate_json(value)
            stored = chorus.folds["overview"].get(event.channel)
            assert stored is not None and stored["offset"] == event.offset
        attempts.append(list(records))
        if len(attempts) <= 3:
            raise PublishFailed(f"{len(records)} of {len(records)} records not acknowledged")
        return []

    message = {"channel": "off/line", "sender": "ann", "type": "STATUS", "content": "hi"}
    caplog.set_level(logging.WARNING, logger="streams.worker.stages.fold")
    with captured() as sent, patch.object(Runtime, "publish", refused_three_times):
        async with chorus.app.agents["fold-messages"].test_context() as agent:
            message_bytes = orjson.dumps(message)
            await agent.put(message_bytes, key=b"off/line", partition=HOME)
            await asyncio.wait_for(until(lambda: len(attempts) > 3), 5)
    assert sent == []
    assert len(attempts) == 4 and all(attempt == attempts[0] for attempt in attempts)
    assert [DriverEvent.model_validate_json(v).offset for _, v, _ in attempts[0]] == [0]
    # Each failure is logged; the wait doubles up to its bound.
    assert [r.getMessage() for r in caplog.records] == [
        "sending the batch's 1 driver events again in 0.001s",
        "sending the batch's 1 driver events again in 0.002s",
        "sending the batch's 1 driver events again in 0.002s",
    ]


async def test_a_driver_event_refused_for_good_is_dead_lettered_and_the_rest_are_sent() -> None:
    """Too large for the topic (an operator set its max.message.bytes low): retrying would
    stop the partition for good, so the event is counted and dead-lettered instead."""
    chorus = offline_runtime()
    published: list[list[Record]] = []

    async def refuses_the_long_one(
        _: Runtime, topic: Any, records: Sequence[Record]
    ) -> list[Refused]:
        published.append(list(records))
        offsets = [DriverEvent.model_validate_json(value or b"").offset for _, value, _ in records]
        return [Refused(i, MessageSizeTooLargeError()) for i, o in enumerate(offsets) if o == 1]

    def record(content: str) -> bytes:
        return orjson.dumps(
            {"channel": "off/line", "sender": "ann", "type": "STATUS", "content": content}
        )

    with captured() as sent, patch.object(Runtime, "publish", refuses_the_long_one):
        async with chorus.app.agents["fold-messages"].test_context() as agent:
            for content in ["before", "refused", "after"]:
                await agent.put(record(content), key=b"off/line", partition=HOME)

    assert sum(len(batch) for batch in published) == 3  # every event was offered once
    letters = [DeadLetter.model_validate_json(v) for n, v in sent if n.endswith("dead-letters")]
    assert [(letter.stage, letter.partition, letter.offset) for letter in letters] == [
        ("driver-event", HOME, 1)
    ]
    assert "refused its driver event for good" in letters[0].reason
    assert "MessageSizeTooLargeError" in letters[0].reason
    counted = chorus.meter.refused_records.labels("offline.driver-events")._value.get()
    assert counted == 1
    assert chorus.folds["overview"].get("off/line")["offset"] == 2  # the later message folded


async def test_commitments_are_stored_split_and_read_back_whole_after_a_cache_miss() -> None:
    """Each commitment is a record of the second table (an active one until it ends, an
    ended one once); the fold record keeps the counters, the active ids and the earliest
    deadline; a fold from the tables alone (the in-memory states forgotten) folds on the
    same."""
    from datetime import timedelta

    from projections.commitments import CommitmentProjection
    from projections.model import Message, MessageType, utc_now
    from projections.projection import canonical_hash, fold
    from streams.fold_store import ACTIVE_IDS, ENDED_SEQS, active_key, ended_key, record_deadline

    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    worker = build_worker(settings, broker="127.0.0.1:1")
    chorus, folder = worker.runtime, worker.folder
    assert folder is not None
    channel = "off/line"

    def message(kind: MessageType, cid: str, **fields: Any) -> Message:
        return Message(
            channel=channel, sender="ann", type=kind, content="do it", correlation_id=cid, **fields
        )

    first = message(MessageType.COMMAND, "a")
    second = message(MessageType.COMMAND, "b")
    deadline = utc_now() + timedelta(hours=1)
    still_open = message(MessageType.COMMAND, "c", deadline=deadline)
    messages = [
        first,
        message(MessageType.DONE, "a", in_reply_to=first.id),
        second,
        still_open,
        message(MessageType.DONE, "b", in_reply_to=second.id),
    ]
    with captured():
        async with chorus.app.agents["fold-messages"].test_context() as agent:
            for index, one in enumerate(messages):
                if index == 4:
                    folder._loaded.clear()  # the next fold reads the tables only
                await agent.put(
                    one.model_dump_json().encode(), key=channel.encode(), partition=HOME
                )
    record = chorus.folds["commitments"].get(channel)
    assert record[ENDED_SEQS] == [0, 2] and record["state"]["commitments"] == {}
    assert record[ACTIVE_IDS] == [still_open.id] and record_deadline(record) == deadline
    ended = chorus.parts["commitments"]
    assert ended.get(ended_key(channel, 0))["commitment"]["id"] == first.id
    assert ended.get(ended_key(channel, 1))["commitment"]["id"] == second.id
    assert ended.get(active_key(channel, still_open.id))["commitment"]["state"] == "OPEN"
    assert ended.get(active_key(channel, second.id)) is None  # ended: deleted
    whole = chorus.folded(channel, "commitments")
    assert whole is not None and whole.offset == 4
    # the expiry timer's full scan finds the deadline in the fold record alone
    folder._deadlines.clear()
    assert await folder.expire_overdue(utc_now()) == 0
    assert folder._deadlines == {channel: deadline}
    assert canonical_hash(whole.state) == canonical_hash(fold(CommitmentProjection(), messages))


async def test_the_overview_is_stored_in_versioned_buckets_and_replaced_ones_go_last() -> None:
    """The fold record names a bucket version per participant bucket; a message writes its
    sender's bucket under a new version; the version it replaces is deleted only after the
    producer has flushed the writes that stopped naming it (bug 17); read back from the
    tables alone, the overview is the pure fold."""
    from projections.model import Message, MessageType
    from projections.overview import ChannelOverviewProjection
    from projections.projection import dump_state, fold
    from streams.fold_store import PARTICIPANT_PARTS, bucket_of, bucket_part, part_key

    settings = Settings(
        store="memory://", topic_prefix="offline.", bootstrap_servers="x:1", fold_batch_max=1
    )  # a batch per message: each replaced bucket was written by an earlier batch
    worker = build_worker(settings, broker="127.0.0.1:1")
    chorus, folder = worker.runtime, worker.folder
    assert folder is not None
    channel = "off/line"
    messages = [
        Message(channel=channel, sender=sender, type=MessageType.STATUS, content="hi")
        for sender in ("ann", "bob", "ann")
    ]
    parts = chorus.parts["overview"]
    ann = bucket_of("ann")
    at_flush: list[set[str]] = []

    async def acknowledged() -> None:
        at_flush.append({str(key) for key in parts})

    with captured(), patch.object(chorus, "acknowledged", acknowledged):
        async with chorus.app.agents["fold-messages"].test_context() as agent:
            for index, one in enumerate(messages):
                if index == 2:
                    folder._loaded.clear()  # the next fold reads the tables only
                await agent.put(
                    one.model_dump_json().encode(), key=channel.encode(), partition=HOME
                )
    record = chorus.folds["overview"].get(channel)
    assert record["state"]["participants"] == {}
    assert record[PARTICIPANT_PARTS][ann] == 2
    first, latest = part_key(channel, bucket_part(ann, 0)), part_key(channel, bucket_part(ann, 2))
    assert at_flush and all(first in keys for keys in at_flush)  # kept until the flush
    assert latest in {str(key) for key in parts} and first not in {str(key) for key in parts}
    whole = chorus.folded(channel, "overview")
    assert whole is not None
    assert whole.state == dump_state(fold(ChannelOverviewProjection(), messages))


async def test_replaced_parts_are_deleted_at_most_once_a_second_after_the_acknowledgements() -> (
    None
):
    """Deletions wait for the producer's acknowledgements, so they are flushed when due (the
    first at once, then at most every DELETIONS_EVERY_SECONDS) or when forced, not with
    every batch; until then a reader sees the part as deleted."""
    from streams.fold_store import part_key
    from streams.worker.stages.fold import DELETIONS_EVERY_SECONDS

    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    worker = build_worker(settings, broker="127.0.0.1:1")
    chorus, folder = worker.runtime, worker.folder
    assert folder is not None
    waited: list[float] = []

    async def acknowledged() -> None:
        waited.append(0.0)

    table: dict[str, Any] = {}  # the second table's store (Faust's needs a stream's event)
    folder.parts["overview"].table = table
    folder.removed["overview"].table = table
    read = folder._reader("overview")
    with patch.object(chorus, "acknowledged", acknowledged):
        for at, key in ((100.0, "a"), (100.5, "b"), (100.0 + DELETIONS_EVERY_SECONDS, "c")):
            table[part_key("x/y", key)] = {"kept": True}
            folder.removed["overview"].discard(part_key("x/y", key))
            assert read(part_key("x/y", key)) is None  # staged: gone for a reader
            flushed = await folder.delete_replaced(at)
            assert flushed == {"a": 1, "b": 0, "c": 2}[key]
        assert len(waited) == 2
        table[part_key("x/y", "d")] = {"kept": True}
        folder.removed["overview"].discard(part_key("x/y", "d"))
        assert await folder.delete_replaced(100.0 + DELETIONS_EVERY_SECONDS, force=True) == 1
    assert table == {}


async def test_a_table_write_too_large_for_its_changelog_is_dead_lettered() -> None:
    """A fold record over the changelog's record limit is refused (the table keeps the
    previous one) and its message goes to the dead letters with the reason, as in the
    context role's feed. (It was collected but never sent: the dead-letter loop sat after
    a return, from 6805856 on.)"""
    chorus = offline_runtime()
    for table in chorus.staging.tables:
        table._limit = 64  # every fold record is larger than this
    message = {"channel": "off/line", "sender": "ann", "type": "STATUS", "content": "hi"}
    with captured() as sent:
        async with chorus.app.agents["fold-messages"].test_context() as agent:
            await agent.put(orjson.dumps(message), key=b"off/line", partition=HOME)

    letters = [DeadLetter.model_validate_json(v) for n, v in sent if n.endswith("dead-letters")]
    assert letters and {letter.stage for letter in letters} == {"table-write"}
    assert all("changelog record limit" in letter.reason for letter in letters)
    assert {letter.offset for letter in letters} == {0}
    assert chorus.staging.drain_refused() == []  # sent, not kept
