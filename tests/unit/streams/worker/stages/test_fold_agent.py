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
from streams.kafka.batches import Published, PublishFailed, Record, Refused
from streams.records import ChannelConfig, DeadLetter, DriverEvent, MisplacedRecord, key_partition
from streams.settings import Settings
from streams.worker.runtime import Runtime
from streams.worker.stages.fold import MISPLACED_ENTRY_BYTES, Folder
from tests.unit.streams.worker.offline import offline_settings, offline_worker, taking

# Offline, the consumer knows no partition count: the settings' (4) is the topic's.
HOME = key_partition(b"off/line", 4)


async def until(done: Callable[[], bool]) -> None:
    while not done():
        await asyncio.sleep(0.001)


def offline_runtime() -> Runtime:
    return offline_worker().runtime


@contextmanager
def captured(
    on_publish: Callable[[Record], None] = lambda _: None,
) -> Iterator[list[tuple[str, bytes]]]:
    """(topic, value) of every record sent, in order: one at a time through Faust's
    Topic.send (dead letters) or a batch at a time through Runtime.publish (driver events)."""
    sent: list[tuple[str, bytes]] = []

    async def send(topic: Any, key: bytes | None = None, value: bytes = b"", **_: Any) -> None:
        sent.append((topic.get_topic_name(), value))

    async def publish(_: Runtime, topic: Any, records: Sequence[Record]) -> Published:
        for record in records:
            on_publish(record)
            assert record[1] is not None
            sent.append((topic.get_topic_name(), record[1]))
        return Published(list(range(len(records))), [])

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
            stored = chorus.folds_of(event.channel).get(projection)
            assert stored is not None and stored.offset == event.offset  # state first
            assert carried.changes is not None

    message = {"channel": "off/line", "sender": "ann", "type": "STATUS", "content": "hi"}
    with captured(state_first) as sent:
        async with taking(chorus) as put:
            await put(orjson.dumps(message), key=b"off/line", partition=HOME)
            await put(b"\x00not json", key=b"off/line", partition=HOME)

    # One batch: the dead letter goes out as the record is read, the driver event after
    # the batch's table writes.
    assert sorted(name for name, _ in sent) == ["offline.dead-letters", "offline.driver-events"]
    letter = DeadLetter.model_validate_json(next(v for n, v in sent if n.endswith("letters")))
    assert "not valid UTF-8 JSON" in letter.reason and letter.offset == 1
    overview = chorus.folds_of("off/line").get("overview")
    assert overview is not None
    assert overview.offset == 0 and overview.state["participants"] == {"ann": 1}


async def test_each_record_the_fold_takes_reaches_its_readers_once_in_log_order() -> None:
    """The views' recent messages come from the fold's own records (the log is read once):
    every record in order, refused ones too (a view hides them)."""
    worker = offline_worker()
    assert worker.window is not None
    message = {"channel": "off/line", "sender": "ann", "type": "STATUS", "content": "hi"}
    with captured():
        async with taking(worker.runtime) as put:
            await put(orjson.dumps(message), key=b"off/line", partition=HOME)
            await put(b"\x00not json", key=b"off/line", partition=HOME)
            await put(orjson.dumps(message), key=b"off/line", partition=HOME)
    window = worker.window.windows.get("off/line")
    assert window is not None and [offset for offset, _ in window.records] == [0, 1, 2]
    assert worker.window.live_from == {HOME: 0}


async def test_a_misplaced_record_is_dead_lettered_changes_nothing_and_its_partition_folds_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = offline_worker()
    chorus, folder = worker.runtime, worker.folder
    assert folder is not None
    away = "off/away"  # its records below sit in off/line's partition, not in its own
    assert key_partition(away.encode(), 4) != HOME

    def record(channel: str, content: str) -> bytes:
        return orjson.dumps(
            {"channel": channel, "sender": "ann", "type": "STATUS", "content": content}
        )

    caplog.set_level(logging.DEBUG, logger="streams.worker.stages.fold")
    with captured() as sent:
        async with taking(chorus) as put:
            for offset in range(5):  # off/line at 0, 2, 4; off/away (misplaced) at 1, 3
                channel = away if offset % 2 else "off/line"
                await put(record(channel, f"m{offset}"), key=channel.encode(), partition=HOME)

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
    overview = chorus.folds_of("off/line").get("overview")
    assert overview is not None
    assert overview.offset == 4 and overview.state["message_count"] == 3
    assert chorus.next_offset(HOME) == 5
    assert not [r for r in caplog.records if "jumped" in r.getMessage()]
    # No table holds anything of the misplaced channel, checkpointed or not.
    for table in chorus.checkpoint.tables:
        for partition in range(4):
            keys = [key for key, _ in table.scan(partition, "", "\uffff")]
            assert not [k for k in keys if away in str(k)], table.name
    assert chorus.meter.registry.get_sample_value("chorus_misplaced_records_total") == 2
    # Explained once per channel; later ones only at debug level.
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and away in r.getMessage()]
    assert len(warned) == 1


async def test_misplaced_records_are_explained_once_per_channel_within_a_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = Folder(Runtime(offline_settings(), broker="127.0.0.1:1"))
    folder._misplaced_logged.budget = 2 * MISPLACED_ENTRY_BYTES  # two channels remembered

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
        consumer_fetch_bytes=8 << 20,
    )
    conf = Runtime(settings, broker="127.0.0.1:1").app.conf
    assert conf.consumer_max_fetch_size == 8 << 20
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

    async def refused_three_times(_: Runtime, topic: Any, records: Sequence[Record]) -> Published:
        for _key, value, _partition in records:  # state first, on every attempt
            assert value is not None
            event = DriverEvent.model_validate_json(value)
            stored = chorus.folds_of(event.channel).get("overview")
            assert stored is not None and stored.offset == event.offset
        attempts.append(list(records))
        if len(attempts) <= 3:
            raise PublishFailed(f"{len(records)} of {len(records)} records not acknowledged")
        return Published(list(range(len(records))), [])

    message = {"channel": "off/line", "sender": "ann", "type": "STATUS", "content": "hi"}
    caplog.set_level(logging.WARNING, logger="streams.worker.stages.fold")
    with captured() as sent, patch.object(Runtime, "publish", refused_three_times):
        async with taking(chorus) as put:
            message_bytes = orjson.dumps(message)
            await put(message_bytes, key=b"off/line", partition=HOME)
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

    async def refuses_the_long_one(_: Runtime, topic: Any, records: Sequence[Record]) -> Published:
        published.append(list(records))
        offsets = [DriverEvent.model_validate_json(value or b"").offset for _, value, _ in records]
        refused = [Refused(i, MessageSizeTooLargeError()) for i, o in enumerate(offsets) if o == 1]
        return Published([None if o == 1 else o for o in offsets], refused)

    def record(content: str) -> bytes:
        return orjson.dumps(
            {"channel": "off/line", "sender": "ann", "type": "STATUS", "content": content}
        )

    with captured() as sent, patch.object(Runtime, "publish", refuses_the_long_one):
        async with taking(chorus) as put:
            for content in ["before", "refused", "after"]:
                await put(record(content), key=b"off/line", partition=HOME)

    assert sum(len(batch) for batch in published) == 3  # every event was offered once
    letters = [DeadLetter.model_validate_json(v) for n, v in sent if n.endswith("dead-letters")]
    assert [(letter.stage, letter.partition, letter.offset) for letter in letters] == [
        ("driver-event", HOME, 1)
    ]
    assert "refused its driver event for good" in letters[0].reason
    assert "MessageSizeTooLargeError" in letters[0].reason
    counted = chorus.meter.refused_records.labels("offline.driver-events")._value.get()
    assert counted == 1
    overview = chorus.folds_of("off/line").get("overview")
    assert overview is not None and overview.offset == 2  # the later message folded


async def test_folds_stay_in_memory_until_a_checkpoint_writes_each_changed_key_once() -> None:
    """A batch's folds are read by views and driver events at once, but reach the tables
    only at the checkpoint, one value per changed key whatever the messages; the batch's
    records stay unacknowledged until then."""
    worker = offline_worker()
    chorus, folder = worker.runtime, worker.folder
    assert folder is not None
    stored = chorus.app.tables["fold-overview-v3"]
    held: list[Any] = []

    def record(sender: str) -> bytes:
        return orjson.dumps({"channel": "off/line", "sender": sender, "type": "STATUS"})

    with captured() as sent:
        async with taking(chorus) as put:
            for sender in ("ann", "bob", "ann"):
                held.append(await put(record(sender), key=b"off/line", partition=HOME))
            await asyncio.wait_for(until(lambda: len(sent) == 3), 5)  # every driver event out
            assert stored.get("off/line") is None  # nothing written yet
            overview = chorus.folds_of("off/line").get("overview")
            assert overview is not None and overview.state["participants"] == {"ann": 2, "bob": 1}
            assert not any(message.acked for message in held)
            # Tracked as unacknowledged: Faust waits for them before a rebalance.
            assert set(held) <= set(chorus.app.consumer.unacked)

            written = await chorus.checkpoint.checkpoint()

    # Two folds and the partition's next offset: three keys, once each.
    assert written == 3
    assert all(message.acked for message in held)
    assert stored.get("off/line")["offset"] == 2
    assert chorus.positions.table.get(str(HOME)) == 3
    assert chorus.folds is not None
    chorus.folds.cache.clear()
    assert chorus.folds_of("off/line").get("overview") == overview  # read back from the store


async def test_commitments_fold_on_the_same_after_a_checkpoint_and_a_cache_miss() -> None:
    """A fold read back from the tables alone (the in-memory states forgotten) folds on the
    same as the pure fold."""
    from datetime import timedelta

    from projections.commitments import CommitmentProjection
    from projections.model import Message, MessageType, utc_now
    from projections.projection import canonical_hash, fold

    worker = offline_worker()
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
        async with taking(chorus) as put:
            for index, one in enumerate(messages):
                if index == 4:
                    await chorus.checkpoint.checkpoint()
                    assert chorus.folds is not None
                    chorus.folds.cache.clear()  # the next fold reads the tables only
                await put(one.model_dump_json().encode(), key=channel.encode(), partition=HOME)
    whole = chorus.folds_of(channel).get("commitments")
    assert whole is not None and whole.offset == 4
    assert canonical_hash(whole.state) == canonical_hash(fold(CommitmentProjection(), messages))


async def test_a_table_write_too_large_for_its_changelog_is_dead_lettered() -> None:
    """A value over the changelog's record limit is refused at the checkpoint (the table
    keeps the previous one) and its message goes to the dead letters with the reason."""
    chorus = offline_runtime()
    for table in chorus.checkpoint.tables:
        table._limit = 8  # every value is larger than this
    message = {"channel": "off/line", "sender": "ann", "type": "STATUS", "content": "hi"}
    with captured() as sent:
        async with taking(chorus) as put:
            await put(orjson.dumps(message), key=b"off/line", partition=HOME)
            await asyncio.wait_for(until(lambda: bool(sent)), 5)  # folded, its event out
            await chorus.checkpoint.checkpoint()

    letters = [DeadLetter.model_validate_json(v) for n, v in sent if n.endswith("dead-letters")]
    assert letters and {letter.stage for letter in letters} == {"table-write"}
    assert all("changelog record limit" in letter.reason for letter in letters)
    assert {(letter.partition, letter.offset) for letter in letters} == {(HOME, 0)}
    assert chorus.app.tables["fold-overview-v3"].get("off/line") is None
    assert chorus.folds_of("off/line").get("overview") is None  # the store's value: none


def status_batch(count: int) -> list[Any]:
    """`count` STATUS messages of channel off/line at offsets 0.., as the intake hands a
    batch to the fold agent (only what it reads)."""
    from types import SimpleNamespace

    value = orjson.dumps({"channel": "off/line", "sender": "ann", "type": "STATUS"})
    return [
        SimpleNamespace(key=b"off/line", value=value, partition=HOME, offset=offset, timestamp=0.0)
        for offset in range(count)
    ]


async def test_a_large_batch_sends_its_first_driver_events_before_it_has_folded_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    monkeypatch.setattr(streams.worker.stages.fold, "SIGNALS_AT_ONCE", 2)
    worker = offline_worker()
    chorus, folder = worker.runtime, worker.folder
    assert folder is not None
    folded_at_send: list[tuple[int, int]] = []

    def at_send(record: Record) -> None:
        overview = chorus.folds_of("off/line").get("overview")
        assert overview is not None
        offset = DriverEvent.model_validate_json(record[1] or b"").offset
        folded_at_send.append((offset, overview.state["message_count"]))

    batch = status_batch(5)
    with captured(at_send) as sent:
        await folder.on_batch(batch)  # type: ignore[arg-type]
        await folder.sent()
    # The first two went out once two of the five were folded, not after all of them.
    assert folded_at_send[:2] == [(0, 2), (1, 2)]
    assert [offset for offset, _ in folded_at_send] == [0, 1, 2, 3, 4] and len(sent) == 5


async def test_a_batchs_driver_events_reach_the_topic_in_the_order_of_its_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each lot is sent once the one before is acknowledged, however slow its broker."""

    monkeypatch.setattr(streams.worker.stages.fold, "SIGNALS_AT_ONCE", 2)
    worker = offline_worker()
    folder = worker.folder
    assert folder is not None
    published: list[int] = []
    in_flight: list[int] = []

    async def slow_first(_: Runtime, topic: Any, records: Sequence[Record]) -> Published:
        in_flight.append(len(in_flight))
        assert len(in_flight) == 1  # never two lots at once
        offsets = [DriverEvent.model_validate_json(value or b"").offset for _, value, _ in records]
        await asyncio.sleep(0.05 if offsets[0] == 0 else 0.0)  # the first lot is the slowest
        published.extend(offsets)
        in_flight.clear()
        return Published(offsets, [])

    batch = status_batch(5)
    with captured(), patch.object(Runtime, "publish", slow_first):
        await folder.on_batch(batch)  # type: ignore[arg-type]
        await folder.sent()
    assert published == [0, 1, 2, 3, 4]


async def test_the_next_batch_folds_while_the_driver_events_go_out_and_a_checkpoint_waits() -> None:
    """The fold does not wait for the broker between batches; a checkpoint acknowledges the
    held records only once their driver events are acknowledged (state, signal, commit)."""
    worker = offline_worker()
    chorus, folder = worker.runtime, worker.folder
    assert folder is not None
    gate = asyncio.Event()
    published: list[int] = []

    async def slow(_: Runtime, topic: Any, records: Sequence[Record]) -> Published:
        await gate.wait()
        offsets = [DriverEvent.model_validate_json(value or b"").offset for _, value, _ in records]
        published.extend(offsets)
        return Published(offsets, [])

    acked: list[int] = []
    with captured(), patch.object(Runtime, "publish", slow):
        batch = status_batch(2)
        for message in batch:
            message.incref = lambda: None
            message.ack = lambda _, offset=message.offset: bool(acked.append(offset))
            chorus.checkpoint.hold(message)
        await asyncio.wait_for(folder.on_batch(batch), 1)  # returns with events in flight
        assert published == []
        checkpointing = asyncio.create_task(chorus.checkpoint.checkpoint())
        await asyncio.sleep(0.05)
        assert not checkpointing.done() and acked == []  # waits for the driver events
        gate.set()
        await asyncio.wait_for(checkpointing, 1)
    assert published == [0, 1] and acked == [0, 1]


async def test_a_sender_outside_the_channels_writers_is_dead_lettered_and_never_shown() -> None:
    worker = offline_worker()
    chorus = worker.runtime
    assert worker.window is not None
    config = ChannelConfig(channel="off/line", writers=["role:ann"])
    async with chorus.app.agents["channel-config"].test_context() as configs:
        await configs.put(config.to_bytes(), key=b"off/line", partition=HOME)

    def status(sender: str) -> bytes:
        return orjson.dumps(
            {"channel": "off/line", "sender": sender, "type": "STATUS", "content": sender}
        )

    with captured() as sent:
        async with taking(chorus) as put:
            await put(status("ann"), key=b"off/line", partition=HOME)
            await put(status("mallory"), key=b"off/line", partition=HOME)

    [letter] = [DeadLetter.model_validate_json(v) for n, v in sent if n.endswith("dead-letters")]
    assert letter.offset == 1
    assert letter.reason == (
        "sender 'mallory' may not write to channel 'off/line' (its writers: role:ann)"
    )
    overview = chorus.folds_of("off/line").get("overview")
    assert overview is not None and overview.state["participants"] == {"ann": 1}
    # The views' window holds both records and shows what passes the fold's gate.
    with patch.object(chorus.ownership, "messages_partition", lambda _: HOME):
        shown = await worker.window.recent("off/line", 1, read_back=False)
    assert [message.sender for _, message in shown.messages] == ["ann"]
