"""streams.worker.deadlines: entries sort by due time within a kind and a partition, a read
takes only what is due, and an entry moves or goes as its owner says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streams.worker.checkpoint import Checkpoint
from streams.worker.deadlines import Deadlines, Due
from tests.unit.streams.worker.test_checkpoint import App, Table

T0 = datetime(2026, 12, 4, 9, tzinfo=UTC)


def index(kind: str = "recap") -> Deadlines:
    checkpoint = Checkpoint(App(), "src", interval=5.0, max_keys=100, max_held=100)
    return Deadlines(checkpoint.table(Table("deadlines"), ordered=True), kind)


def test_a_read_takes_what_is_due_earliest_first_and_nothing_later() -> None:
    due = index()
    for minutes, channel in ((5, "a/late"), (1, "a/soon"), (3, "a/mid"), (60, "a/hour")):
        due.put(channel, T0 + timedelta(minutes=minutes), partition=0)
    due.put("b/other", T0, partition=1)  # another partition's
    Deadlines(due.table, "summary").put("a/x", T0, partition=0)  # another kind's
    now = T0 + timedelta(minutes=5)
    assert [d.channel for d in due.due(0, now, 10)] == ["a/soon", "a/mid", "a/late"]
    assert [d.channel for d in due.due(0, now, 2)] == ["a/soon", "a/mid"]
    assert [d.channel for d in due.due(0, now, 2, newest_first=True)] == ["a/late", "a/mid"]
    assert due.due(0, T0, 10) == []


def test_a_read_goes_on_after_the_entry_it_took_last_either_way() -> None:
    """A tick reads the due entries a slice at a time, each read after the last entry of
    the one before: entries due at the same millisecond are told apart by channel."""
    due = index()
    for minutes, channel in ((1, "a/1"), (2, "a/2"), (2, "a/2b"), (3, "a/3"), (9, "a/9")):
        due.put(channel, T0 + timedelta(minutes=minutes), partition=0)
    now = T0 + timedelta(minutes=5)
    first = due.due(0, now, 2)
    assert [d.channel for d in first] == ["a/1", "a/2"]
    rest = due.due(0, now, 10, after=first[-1])
    assert [d.channel for d in rest] == ["a/2b", "a/3"]
    assert due.due(0, now, 10, after=rest[-1]) == []
    newest = due.due(0, now, 1, newest_first=True)
    assert [d.channel for d in newest] == ["a/3"]
    older = due.due(0, now, 2, newest_first=True, after=newest[-1])
    assert [d.channel for d in older] == ["a/2b", "a/2"]


def test_an_entry_never_fires_before_its_time() -> None:
    due = index()
    at = T0 + timedelta(microseconds=1500)  # between two milliseconds: rounded up
    due.put("a/1", at, partition=0)
    assert due.due(0, at - timedelta(microseconds=1), 10) == []
    assert due.due(0, at + timedelta(microseconds=500), 10) == [
        Due("a/1", T0 + timedelta(milliseconds=2))
    ]


def test_an_entry_is_moved_or_removed_as_its_owner_says() -> None:
    due = index()
    due.put("a/1", T0, partition=0)
    (entry,) = due.due(0, T0, 10)
    due.move(entry, 0, T0 + timedelta(hours=1))
    assert due.due(0, T0, 10) == []
    (moved,) = due.due(0, T0 + timedelta(hours=1), 10)
    due.move(moved, 0, None)
    assert due.due(0, T0 + timedelta(days=1), 10) == []


def test_a_kind_cannot_hold_the_separator() -> None:
    with pytest.raises(ValueError, match="must not contain"):
        index("a|b")
