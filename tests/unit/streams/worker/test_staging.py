"""Staged table writes: read-your-writes, one write per key, under the event that staged it."""

from __future__ import annotations

from collections import UserDict
from typing import Any

from faust.streams import current_event

from streams.worker.staging import Codec, Staging, processing


class Event:
    """Stands in for a Faust event: Faust only needs a weak reference to it."""

    def __init__(self, partition: int) -> None:
        self.partition = partition


class RecordingTable(UserDict[str, Any]):
    """Records each write with the partition of the event current at the time."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, Any, int | None]] = []

    def __setitem__(self, key: str, value: Any) -> None:
        event = current_event()
        self.writes.append((key, value, getattr(event, "partition", None)))
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        event = current_event()
        self.writes.append((key, None, getattr(event, "partition", None)))
        super().__delitem__(key)


def test_reads_see_staged_values_and_each_key_is_written_once_on_flush() -> None:
    table = RecordingTable()
    table.data["old"] = "kept"
    staging = Staging()
    staged = staging.stage(table)
    first, second = Event(partition=1), Event(partition=3)

    with processing(first):
        staged["a"] = 1
        staged["b"] = 1
    with processing(second):
        staged["a"] = 2
        staged.discard("old")

    assert (staged.get("a"), staged.get("b"), staged.get("old", "gone")) == (2, 1, "gone")
    assert table.writes == [] and staged.staged == 3
    assert staging.flush() == 3
    # Each key once, under the event that staged its last value.
    assert sorted(table.writes, key=lambda w: w[0]) == [("a", 2, 3), ("b", 1, 1), ("old", None, 3)]
    assert dict(table) == {"a": 2, "b": 1} and staged.staged == 0
    assert staging.flush() == 0


def test_flush_restores_the_current_event() -> None:
    staged = Staging().stage(RecordingTable())
    outer = Event(partition=0)
    with processing(outer):
        staged["k"] = "v"
    with processing(Event(partition=2)):
        staged["k2"] = "v"
    with processing(outer):
        staged.flush()
        assert current_event() is outer
    assert current_event() is None


def test_discarding_a_missing_key_is_harmless() -> None:
    table = RecordingTable()
    staging = Staging()
    staging.stage(table).discard("never-there")

    assert staging.flush() == 1
    assert dict(table) == {}


def test_unstaging_forgets_a_staged_deletion_that_a_write_in_an_earlier_stage_supersedes() -> None:
    """Two stages of one table (writes flush first, deletions last): a key deleted and then
    written again in one batch keeps the write."""
    table = RecordingTable()
    staging = Staging()
    writes, deletions = staging.stage(table), staging.stage(table)
    writes["k"] = "first"
    deletions.discard("k")
    writes["k"] = "again"
    deletions.unstage("k")

    assert staging.flush() == 1
    assert dict(table) == {"k": "again"}


def test_deferred_deletions_wait_for_flush_deferred_and_reads_see_them_staged() -> None:
    """The fold stage's deletions: not flushed with the writes (the records that stop naming
    the deleted parts must be acknowledged first), flushed by `flush_deferred`; a cached
    stage over the same table forgets the key, and `deleting` tells a reader it is gone."""
    table = RecordingTable()
    table.data["part"] = "old"
    staging = Staging()
    writes = staging.stage(table, cache=10)
    deletions = staging.stage(table, deferred=True)
    assert writes.get("part") == "old"  # remembered
    writes["record"] = "names no part"
    deletions.discard("part")
    writes.forget_key("part")
    assert deletions.deleting("part") and not deletions.deleting("record")

    assert staging.flush() == 1
    assert dict(table) == {"part": "old", "record": "names no part"}
    assert deletions.staged == 1
    assert staging.flush_deferred() == 1
    assert dict(table) == {"record": "names no part"} and not deletions.deleting("part")
    assert writes.get("part") is None  # not served from what it remembered


def test_a_cached_table_remembers_reads_and_flushes_until_it_forgets_them() -> None:
    table = RecordingTable()
    table.data["read"] = "stored"
    staged = Staging().stage(table, cache=3)
    with processing(Event(partition=0)):
        for key in ("a", "b"):
            staged[key] = key.upper()
    staged.flush()
    assert staged.get("read") == "stored" and staged.get("missing") is None
    # Recovery rewrites the store behind the table's back.
    table.data.update({"a": "recovered", "b": "recovered", "read": "recovered", "missing": 1})

    # The three most recent keys come from memory, the miss included; "a" fell out.
    assert [staged.get(key) for key in ("b", "read", "missing")] == ["B", "stored", None]
    assert staged.get("a") == "recovered"
    staged.forget()
    assert [staged.get(key) for key in ("b", "read", "missing")] == ["recovered", "recovered", 1]


def test_a_rescan_is_due_at_first_then_periodically_and_after_partitions_move() -> None:
    staging = Staging()
    rescan = staging.rescan()

    assert rescan.due() and not rescan.due()
    staging.forget()  # partitions moved
    assert rescan.due() and not rescan.due()


class SourcedEvent(Event):
    """An event with the record it came from, as `RefusedWrite` reads it."""

    def __init__(self, partition: int, offset: int) -> None:
        super().__init__(partition)
        self.message = type("Record", (), {"topic": "t.messages", "partition": partition})()
        self.message.offset = offset


def test_a_value_too_large_for_a_changelog_record_is_refused_and_reported() -> None:
    table = RecordingTable()
    table.data["k"] = "small before"
    reported: list[Any] = []
    staging = Staging(record_limit=100, on_refused=reported.append)
    guarded = staging.stage(table, cache=10)
    unguarded = staging.stage(RecordingTable(), guard=False)
    with processing(SourcedEvent(partition=2, offset=41)):
        guarded["k"] = "x" * 200
        guarded["ok"] = "fits"
        unguarded["big"] = "y" * 200
    assert staging.flush() == 3
    assert table.data == {"k": "small before", "ok": "fits"}  # the old value stays
    assert guarded.get("k") == "small before"  # and is what the next read sees
    assert unguarded.table["big"] == "y" * 200  # the fold tables are bounded upstream
    assert len(reported) == 1 and staging.drain_refused() == reported
    refused = reported[0]
    assert (refused.topic, refused.partition, refused.offset) == ("t.messages", 2, 41)
    assert refused.size == 202 and refused.limit == 100
    assert "over the 100-byte changelog record limit" in refused.reason
    assert staging.drain_refused() == []


class Box:
    """A stage's model: equal by value, encoded as {"n": value}."""

    decoded = 0
    encoded = 0

    def __init__(self, n: int | str) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Box) and other.n == self.n

    @classmethod
    def decode(cls, raw: dict[str, int | str]) -> Box:
        cls.decoded += 1
        return cls(raw["n"])

    def encode(self) -> dict[str, int | str]:
        Box.encoded += 1
        return {"n": self.n}


def test_a_table_with_a_codec_decodes_a_read_once_and_encodes_a_key_once_per_flush() -> None:
    Box.decoded = Box.encoded = 0
    table = RecordingTable()
    table.data["stored"] = {"n": 1}
    staging = Staging(record_limit=20)
    staged = staging.stage(table, cache=10, codec=Codec(encode=Box.encode, decode=Box.decode))

    for _ in range(3):
        assert staged.get("stored") == Box(1)
    assert Box.decoded == 1  # then remembered, decoded
    assert staged.get("missing") is None and Box.decoded == 1  # a miss is not decoded
    with processing(SourcedEvent(partition=0, offset=7)):
        for n in range(5):
            staged["a"] = Box(n)  # a stage writing on every message
            assert staged.get("a") == Box(n)
        staged["big"] = Box("x" * 30)  # encodes to more than the 20-byte limit
    assert staging.flush() == 2
    assert Box.encoded == 2  # once per key, at the flush
    assert table.data == {"stored": {"n": 1}, "a": {"n": 4}}  # the table holds the encoded form
    assert staged.get("a") == Box(4) and Box.decoded == 1  # from memory, not the store
    assert staged.get("big") is None  # refused: the store's (absent) value stands
    assert len(staging.drain_refused()) == 1
