from datetime import UTC, datetime, timedelta

from projections.model import Message, MessageType
from projections.summarise.pending import (
    PendingBatch,
    add,
    due,
    next_batch,
    summarisable,
    trim,
)

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)


def msg(i: int, kind: MessageType = MessageType.STATUS) -> Message:
    content = None if kind is MessageType.EVENT else f"m{i}"
    return Message(id=f"id{i}", channel="c", sender="s", type=kind, content=content)


def filled(count: int, max_pending: int = 100) -> PendingBatch:
    batch = PendingBatch()
    for i in range(count):
        batch = add(batch, msg(i), i, covered_offset=-1, max_pending=max_pending, now=NOW)
    return batch


def test_add_keeps_log_order_and_ignores_redelivery() -> None:
    batch = filled(3)
    assert [item.offset for item in batch.items] == [0, 1, 2]
    assert add(batch, msg(1), 1, covered_offset=-1, max_pending=100, now=NOW) is batch
    covered = add(PendingBatch(), msg(5), 5, covered_offset=5, max_pending=100, now=NOW)
    assert covered.items == []
    assert batch.messages()[2].content == "m2"


def test_pending_since_is_the_first_arrival() -> None:
    batch = add(PendingBatch(), msg(0), 0, covered_offset=-1, max_pending=9, now=NOW)
    later = add(batch, msg(1), 1, covered_offset=-1, max_pending=9, now=NOW + timedelta(hours=1))
    assert later.pending_since == NOW


def test_bounded_drops_oldest_and_counts_them() -> None:
    batch = filled(7, max_pending=5)
    assert [item.offset for item in batch.items] == [2, 3, 4, 5, 6]
    assert batch.dropped == 2


def test_trim_removes_what_a_summary_covers() -> None:
    batch = filled(5)
    trimmed = trim(batch, 2)
    assert [item.offset for item in trimmed.items] == [3, 4]
    assert trim(trimmed, 1) is trimmed
    empty = trim(batch, 10)
    assert empty.items == [] and empty.pending_since is None and empty.dropped == 0


def test_due_by_count_or_by_age() -> None:
    assert not due(PendingBatch(), after_messages=1, after_seconds=0, now=NOW)
    batch = filled(3)
    assert due(batch, after_messages=3, after_seconds=1e9, now=NOW)
    assert not due(batch, after_messages=4, after_seconds=60, now=NOW + timedelta(seconds=59))
    assert due(batch, after_messages=4, after_seconds=60, now=NOW + timedelta(seconds=60))


def test_next_batch_takes_the_oldest_threshold_items() -> None:
    assert [item.offset for item in next_batch(filled(45), 20).items] == list(range(20))


def test_events_are_not_summarised() -> None:
    assert not summarisable(msg(0, MessageType.EVENT))
    assert summarisable(msg(0))
