from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections.model import Message, MessageType
from projections.summarise.pending import (
    MAX_COMPACTED_CHARS,
    MAX_COMPACTED_PARTS,
    NARRATED_CHARS,
    PendingBatch,
    add,
    as_narrated,
    compacted,
    due,
    fill,
    missing,
    next_batch,
    replay,
    spoken,
    summarisable,
    told_request,
    trim,
)

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)


def msg(i: int, kind: MessageType = MessageType.STATUS) -> Message:
    content = None if kind is MessageType.EVENT else f"m{i}"
    return Message(id=f"id{i}", channel="c", sender="s", type=kind, content=content)


def filled(count: int, max_pending: int = 100) -> PendingBatch:
    batch = PendingBatch()
    for i in range(count):
        batch = add(batch, i, covered_offset=-1, max_pending=max_pending, now=NOW)
    return batch


def bodies(count: int) -> dict[int, Message]:
    return {i: msg(i) for i in range(count)}


def test_add_keeps_log_order_and_ignores_redelivery() -> None:
    batch = filled(3)
    assert [item.offset for item in batch.items] == [0, 1, 2]
    assert add(batch, 1, covered_offset=-1, max_pending=100, now=NOW) is batch
    covered = add(PendingBatch(), 5, covered_offset=5, max_pending=100, now=NOW)
    assert covered.items == []
    assert fill(batch, bodies(3))[2].content == "m2"


def test_pending_since_is_the_first_arrival() -> None:
    batch = add(PendingBatch(), 0, covered_offset=-1, max_pending=9, now=NOW)
    later = add(batch, 1, covered_offset=-1, max_pending=9, now=NOW + timedelta(hours=1))
    assert later.pending_since == NOW


def spans(batch: PendingBatch) -> list[tuple[int, int]]:
    return [(item.start, item.offset) for item in batch.items]


def test_bounded_compacts_the_smallest_adjacent_pair_never_drops() -> None:
    batch = filled(7, max_pending=5)
    assert spans(batch) == [(0, 1), (2, 3), (4, 4), (5, 5), (6, 6)]
    assert batch.covers == 7 and batch.first_offset == 0 and batch.last_offset == 6
    first = fill(batch, bodies(7))[0]
    assert first.content == "[s] m0\n[s] m1"
    assert first.payload == {"compacted": {"messages": 2, "senders": ["s"]}}
    assert spoken(first) == [("s", "m0"), ("s", "m1")]


def test_a_burst_of_ten_times_the_bound_loses_no_message() -> None:
    bound = 20
    batch = filled(10 * bound, max_pending=bound)
    assert len(batch.items) == bound and batch.covers == 10 * bound
    covered = [offset for start, end in spans(batch) for offset in range(start, end + 1)]
    assert covered == list(range(10 * bound))
    # Balanced: every item stands for about the same number of messages.
    assert max(item.covers for item in batch.items) <= 2 * min(i.covers for i in batch.items)
    messages = fill(batch, bodies(10 * bound))
    said = [part for m in messages for part in spoken(m)]
    assert [content for _, content in said] == [f"m{i}" for i in range(10 * bound)]
    assert all(len(m.content or "") <= MAX_COMPACTED_CHARS for m in messages)


def test_a_batch_in_flight_is_never_compacted() -> None:
    batch = PendingBatch()
    for i in range(30):
        batch = add(batch, i, covered_offset=-1, max_pending=6, now=NOW, in_flight_through=3)
    assert spans(batch)[:4] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert len(batch.items) == 6 and batch.covers == 30
    # With the bound no larger than what is in flight, it holds that plus one.
    tight = PendingBatch()
    for i in range(10):
        tight = add(tight, i, covered_offset=-1, max_pending=2, now=NOW, in_flight_through=3)
    assert spans(tight) == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 9)]


def test_compacted_content_is_bounded_and_keeps_every_part_in_order() -> None:
    long = "x" * 3000
    batch = PendingBatch()
    said = {}
    for i in range(40):
        said[i] = Message(
            id=f"id{i}", channel="c", sender=f"s{i}", type=MessageType.STATUS, content=f"{i} {long}"
        )
        batch = add(batch, i, covered_offset=-1, max_pending=2, now=NOW)
    assert len(batch.items) == 2 and batch.covers == 40
    messages = fill(batch, said)
    contents = [m.content or "" for m in messages]
    assert all(len(c) <= MAX_COMPACTED_CHARS for c in contents)
    senders = [s for m in messages for s in m.payload["compacted"]["senders"]]  # type: ignore[index]
    assert senders == [f"s{i}" for i in range(40)]
    # Every message keeps the start of its line, in order.
    starts = [content.split(" ")[0] for _, content in spoken(messages[1])]
    assert starts == [str(i) for i in range(40 - messages[1].payload["compacted"]["messages"], 40)]  # type: ignore[index]


def test_a_batch_is_positions_and_missing_says_which_bodies_it_still_needs() -> None:
    batch = filled(7, max_pending=5)  # (0, 1) (2, 3) (4, 4) (5, 5) (6, 6)
    have = {i: msg(i) for i in (0, 2, 3, 5)}
    assert [(i.start, i.offset) for i in missing(batch, have)] == [(0, 1), (4, 4), (6, 6)]
    assert missing(batch, bodies(7)) == []
    # What is there is used; an item with none of its messages is left out.
    assert [m.content for m in fill(batch, have)] == ["[s] m0", "[s] m2\n[s] m3", "m5"]


@given(st.lists(st.booleans(), min_size=1, max_size=60), st.integers(2, 8))
def test_fill_depends_on_the_run_alone_not_on_how_it_was_compacted(
    events: list[bool], bound: int
) -> None:
    """The live stage compacts what it has pending; replay compacts the same offsets with
    other in-flight boundaries. A compacted item's message is a function of its run, so a
    restart (bodies read back from the log) summarises the same text."""
    offsets = [i for i, is_event in enumerate(events) if not is_event]
    if not offsets:
        return
    said = {i: msg(i) for i in offsets}
    batch = PendingBatch()
    for i in offsets:
        batch = add(batch, i, covered_offset=-1, max_pending=bound, now=NOW)
    for item in batch.items:
        run = [o for o in offsets if item.start <= o <= item.offset]
        one = PendingBatch(items=[item])
        assert fill(one, said) == fill(one, {o: said[o] for o in run})
        assert item.covers == len(run)


@pytest.mark.parametrize("count", [1, 66, 67, 500])
def test_compacted_content_never_exceeds_its_bound(count: int) -> None:
    batch = filled(count, max_pending=1)
    long = {i: msg(i).model_copy(update={"content": "y" * 500}) for i in range(count)}
    (message,) = fill(batch, long)
    assert len(message.content or "") <= MAX_COMPACTED_CHARS


def batches(messages: list[tuple[int, Message]], **rules: Any) -> list[list[int]]:
    settings = {"after_messages": 3, "after_seconds": 60.0, "max_pending": 100, **rules}
    return [[item.offset for item in b.items] for b, _ in replay(messages, **settings)]


def at(i: int, seconds: float, kind: MessageType = MessageType.STATUS) -> tuple[int, Message]:
    content = None if kind is MessageType.EVENT else f"m{i}"
    message = Message(
        id=f"id{i}",
        channel="c",
        sender="s",
        type=kind,
        content=content,
        created_at=NOW + timedelta(seconds=seconds),
    )
    return i, message


def test_replay_batches_by_count_then_by_time_then_at_the_end() -> None:
    log = [at(0, 0), at(1, 1), at(2, 2), at(3, 3), at(4, 100), at(5, 101), at(6, 102), at(7, 103)]
    # 0-2 by count; 3 waits 60 s: due when 4 arrives at 100 s; 4-6 by count; 7 at the end.
    assert batches(log) == [[0, 1, 2], [3], [4, 5, 6], [7]]


def test_replay_skips_events_and_splits_a_long_tail_by_the_threshold() -> None:
    log = [at(0, 0), at(1, 0, MessageType.EVENT), at(2, 0)]
    assert batches(log, after_messages=5) == [[0, 2]]
    assert batches([at(i, 0) for i in range(7)], after_messages=3, after_seconds=1e9) == [
        [0, 1, 2],
        [3, 4, 5],
        [6],
    ]


def test_trim_removes_what_a_summary_covers() -> None:
    batch = filled(5)
    trimmed = trim(batch, 2)
    assert [item.offset for item in trimmed.items] == [3, 4]
    assert trim(trimmed, 1) is trimmed
    empty = trim(batch, 10)
    assert empty.items == [] and empty.pending_since is None


def test_what_is_left_after_a_trim_waits_from_when_it_came_at_the_latest() -> None:
    batch = filled(5)
    assert batch.pending_since is not None
    launched = batch.pending_since + timedelta(minutes=1)  # offsets 3 and 4 came after
    assert trim(batch, 2, rest_since=launched).pending_since == launched
    assert trim(batch, 2).pending_since == batch.pending_since  # not known: the oldest's
    earlier = batch.pending_since - timedelta(minutes=1)
    assert trim(batch, 2, rest_since=earlier).pending_since == batch.pending_since
    assert trim(batch, 10, rest_since=launched).pending_since is None


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


def test_a_long_compacted_run_shows_its_first_parts_only_and_counts_them_all() -> None:
    count = 3 * MAX_COMPACTED_PARTS
    said = {i: msg(i).model_copy(update={"sender": f"s{i}"}) for i in range(count)}
    (message,) = fill(filled(count, max_pending=1), said)
    shown = spoken(message)
    assert [content for _, content in shown] == [f"m{i}" for i in range(MAX_COMPACTED_PARTS)]
    assert message.payload == {
        "compacted": {"messages": count, "senders": [f"s{i}" for i in range(50)]}
    }
    # Its message depends on the first parts alone: what a stage reads back for it.
    first = {i: said[i] for i in range(MAX_COMPACTED_PARTS)}
    assert fill(filled(count, max_pending=1), first) == [message]


def said(kind: MessageType, content: str | None, **fields: Any) -> Message:
    if kind in (MessageType.QUERY, MessageType.COMMAND, MessageType.PROPOSE, MessageType.HANDOFF):
        fields.setdefault("correlation_id", "c1")
    if kind is MessageType.HANDOFF:
        fields.setdefault("in_reply_to", "m0")
        fields.setdefault("target", "role:worker-b")
    fields.setdefault("sender", "planner")
    return Message(channel="c", type=kind, content=content, **fields)


@pytest.mark.parametrize(
    ("message", "told"),
    [
        (
            said(
                MessageType.COMMAND,
                "Collect the merged pull requests. Then list them by author.",
                target="role:worker-a",
            ),
            "asked worker-a: Collect the merged pull requests…",
        ),
        (said(MessageType.QUERY, "Which cache wins?"), "asked anyone: Which cache wins?"),
        (
            said(MessageType.PROPOSE, "Switch the parser to PEG.", target="instance:rey"),
            "proposed to rey: Switch the parser to PEG.",
        ),
        (said(MessageType.HANDOFF, "Over to you"), "handed the request to worker-b: Over to you"),
        (said(MessageType.COMMAND, None, target="role:worker-a"), "asked worker-a"),
        (said(MessageType.STATUS, "on it"), "on it"),
        (said(MessageType.STATUS, None), None),
    ],
)
def test_a_narrative_tells_a_request_as_history(message: Message, told: str | None) -> None:
    assert as_narrated(message).content == told


def test_a_narrated_request_keeps_one_sentence_cut_at_a_word() -> None:
    long = said(MessageType.COMMAND, "word " * 100, target="role:a")
    words = told_request(as_narrated(long).content or "")[1]
    assert len(words) <= NARRATED_CHARS and words.endswith("…") and "word wor…" not in words


def test_told_request_parts_the_framing_from_the_words() -> None:
    assert told_request("asked worker-a: Collect the PRs") == (
        "asked worker-a: ",
        "Collect the PRs",
    )
    assert told_request("handed the request to b") == ("handed the request to b", "")
    assert told_request("Asked about it: yes") == ("Asked about it: ", "yes")
    assert told_request("we asked nobody") == ("", "we asked nobody")


def test_a_compacted_span_tells_its_requests_as_history() -> None:
    parts = [said(MessageType.COMMAND, "Port the lexer.", target="role:b"), msg(1)]
    parts.append(said(MessageType.STATUS, None, sender="b"))
    span = compacted(parts, covers=3)
    assert (span.content or "").splitlines() == [
        "[planner] asked b: Port the lexer.",
        "[s] m1",
        "[b] gave a status update",
    ]
