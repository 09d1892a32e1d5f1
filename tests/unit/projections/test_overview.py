from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.channel import step
from projections.commitments import CommitmentProjection, expiry_event
from projections.model import Message, MessageType
from projections.overview import ChannelOverview, ChannelOverviewProjection
from projections.projection import Folded, canonical_hash, dump_state, fold, load_state

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
    assert (P.name, P.version) == ("overview", 3)
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
    # From least to most recently active.
    assert list(state.participants.items()) == [("bob", 1), ("alice", 2), ("carol", 1)]
    assert state.by_type == {
        MessageType.QUERY: 2,
        MessageType.STATUS: 1,
        MessageType.RESPONSE: 1,
    }
    assert state.topics == ["architecture", "testing", "caching"]
    assert state.first_activity == first.created_at
    assert state.last_activity == messages[-1].created_at
    assert state.last_message_id == messages[-1].id
    assert state.open_commitments == 0  # set by the fold step, not by the overview itself


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
    projections = [CommitmentProjection(), P]
    stored: dict[str, Folded | None] = {}
    for offset, (message, expected) in enumerate(steps):
        done = {s.projection.name: s for s in step(projections, stored, message, offset)}
        assert done["overview"].state.open_commitments == expected, message.type
        assert done["overview"].folded.state["open_commitments"] == expected
        assert done["commitments"].state.open_count() == expected
        stored = {name: s.folded for name, s in done.items()}
    assert "commitments" not in stored["overview"].state  # no copy of them


def test_participants_are_capped_with_the_least_recently_active_pushed_out() -> None:
    small = ChannelOverviewProjection(max_participants=2, max_topics=2)
    senders = ["a", "b", "a", "c", "d", "a"]
    topics = ["t1", "t2", "t3", "t1", "t4", "t2"]
    state = fold(
        small, [make(MessageType.STATUS, s, topic=t) for s, t in zip(senders, topics, strict=True)]
    )
    assert state.participants == {"d": 1, "a": 1}  # "a" was pushed out by "d", then spoke again
    assert state.participants_evicted == 3  # b (by c), a (by d), c (by a)
    assert state.other_participant_messages == 1 + 2 + 1
    assert sum(state.participants.values()) + state.other_participant_messages == len(senders)
    assert state.topics == ["t1", "t2"]
    assert state.other_topic_messages == 2  # t3 and t4


def test_a_hundred_thousand_senders_keep_the_overview_small() -> None:
    state = P.identity()
    for n in range(100_000):
        state = P.apply(state, make(MessageType.STATUS, f"sender-{n}", topic=f"topic-{n}"))
    assert len(state.participants) == P.max_participants
    assert len(state.topics) == P.max_topics
    assert state.participants_evicted == 100_000 - P.max_participants
    assert len(orjson.dumps(dump_state(state))) < 60_000


def test_overview_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ChannelOverviewProjection(max_participants=0)


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
    last_seen = {m.sender: i for i, m in enumerate(non_events)}
    assert list(state.participants) == sorted(last_seen, key=last_seen.__getitem__)
    assert state.topics == list(dict.fromkeys(m.topic for m in non_events))


def test_a_message_the_commitments_ignore_returns_the_state_itself() -> None:
    commitments = CommitmentProjection()
    status = Message(channel=CHANNEL, sender="ann", type=MessageType.STATUS, content="hi")
    first = commitments.identity()
    assert commitments.apply(first, status) is first


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(MessageType)),
            st.text(min_size=1, max_size=12),
            st.sampled_from(["general", "build", "docs", "ünïcode"]),
            st.datetimes(
                min_value=datetime(2000, 1, 1),
                max_value=datetime(2100, 1, 1),
                timezones=st.just(UTC),
            ),
        ),
        max_size=25,
    ),
    st.integers(1, 4),
)
def test_the_direct_dump_equals_pydantics(
    steps: list[tuple[MessageType, str, str, datetime]], cap: int
) -> None:
    projection = ChannelOverviewProjection(max_participants=cap, max_topics=cap)
    state = projection.identity()
    assert state.dumped() == state.model_dump(mode="json")
    for kind, sender, topic, at in steps:
        try:  # a reply type needs what it replies to: given, so every type folds
            message = Message(
                channel="c",
                sender=sender,
                type=kind,
                topic=topic,
                created_at=at,
                correlation_id="c",
                in_reply_to="i",
                target="role:reviewer",
                content=None if kind is MessageType.EVENT else "said",
            )
        except ValueError:  # a sender the model refuses
            continue
        state = projection.apply(state, message)
        dumped = state.dumped()
        assert dumped == state.model_dump(mode="json")
        assert orjson.dumps(dumped) == orjson.dumps(state.model_dump(mode="json"))


def test_live_carries_the_counts_and_only_the_most_recent_participants() -> None:
    from projections.overview import LIVE_PARTICIPANTS

    projection = ChannelOverviewProjection()
    senders = [f"agent-{n}" for n in range(LIVE_PARTICIPANTS + 5)]
    state = projection.identity()
    for sender in senders:
        state = projection.apply(state, _live_message(sender))
    live = projection.live(state)
    assert live["participant_count"] == len(senders)
    assert list(live["recent_participants"]) == senders[-LIVE_PARTICIPANTS:]
    assert live["message_count"] == len(senders) and live["topic_count"] == 1
    assert "participants" not in live and "topics" not in live


def test_changes_name_only_what_the_message_changed() -> None:
    projection = ChannelOverviewProjection()
    before = projection.apply(projection.identity(), _live_message("ann"))
    after = projection.apply(before, _live_message("bob", topic="release"))
    changes = projection.changes(before, after)
    assert changes["participants"] == {"bob": 1}
    assert changes["topics"] == ["release"]
    assert changes["message_count"] == 2 and changes["by_type"] == {"STATUS": 2}
    assert "participants_evicted" not in changes and "first_activity" not in changes


def _live_message(sender: str, topic: str = "general") -> Message:
    return Message(
        channel="team/live", sender=sender, type=MessageType.STATUS, content="hi", topic=topic
    )
