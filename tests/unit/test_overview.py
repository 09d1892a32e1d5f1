from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.commitments import CommitmentProjection, expiry_event
from projections.model import Message, MessageType
from projections.overview import ChannelOverview, ChannelOverviewProjection
from projections.projection import canonical_hash, dump_state, fold, load_state

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CHANNEL = "team/review"
P = ChannelOverviewProjection()

_counter = iter(range(1_000_000))


def make(
    kind: MessageType,
    sender: str = "alice",
    *,
    cid: str | None = None,
    topic: str = "general",
    at: datetime | None = None,
    deadline: datetime | None = None,
) -> Message:
    n = next(_counter)
    fields: dict[str, Any] = {
        "id": f"m{n}",
        "channel": CHANNEL,
        "sender": sender,
        "type": kind,
        "topic": topic,
        "correlation_id": cid,
        "deadline": deadline,
        "created_at": at or T0 + timedelta(minutes=n),
    }
    if kind is not MessageType.EVENT:
        fields["content"] = "text"
    if kind in {
        MessageType.RESPONSE,
        MessageType.DONE,
        MessageType.DECLINE,
        MessageType.FAILURE,
        MessageType.HANDOFF,
    }:
        fields["in_reply_to"] = "m-parent"
    if kind is MessageType.HANDOFF:
        fields["target"] = "instance:next"
    return Message(**fields)


def test_name_version_and_fresh_identity() -> None:
    assert (P.name, P.version) == ("overview", 1)
    a, b = P.identity(), P.identity()
    assert a is not b and a == b
    assert a.message_count == 0 and a.open_commitments == 0
    assert a.first_activity is None and a.last_activity is None and a.last_message_id is None
    assert a.participants == {} and a.by_type == {} and a.topics == []


def test_counts_participants_topics_and_activity() -> None:
    first = make(MessageType.QUERY, "alice", cid="q1", topic="architecture")
    messages = [
        first,
        make(MessageType.STATUS, "bob", topic="testing"),
        make(MessageType.QUERY, "alice", cid="q2", topic="architecture"),
        make(MessageType.RESPONSE, "carol", cid="q1", topic="caching"),
    ]
    state = fold(P, messages)
    assert state.message_count == 4
    assert list(state.participants.items()) == [("alice", 2), ("bob", 1), ("carol", 1)]
    assert state.by_type == {
        MessageType.QUERY: 2,
        MessageType.STATUS: 1,
        MessageType.RESPONSE: 1,
    }
    assert state.topics == ["architecture", "testing", "caching"]
    assert state.first_activity == first.created_at
    assert state.last_activity == messages[-1].created_at
    assert state.last_message_id == messages[-1].id
    assert state.open_commitments == 1


def test_activity_follows_log_order_even_with_skewed_clocks() -> None:
    late, early = (
        make(MessageType.STATUS, at=T0 + timedelta(hours=1)),
        make(MessageType.STATUS, at=T0),
    )
    state = fold(P, [late, early])
    assert (state.first_activity, state.last_activity) == (late.created_at, early.created_at)


def test_events_count_but_are_not_participants_or_topics() -> None:
    event = make(MessageType.EVENT, "chorus", topic="system")
    state = fold(P, [make(MessageType.STATUS, "alice"), event])
    assert state.message_count == 2
    assert state.by_type[MessageType.EVENT] == 1
    assert state.participants == {"alice": 1}
    assert state.topics == ["general"]
    assert state.last_message_id == event.id


def test_open_commitments_follow_the_commitment_rules() -> None:
    deadline = T0 + timedelta(minutes=5)
    steps: list[tuple[Message, int]] = [
        (make(MessageType.COMMAND, cid="a", deadline=deadline), 1),
        (make(MessageType.QUERY, cid="b"), 2),
        (make(MessageType.PROPOSE, cid="c"), 3),
        (make(MessageType.RESPONSE, cid="c"), 3),  # does not fulfil a proposal
        (make(MessageType.HANDOFF, cid="a"), 3),  # parent delegated, child open
        (make(MessageType.QUERY, cid="b"), 3),  # duplicate opener while active
        (make(MessageType.RESPONSE, cid="b"), 2),
        (make(MessageType.DECLINE, cid="c"), 1),
        (expiry_event(CHANNEL, "a", T0 + timedelta(hours=1)), 0),
        (make(MessageType.DONE, cid="unknown"), 0),
    ]
    state = P.identity()
    for message, expected in steps:
        state = P.apply(state, message)
        assert state.open_commitments == expected, message.type
    assert state.commitments == fold(CommitmentProjection(), [m for m, _ in steps])
    assert state.commitments.declines == 1


def test_persistence_roundtrip_and_replay() -> None:
    messages = [
        make(MessageType.COMMAND, "lead", cid="x", topic="build"),
        make(MessageType.STATUS, "worker", cid="x", topic="build"),
        make(MessageType.EVENT, "chorus"),
        make(MessageType.DONE, "worker", cid="x", topic="release"),
    ]
    state = fold(P, messages)
    dumped = dump_state(state)
    assert dumped["participants"] == {"lead": 1, "worker": 2}
    assert dumped["by_type"] == {"COMMAND": 1, "STATUS": 1, "EVENT": 1, "DONE": 1}
    restored = load_state(P, dumped)
    assert isinstance(restored, ChannelOverview)
    assert restored == state
    assert list(restored.participants) == ["lead", "worker"]
    assert canonical_hash(restored) == canonical_hash(fold(P, messages))


def test_apply_does_not_mutate_the_previous_state() -> None:
    before = fold(P, [make(MessageType.QUERY, "alice", cid="q", topic="t1")])
    snapshot = before.model_copy(deep=True)
    P.apply(before, make(MessageType.RESPONSE, "bob", cid="q", topic="t2"))
    assert before == snapshot


@settings(max_examples=100)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([MessageType.STATUS, MessageType.EVENT, MessageType.QUERY]),
            st.sampled_from(["alice", "bob", "carol"]),
            st.sampled_from(["general", "build", "docs"]),
        ),
        max_size=30,
    )
)
def test_counts_add_up(steps: list[tuple[MessageType, str, str]]) -> None:
    messages = [make(kind, sender, cid="q", topic=topic) for kind, sender, topic in steps]
    state = fold(P, messages)
    assert state.message_count == len(messages) == sum(state.by_type.values())
    non_events = [m for m in messages if m.type is not MessageType.EVENT]
    assert sum(state.participants.values()) == len(non_events)
    assert list(state.participants) == list(dict.fromkeys(m.sender for m in non_events))
    assert state.topics == list(dict.fromkeys(m.topic for m in non_events))
    assert state.open_commitments == len(state.commitments.open_commitments()) <= 1


def test_the_overview_reuses_the_commitments_fold_of_the_same_message() -> None:
    from tests.factories import conversation

    messages = conversation([CHANNEL], 120, seed=3)
    commitments = CommitmentProjection()
    mine, theirs = commitments.identity(), P.identity()
    for message in messages:  # one message through both, as the worker's step does
        mine = commitments.apply(mine, message)
        theirs = P.apply(theirs, message)
        assert theirs.commitments == mine
        assert theirs.open_commitments == mine.open_count()
    # The folds share their commitment states from the first change on, and equal the
    # folds done apart (where nothing can be shared).
    assert theirs.commitments is mine and mine.ever_opened
    assert mine == fold(commitments, messages)
    assert theirs == fold(P, messages)
    assert canonical_hash(theirs) == canonical_hash(fold(P, messages))


def test_a_message_the_commitments_ignore_returns_the_state_itself() -> None:
    commitments = CommitmentProjection()
    status = Message(channel=CHANNEL, sender="ann", type=MessageType.STATUS, content="hi")
    first, second = commitments.identity(), commitments.identity()
    assert first is not second
    assert commitments.apply(first, status) is first
    assert commitments.apply(second, status) is second  # the same input again: reused
