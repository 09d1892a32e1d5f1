"""streams.worker.checkpoint: state read through memory and written to its tables once per
checkpoint, the source records acknowledged only after the changelog has the state. The
Faust table, app and producer are stand-ins with the interfaces the module uses."""

from __future__ import annotations

import asyncio
import itertools
import tracemalloc
from dataclasses import dataclass
from typing import Any
from unittest.mock import patch

import orjson
import pytest
from aiokafka.errors import NotLeaderForPartitionError

import streams.worker.checkpoint
from streams.memory import ByteCache
from streams.worker.checkpoint import Checkpoint, Codec, RefusedWrite
from tests.unit.streams.worker.offline import offline_worker


def cache(budget: int = 100_000) -> ByteCache[Any, Any]:
    return ByteCache("test", budget)


class Topic:
    def __init__(self, name: str) -> None:
        self.name = name

    def get_topic_name(self) -> str:
        return self.name


class Table:
    """A Faust table's store as Faust's recovery writes it (`apply_changelog_batch`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.changelog_topic = Topic(f"app-{name}-changelog")
        self.data: dict[Any, Any] = {}
        self.applied: list[list[Any]] = []

    def get(self, key: Any, default: Any = None) -> Any:
        return self.data.get(key, default)

    def items(self) -> Any:
        return self.data.items()

    def __iter__(self) -> Any:
        return iter(self.data)

    def apply_changelog_batch(self, events: list[Any]) -> None:
        self.applied.append(events)
        for event in events:
            assert orjson.loads(event.message.key) == event.key  # Faust's JSON of the key
            if event.message.value is None:
                self.data.pop(event.key, None)
            else:
                assert orjson.loads(event.message.value) == event.value
                self.data[event.key] = event.value


class Metadata:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class Batch:
    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None]] = []

    def append(self, *, key: bytes | None, value: bytes | None, timestamp: None) -> object:
        self.records.append((key, value))
        return object()

    def close(self) -> None:
        pass


class Kafka:
    """aiokafka's batch interface; batches are acknowledged at once unless `failures`."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, list[tuple[bytes | None, bytes | None]]]] = []
        self.failures = 0
        self.gate: asyncio.Event | None = None
        self.waiting: set[asyncio.Task[None]] = set()

    def create_batch(self) -> Batch:
        return Batch()

    async def send_batch(self, batch: Batch, topic: str, *, partition: int) -> Any:
        self.sent.append((topic, partition, batch.records))
        future = asyncio.get_running_loop().create_future()
        if self.failures:
            self.failures -= 1
            future.set_exception(NotLeaderForPartitionError())
        elif self.gate is not None:
            gate = self.gate

            async def later() -> None:
                await gate.wait()
                if not future.done():  # its checkpoint may have been cancelled
                    future.set_result(Metadata(100 * len(self.sent)))

            self.waiting.add(asyncio.ensure_future(later()))
        else:
            future.set_result(Metadata(100 * len(self.sent)))
        return future


@dataclass
class Producer:
    kafka: Kafka

    def _ensure_producer(self) -> Kafka:
        return self.kafka


class Consumer:
    def __init__(self) -> None:
        self.commits = 0
        self.acked: list[int] = []  # offsets whose final acknowledgement it was told of

    async def commit(self) -> bool:
        self.commits += 1
        return True

    def ack(self, message: Message) -> bool:
        self.acked.append(message.offset)
        return True


class App:
    def __init__(self) -> None:
        self.kafka = Kafka()
        self.producer = Producer(self.kafka)
        self.consumer = Consumer()
        self.rebalancing = False


class Message:
    """A source record as the stage's intake hands it over: no reference on it yet."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.tp = ("src", 0)
        self.refcount = 0
        self.acked = False

    def incref(self) -> None:
        self.refcount += 1

    def ack(self, consumer: Consumer) -> bool:
        self.refcount -= 1
        if self.refcount == 0 and not self.acked:
            self.acked = True
            return consumer.ack(self)
        return False


def held(state: Checkpoint, offset: int) -> Message:
    """A record the stage held."""
    message = Message(offset)
    state.hold(message)  # type: ignore[arg-type]
    return message


def checkpoint(app: App, **options: Any) -> Checkpoint:
    return Checkpoint(
        app, "src", interval=options.pop("interval", 5.0), max_keys=10, max_held=10, **options
    )


async def test_reads_see_changes_at_once_and_a_checkpoint_writes_each_key_once() -> None:
    app = App()
    table = Table("folds")
    state = checkpoint(app)
    folds = state.table(table, cache=cache())
    for count in range(1, 4):
        folds.set("a", {"n": count}, partition=1, offset=count)
    folds.set("b", {"n": 1}, partition=2)
    assert folds.get("a", 1) == {"n": 3} and table.data == {}
    assert list(folds.scan(1, "", "z")) == [("a", {"n": 3})]

    assert await state.checkpoint() == 2
    assert sorted((t, p, r) for t, p, r in app.kafka.sent) == [
        ("app-folds-changelog", 1, [(b'"a"', b'{"n":3}')]),
        ("app-folds-changelog", 2, [(b'"b"', b'{"n":1}')]),
    ]
    assert table.data == {"a": {"n": 3}, "b": {"n": 1}}
    offsets = sorted(event.message.offset for batch in table.applied for event in batch)
    assert offsets == [100, 200]  # the changelog offsets the broker acknowledged
    assert folds.changed == 0 and await state.checkpoint() == 0  # nothing changed since


async def test_a_codec_decodes_once_and_encodes_once_per_checkpoint() -> None:
    app = App()
    table = Table("boxes")
    table.data["a"] = [1]
    decoded: list[Any] = []

    def decode(value: Any) -> tuple[int, ...]:
        decoded.append(value)
        return tuple(value)

    state = checkpoint(app)
    boxes = state.table(table, cache=cache(), codec=Codec(encode=list, decode=decode))
    assert boxes.get("a", 0) == (1,) and boxes.get("a", 0) == (1,) and decoded == [[1]]
    boxes.set("a", (1, 2), partition=0)
    await state.checkpoint()
    assert table.data["a"] == [1, 2] and boxes.get("a", 0) == (1, 2) and decoded == [[1]]


async def test_held_records_are_acknowledged_only_after_the_changelog_has_their_state() -> None:
    app = App()
    app.kafka.gate = asyncio.Event()
    state = checkpoint(app)
    folds = state.table(Table("folds"))
    events = [held(state, offset) for offset in range(3)]
    for event in events:
        folds.set("a", {"n": event.offset}, partition=0)
    assert state.held == 3

    writing = asyncio.create_task(state.checkpoint())
    for _ in range(5):
        await asyncio.sleep(0)
    assert app.kafka.sent and not writing.done()
    assert not any(event.acked for event in events) and app.consumer.commits == 0
    assert folds.get("a", 0) == {"n": 2}  # readable while it is written
    app.kafka.gate.set()
    await asyncio.wait_for(writing, 1)
    assert all(event.acked for event in events) and app.consumer.commits == 1
    assert app.consumer.acked == [0, 1, 2] and state.held == 0


async def test_a_checkpoint_never_takes_half_a_batch() -> None:
    app = App()
    state = checkpoint(app)
    folds = state.table(Table("folds"))
    in_batch = asyncio.Event()
    finish = asyncio.Event()

    async def batch() -> None:
        async with state.between_batches():
            held(state, 0)
            folds.set("a", 1, partition=0)
            in_batch.set()
            await finish.wait()  # e.g. waiting for the batch's driver events
            held(state, 1)
            folds.set("b", 1, partition=0)

    running = asyncio.create_task(batch())
    await in_batch.wait()
    writing = asyncio.create_task(state.checkpoint())
    await asyncio.sleep(0.01)
    assert app.kafka.sent == []  # waits for the batch to end
    finish.set()
    assert await asyncio.wait_for(writing, 1) == 2
    await running
    assert state.held == 0


async def test_a_checkpoint_the_broker_did_not_acknowledge_is_written_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams.worker.checkpoint, "RETRY_SECONDS", (0.001, 0.002))
    app = App()
    app.kafka.failures = 2
    table = Table("folds")
    state = checkpoint(app)
    folds = state.table(table)
    event = held(state, 0)
    folds.set("a", 1, partition=0)
    await asyncio.wait_for(state.checkpoint(), 1)
    assert len(app.kafka.sent) == 3 and table.data == {"a": 1} and event.acked


async def test_a_value_over_the_record_limit_is_refused_and_the_store_keeps_its_own() -> None:
    app = App()
    table = Table("recaps")
    table.data["a"] = "old"
    refused: list[RefusedWrite] = []

    async def report(write: RefusedWrite) -> None:
        refused.append(write)

    state = checkpoint(app, record_limit=16, on_refused=report)
    guarded = state.table(table, cache=cache())
    unguarded = state.table(Table("folds"), guard=False)
    guarded.set("a", "x" * 40, partition=3, offset=9)
    guarded.set("c", "z" * 40, partition=1, offset=4, topic="other")
    guarded.set("b", "small", partition=3)
    unguarded.set("a", "y" * 40, partition=3)
    assert await state.checkpoint() == 2
    assert table.data == {"a": "old", "b": "small"} and guarded.get("a", 3) == "old"
    assert [(r.table, r.key, r.size, r.limit, r.topic, r.partition, r.offset) for r in refused] == [
        ("recaps", "a", 42, 16, "src", 3, 9),  # made by a record of the source topic
        ("recaps", "c", 42, 16, "other", 1, 4),  # made by a record of another topic
    ]
    assert "over the 16-byte changelog record limit" in refused[0].reason


def test_a_checkpoint_is_due_at_the_interval_the_memory_bound_or_a_rebalance() -> None:
    app = App()
    with patch("time.monotonic", return_value=1000.0):
        state = checkpoint(app, interval=5.0)
    folds = state.table(Table("folds"))
    assert not state.due(2000.0)  # nothing to write
    folds.set("a", 1, partition=0)
    assert not state.due(1004.0) and state.due(1005.0)
    app.rebalancing = True
    assert state.due(1001.0)  # partitions are being revoked: now
    app.rebalancing = False
    for key in range(10):  # max_keys
        folds.set(key, 1, partition=0)
    assert state.over_bound() and state.due(1001.0)


async def test_while_faust_waits_for_every_acknowledgement_what_is_held_is_checkpointed() -> None:
    """Faust waits until every delivered message is acknowledged before a rebalance hands
    partitions over or the consumer stops; a held message is acknowledged by a checkpoint,
    and the checkpoint timer stops with the app, so the app checkpoints meanwhile."""
    import faust

    chorus = offline_worker().runtime
    event = held(chorus.checkpoint, 0)

    async def until_acknowledged(app: Any, consumer: Any, logger: Any) -> None:
        while not event.acked:  # Faust's wait: every delivered message acknowledged
            await asyncio.sleep(0.01)

    with patch.object(faust.App, "_consumer_wait_empty", until_acknowledged):
        await asyncio.wait_for(chorus.app._consumer_wait_empty(None, None), 5)
    assert chorus.checkpoint.held == 0


async def test_columns_of_one_key_are_one_record_per_checkpoint() -> None:
    """Two stages' values of a channel: each reads and writes its own column, a checkpoint
    writes one record per changed channel with both."""

    from streams.worker.checkpoint import Columns

    app = App()
    table = Table("channel-state")
    table.data["a"] = {"pending": [1], "retired": "ignored"}
    state = checkpoint(app)
    columns = Columns(state, table)
    pending = columns.column("pending", Codec(encode=list, decode=tuple))
    recap = columns.column("recap")
    assert pending.get("a", 0) == (1,) and recap.get("a", 0) is None

    pending.set("a", (1, 2), partition=0, offset=7)
    recap.set("a", {"phase": "ACTIVE"}, partition=0, offset=7)
    recap.set("b", {"phase": "IDLE"}, partition=1, offset=8)
    assert pending.get("a", 0) == (1, 2) and recap.get("b", 1) == {"phase": "IDLE"}
    assert await state.checkpoint() == 2  # one record per key, both columns in it
    assert table.data == {
        "a": {"pending": [1, 2], "recap": {"phase": "ACTIVE"}},
        "b": {"recap": {"phase": "IDLE"}},
    }


async def test_a_value_its_codec_cannot_encode_is_refused_and_nothing_stays_held() -> None:
    """Issue 40: an encode error left the checkpoint's held events unacknowledged for ever
    (Faust's wait before a rebalance never ended) and dropped the other changes."""
    app = App()
    refused: list[RefusedWrite] = []

    async def report(write: RefusedWrite) -> None:
        refused.append(write)

    def encode(value: str) -> str:
        if value == "bad":
            raise ValueError("cannot encode")
        return value

    state = checkpoint(app, on_refused=report)
    table = Table("folds")
    folds = state.table(table, codec=Codec(encode=encode, decode=lambda value: value))
    event = held(state, 0)
    folds.set("a", "bad", partition=0, offset=3)
    folds.set("b", "good", partition=0)
    assert await state.checkpoint() == 1
    assert event.acked and state.held == 0
    assert table.data == {"b": "good"}
    assert [(r.key, r.offset) for r in refused] == [("a", 3)]
    assert "could not be encoded (ValueError: cannot encode)" in refused[0].reason


async def test_a_checkpoint_cancelled_half_way_gives_everything_back_for_the_next() -> None:
    app = App()
    app.kafka.gate = asyncio.Event()  # the broker does not answer
    state = checkpoint(app)
    table = Table("folds")
    folds = state.table(table)
    event = held(state, 0)
    folds.set("a", 1, partition=0)
    writing = asyncio.create_task(state.checkpoint())
    await asyncio.wait_for(until(lambda: bool(app.kafka.sent)), 1)
    folds.set("b", 2, partition=0)  # changed meanwhile: after the one being written
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    assert not event.acked and state.held == 1
    assert folds.changed == 2 and folds.get("a", 0) == 1
    app.kafka.gate.set()
    assert await asyncio.wait_for(state.checkpoint(), 1) == 2
    assert event.acked and table.data == {"a": 1, "b": 2}


async def test_a_delete_is_a_tombstone_and_reads_as_absent() -> None:
    app = App()
    table = Table("index")
    table.data["a"] = 1
    state = checkpoint(app)
    index = state.table(table, cache=cache())
    assert index.get("a", 0) == 1
    index.delete("a", 0)
    assert index.get("a", 0) is None and list(index.scan(0, "", "z")) == []
    assert await state.checkpoint() == 1
    assert app.kafka.sent == [("app-index-changelog", 0, [(b'"a"', None)])]
    assert table.data == {} and index.get("a", 0) is None


@pytest.mark.parametrize("ordered", [False, True])
async def test_a_scan_reads_a_range_in_key_order_with_the_changes_not_written_yet(
    ordered: bool,
) -> None:
    app = App()
    app.kafka.gate = asyncio.Event()  # a checkpoint under way: its keys are being written
    table = Table("index")
    table.data.update({"k|1": 0, "k|3": 0, "k|5": 0, "other": 0})
    state = checkpoint(app)
    index = state.table(table, ordered=ordered)
    index.set("k|2", 0, partition=0)
    writing = asyncio.create_task(state.checkpoint())
    await asyncio.wait_for(until(lambda: bool(app.kafka.sent)), 1)
    index.delete("k|3", 0)
    index.set("k|9", 0, partition=1)  # another partition's
    index.set("k|0", 0, partition=0)
    assert [k for k, _ in index.scan(0, "k|", "k|6")] == ["k|0", "k|1", "k|2", "k|5"]
    assert [k for k, _ in index.scan(0, "k|1", "k|6", reverse=True)] == ["k|5", "k|2", "k|1"]
    app.kafka.gate.set()
    await writing
    assert [k for k, _ in index.scan(0, "k|", "k|6")] == ["k|0", "k|1", "k|2", "k|5"]
    await state.checkpoint()
    assert [k for k, _ in index.scan(0, "k|", "k|6")] == ["k|0", "k|1", "k|2", "k|5"]


def test_a_scan_of_a_time_index_looks_at_its_changes_only_as_far_as_it_is_read() -> None:
    """A tick reads the deadline index a slice at a time (`Deadlines.due(after=)`): if
    each scan sorted every change due and not written yet, as it did, a backlog of
    thousands of them would be sorted again for every slice of eight."""
    index = checkpoint(App()).table(Table("index"), ordered=True)
    for n in range(1_000):
        index.set(f"k|{n:04d}", 0, partition=0)
    looked = 0
    change_in = index._change_in

    def counted(key: Any, partition: int) -> Any:
        nonlocal looked
        looked += 1
        return change_in(key, partition)

    index._change_in = counted  # type: ignore[method-assign]
    forward = index.scan(0, "k|0100", "k|9")
    assert [k for k, _ in itertools.islice(forward, 3)] == ["k|0100", "k|0101", "k|0102"]
    backward = index.scan(0, "k|", "k|0900", reverse=True)
    assert [k for k, _ in itertools.islice(backward, 2)] == ["k|0899", "k|0898"]
    assert looked < 20


async def test_partitions_moving_forget_theirs_and_keep_the_others() -> None:
    """Issue 40: after a revoke, changes of partitions gone stayed and were written to a
    changelog another worker owned; every cache was cleared, even for partitions kept."""
    app = App()
    table = Table("folds")
    table.data.update({"kept": 1, "gone": 2, "taken": 3})
    state = checkpoint(app)
    values = cache()
    folds = state.table(table, cache=values)
    for key, partition in (("kept", 0), ("gone", 1), ("taken", 2)):
        assert folds.get(key, partition) is not None
    folds.set("gone-change", 9, partition=1)
    folds.set("kept-change", 8, partition=0)
    state.moved(gone={1}, taken={2})
    assert ("folds", "kept") in values and ("folds", "gone") not in values
    assert ("folds", "taken") not in values
    assert await state.checkpoint() == 1
    assert [(p, records) for _, p, records in app.kafka.sent] == [(0, [(b'"kept-change"', b"8")])]


async def until(done: Any) -> None:
    while not done():
        await asyncio.sleep(0.001)


async def test_what_a_checkpoint_holds_while_the_broker_acknowledges_weighs_its_bytes() -> None:
    # orjson hands its output back at its working buffer's capacity (4 to 8 KiB for a few
    # hundred bytes, 256 KiB for 20 KB): a checkpoint of a million channels' changes held
    # that many times their weight until the broker answered.
    app = App()
    app.kafka.gate = asyncio.Event()
    state = checkpoint(app)
    index = state.table(Table("index"), ordered=True)
    values = [{"n": n, "text": "x" * 600} for n in range(500)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n, value in enumerate(values):
            index.set(f"channel-{n:06d}", value, partition=n % 4)
        writing = asyncio.create_task(state.checkpoint())
        await asyncio.wait_for(until(lambda: len(app.kafka.sent) == 4), 1)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    app.kafka.gate.set()
    assert await writing == 500
    encoded = sum(len(key) + len(value) for _, _, batch in app.kafka.sent for key, value in batch)
    assert encoded > 500 * 600
    # what is held besides the records: the changes, their pending writes, the batches
    assert held < 4 * encoded, (held, encoded)  # 26 times before, under 2 after


async def test_a_large_checkpoint_gives_the_event_loop_back_every_slice_of_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams.worker.checkpoint, "SLICE_KEYS", 3)
    app = App()
    table = Table("folds")
    state = checkpoint(app)
    turns = 0  # how often another task had the event loop
    encoded_at: list[int] = []

    def encode(value: Any) -> Any:
        encoded_at.append(turns)
        return value

    folds = state.table(table, codec=Codec(encode=encode, decode=lambda value: value))
    for key in range(7):
        folds.set(f"k{key}", key, partition=0)
    applied_at: list[int] = []
    apply = table.apply_changelog_batch

    def apply_and_note(events: list[Any]) -> None:
        applied_at.append(turns)
        apply(events)

    table.apply_changelog_batch = apply_and_note  # type: ignore[method-assign]
    writing = asyncio.create_task(state.checkpoint())
    while not writing.done():
        turns += 1
        await asyncio.sleep(0)
    assert await writing == 7
    assert [len(batch) for batch in table.applied] == [3, 3, 1]
    # Each slice runs in a step of its own: the other task ran between them.
    assert encoded_at[0] < encoded_at[3] < encoded_at[6]
    assert len(set(encoded_at[:3])) == len(set(encoded_at[3:6])) == 1
    assert applied_at[0] < applied_at[1] < applied_at[2]
    assert table.data == {f"k{key}": key for key in range(7)}


def seven_held_in_slices_of_three(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[App, Checkpoint, list[Message]]:
    """A checkpoint with one changed key and seven held records, SLICE_KEYS at 3."""
    monkeypatch.setattr(streams.worker.checkpoint, "SLICE_KEYS", 3)
    app = App()
    state = checkpoint(app)
    state.table(Table("folds")).set("a", 1, partition=0)
    return app, state, [held(state, offset) for offset in range(7)]


async def test_held_records_are_acknowledged_a_slice_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app, state, events = seven_held_in_slices_of_three(monkeypatch)
    turns = 0
    acknowledged_at: list[int] = []
    note = app.consumer.ack

    def ack(message: Message) -> bool:
        acknowledged_at.append(turns)
        return note(message)

    app.consumer.ack = ack  # type: ignore[method-assign]
    writing = asyncio.create_task(state.checkpoint())
    while not writing.done():
        turns += 1
        await asyncio.sleep(0)
    await writing
    assert all(event.acked for event in events) and app.consumer.acked == list(range(7))
    assert acknowledged_at[0] == acknowledged_at[2] < acknowledged_at[3] == acknowledged_at[5]
    assert acknowledged_at[5] < acknowledged_at[6]


async def test_a_checkpoint_cancelled_while_acknowledging_leaves_the_rest_to_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app, state, events = seven_held_in_slices_of_three(monkeypatch)
    note = app.consumer.ack
    writing: asyncio.Task[int] | None = None

    def ack(message: Message) -> bool:
        if message.offset == 2 and writing is not None:
            writing.cancel()  # e.g. the app stopping
        return note(message)

    app.consumer.ack = ack  # type: ignore[method-assign]
    writing = asyncio.create_task(state.checkpoint())
    with pytest.raises(asyncio.CancelledError):
        await writing
    assert [event.acked for event in events] == [True] * 3 + [False] * 4
    assert state.held == 4
    assert await state.checkpoint() == 0  # nothing to write, the rest to acknowledge
    assert all(event.acked for event in events) and state.held == 0
    assert app.consumer.acked == list(range(7))


async def test_what_a_checkpoint_takes_is_told_durable_only_once_it_is() -> None:
    """A follower writes how far it had read once the checkpoint holding what it made of
    those records is durable: never for a checkpoint that failed."""
    app = App()
    app.kafka.gate = asyncio.Event()  # the broker does not answer
    state = checkpoint(app)
    folds = state.table(Table("folds"))
    read_through = 3
    durable: list[int] = []

    def taken() -> Any:
        at_take = read_through
        return lambda: durable.append(at_take)

    state.on_take.append(taken)
    folds.set("a", 1, partition=0)
    writing = asyncio.create_task(state.checkpoint())
    await asyncio.wait_for(until(lambda: bool(app.kafka.sent)), 1)
    read_through = 5  # read meanwhile: not in the checkpoint under way
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    assert durable == []
    app.kafka.gate.set()
    await asyncio.wait_for(state.checkpoint(), 1)
    assert durable == [5]  # what this checkpoint took covers everything read before it
