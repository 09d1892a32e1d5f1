from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.commitments import (
    EXPIRY_EVENT_KIND,
    LIVE_COMMITMENTS,
    LIVE_FIELDS,
    Commitment,
    CommitmentProjection,
    CommitmentsState,
    CommitmentState,
    expiry_event,
    expiry_target,
    overdue,
)
from projections.model import ActorType, Message, MessageType, decode_message, encode_message
from projections.projection import canonical_hash, dump_state, fold, load_state

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CHANNEL = "team/review"
P = CommitmentProjection()

_counter = iter(range(1_000_000))


def make(
    kind: MessageType,
    cid: str | None = "c1",
    *,
    at: int | None = None,
    sender: str = "alice",
    target: str | None = None,
    deadline: datetime | None = None,
    id: str | None = None,
    actor_type: ActorType = ActorType.AGENT,
    payload: dict[str, Any] | None = None,
) -> Message:
    """A valid message of `kind`, filling in whatever the type rules demand."""
    n = next(_counter)
    fields: dict[str, Any] = {
        "id": id or f"m{n}",
        "channel": CHANNEL,
        "sender": sender,
        "type": kind,
        "actor_type": actor_type,
        "correlation_id": cid,
        "target": target,
        "deadline": deadline,
        "payload": payload,
        "created_at": T0 + timedelta(minutes=n if at is None else at),
    }
    if kind in {MessageType.DECLINE, MessageType.FAILURE, MessageType.PROPOSE}:
        fields["content"] = f"{kind.value.lower()} reason"
    elif kind is not MessageType.EVENT:
        fields["content"] = "text"
    if kind in {
        MessageType.RESPONSE,
        MessageType.DONE,
        MessageType.DECLINE,
        MessageType.FAILURE,
        MessageType.HANDOFF,
    }:
        fields["in_reply_to"] = "m-parent"
    if kind is MessageType.HANDOFF and target is None:
        fields["target"] = "instance:next"
    return Message(**fields)


def chain(state: CommitmentsState, correlation_id: str) -> list[Commitment]:
    return [c for c in state.commitments.values() if c.correlation_id == correlation_id]


def run(*messages: Message) -> CommitmentsState:
    return fold(P, messages)


# --- states -----------------------------------------------------------------------------


def test_each_state_is_exactly_one_of_active_or_terminal() -> None:
    for state in CommitmentState:
        assert state.is_active != state.is_terminal
    assert {s for s in CommitmentState if s.is_active} == {
        CommitmentState.OPEN,
        CommitmentState.ACKNOWLEDGED,
    }


def test_identity_is_empty_and_fresh_every_call() -> None:
    a, b = P.identity(), P.identity()
    assert a is not b
    assert a == b == CommitmentsState()
    assert a.commitments is not b.commitments
    assert not a.ever_opened
    assert a.declines == 0
    assert a.open_commitments() == []


def test_projection_name_and_version() -> None:
    assert (P.name, P.version) == ("commitments", 3)


# --- lifecycle --------------------------------------------------------------------------


def test_command_status_done() -> None:
    command = make(MessageType.COMMAND, target="role:reviewer", sender="lead")
    status = make(MessageType.STATUS, sender="rev")
    done = make(MessageType.DONE, sender="rev")

    opened = P.apply(P.identity(), command)
    c = opened.latest("c1")
    assert c is not None
    assert c.id == command.id == c.opened_by
    assert (c.state, c.requester, c.obligor) == (CommitmentState.OPEN, "lead", "role:reviewer")
    assert c.opened_by_type is MessageType.COMMAND
    assert c.opened_at == command.created_at
    assert c.resolved_at is None and c.parent is None
    assert opened.ever_opened

    acked = P.apply(opened, status)
    c = acked.latest("c1")
    assert c is not None
    assert c.state is CommitmentState.ACKNOWLEDGED
    assert (c.acknowledged_by, c.acknowledged_at) == (status.id, status.created_at)
    assert c.resolved_at is None

    fulfilled = P.apply(acked, done)
    c = fulfilled.latest("c1")
    assert c is not None
    assert c.state is CommitmentState.FULFILLED
    assert (c.resolved_by, c.resolved_at) == (done.id, done.created_at)
    assert c.acknowledged_at == status.created_at
    assert fulfilled.active("c1") is None
    assert fulfilled.open_commitments() == []


def test_query_response_fulfils() -> None:
    state = run(make(MessageType.QUERY), make(MessageType.RESPONSE))
    c = state.latest("c1")
    assert c is not None and c.state is CommitmentState.FULFILLED


@pytest.mark.parametrize(
    ("closing", "expected"),
    [
        (MessageType.DECLINE, CommitmentState.DECLINED),
        (MessageType.FAILURE, CommitmentState.FAILED),
        (MessageType.DONE, CommitmentState.FULFILLED),
        (MessageType.RESPONSE, CommitmentState.FULFILLED),
    ],
)
@pytest.mark.parametrize("opener", [MessageType.QUERY, MessageType.COMMAND])
def test_terminal_transitions_set_resolved(
    opener: MessageType, closing: MessageType, expected: CommitmentState
) -> None:
    closer = make(closing)
    state = run(make(opener), closer)
    c = state.latest("c1")
    assert c is not None
    assert c.state is expected
    assert (c.resolved_by, c.resolved_at) == (closer.id, closer.created_at)
    assert state.declines == (1 if closing is MessageType.DECLINE else 0)


def test_decline_counts() -> None:
    state = run(
        make(MessageType.QUERY, "a"),
        make(MessageType.DECLINE, "a"),
        make(MessageType.COMMAND, "b"),
        make(MessageType.DECLINE, "b"),
        make(MessageType.DECLINE, "b"),  # already terminal: not counted again
    )
    assert state.declines == 2


def test_acknowledged_time_is_set_only_once() -> None:
    first = make(MessageType.STATUS)
    state = run(make(MessageType.COMMAND), first)
    again = P.apply(state, make(MessageType.STATUS))
    assert again is state
    c = again.latest("c1")
    assert c is not None
    assert (c.acknowledged_by, c.acknowledged_at) == (first.id, first.created_at)


def test_commitment_without_target_has_no_obligor() -> None:
    c = run(make(MessageType.QUERY)).latest("c1")
    assert c is not None and c.obligor is None


def test_deadline_becomes_expires_at() -> None:
    deadline = T0 + timedelta(hours=2)
    c = run(make(MessageType.COMMAND, deadline=deadline)).latest("c1")
    assert c is not None and c.expires_at == deadline


# --- handoff ----------------------------------------------------------------------------


def test_handoff_delegates_and_opens_a_child() -> None:
    command = make(MessageType.COMMAND, sender="lead", target="role:reviewer")
    handoff = make(MessageType.HANDOFF, sender="rev", target="instance:bob")
    state = run(command, handoff)

    parent = state.commitments[command.id]
    assert parent.state is CommitmentState.DELEGATED
    assert parent.delegated_to == "instance:bob"
    assert (parent.resolved_by, parent.resolved_at) == (handoff.id, handoff.created_at)

    child = state.commitments[handoff.id]
    assert child.state is CommitmentState.OPEN
    assert child.correlation_id == "c1"
    assert child.parent == command.id
    assert (child.requester, child.obligor) == ("lead", "instance:bob")
    assert child.opened_by == handoff.id
    assert state.active("c1") == child == state.latest("c1")
    assert len(state.open_commitments()) == 1


def test_handoff_chain_of_three() -> None:
    command = make(MessageType.COMMAND, sender="lead", target="instance:a")
    h1 = make(MessageType.HANDOFF, target="instance:b")
    h2 = make(MessageType.HANDOFF, target="instance:c")
    h3 = make(MessageType.HANDOFF, target="instance:d")
    status = make(MessageType.STATUS)
    done = make(MessageType.DONE)
    state = run(command, h1, h2, h3, status, done)

    found = chain(state, "c1")
    assert [c.id for c in found] == [command.id, h1.id, h2.id, h3.id]
    assert [c.state for c in found] == [CommitmentState.DELEGATED] * 3 + [CommitmentState.FULFILLED]
    assert [c.parent for c in found] == [None, command.id, h1.id, h2.id]
    assert [c.delegated_to for c in found] == ["instance:b", "instance:c", "instance:d", None]
    assert [c.obligor for c in found] == ["instance:a", "instance:b", "instance:c", "instance:d"]
    assert {c.requester for c in found} == {"lead"}
    assert found[-1].acknowledged_by == status.id
    assert state.active("c1") is None
    assert state.latest("c1") == found[-1]


def test_handoff_child_keeps_parent_deadline_unless_given_one() -> None:
    deadline = T0 + timedelta(hours=1)
    later = T0 + timedelta(hours=3)
    command = make(MessageType.COMMAND, deadline=deadline)
    h1 = make(MessageType.HANDOFF)
    h2 = make(MessageType.HANDOFF, deadline=later)
    state = run(command, h1)
    assert state.commitments[h1.id].expires_at == deadline
    state = P.apply(state, h2)
    assert state.commitments[h2.id].expires_at == later


def test_handoff_of_acknowledged_commitment() -> None:
    state = run(make(MessageType.QUERY), make(MessageType.STATUS), make(MessageType.HANDOFF))
    assert [c.state for c in chain(state, "c1")] == [
        CommitmentState.DELEGATED,
        CommitmentState.OPEN,
    ]


def test_handoff_reusing_an_existing_id_changes_nothing() -> None:
    command = make(MessageType.COMMAND)
    state = run(command)
    clash = make(MessageType.HANDOFF, id=command.id)
    assert P.apply(state, clash) is state


# --- PROPOSE ----------------------------------------------------------------------------


def test_response_does_not_fulfil_a_proposal() -> None:
    state = run(make(MessageType.PROPOSE, sender="alice"))
    c = state.latest("c1")
    assert c is not None
    assert c.opened_by_type is MessageType.PROPOSE and c.state is CommitmentState.OPEN
    assert P.apply(state, make(MessageType.RESPONSE)) is state
    done = P.apply(state, make(MessageType.DONE))
    c = done.latest("c1")
    assert c is not None and c.state is CommitmentState.FULFILLED


def test_proposal_can_be_declined() -> None:
    c = run(make(MessageType.PROPOSE), make(MessageType.DECLINE)).latest("c1")
    assert c is not None and c.state is CommitmentState.DECLINED


def test_delegated_proposal_is_still_not_fulfilled_by_response() -> None:
    state = run(make(MessageType.PROPOSE), make(MessageType.HANDOFF))
    child = state.active("c1")
    assert child is not None and child.opened_by_type is MessageType.PROPOSE
    assert P.apply(state, make(MessageType.RESPONSE)) is state


# --- no-ops -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind",
    [
        MessageType.STATUS,
        MessageType.RESPONSE,
        MessageType.DONE,
        MessageType.DECLINE,
        MessageType.FAILURE,
        MessageType.HANDOFF,
    ],
)
@pytest.mark.parametrize("terminal", [MessageType.DONE, MessageType.DECLINE, MessageType.FAILURE])
def test_no_transition_out_of_a_terminal_state(kind: MessageType, terminal: MessageType) -> None:
    state = run(make(MessageType.COMMAND, deadline=T0), make(terminal))
    assert P.apply(state, make(kind)) is state
    assert P.apply(state, expiry_event(CHANNEL, "c1", T0 + timedelta(days=1))) is state


def test_delegated_parent_is_not_touched_by_later_messages() -> None:
    command = make(MessageType.COMMAND)
    state = run(command, make(MessageType.HANDOFF), make(MessageType.DECLINE))
    assert state.commitments[command.id].state is CommitmentState.DELEGATED


@pytest.mark.parametrize(
    "kind",
    [
        MessageType.STATUS,
        MessageType.RESPONSE,
        MessageType.DONE,
        MessageType.DECLINE,
        MessageType.FAILURE,
        MessageType.HANDOFF,
    ],
)
def test_unknown_correlation_id_is_a_no_op(kind: MessageType) -> None:
    state = run(make(MessageType.COMMAND, "known"))
    assert P.apply(state, make(kind, "unknown")) is state
    assert P.apply(P.identity(), make(kind, "unknown")) == P.identity()


@pytest.mark.parametrize("kind", [MessageType.STATUS, MessageType.EVENT])
def test_missing_correlation_id_is_a_no_op(kind: MessageType) -> None:
    state = run(make(MessageType.COMMAND))
    assert P.apply(state, make(kind, None)) is state


@pytest.mark.parametrize("kind", [MessageType.EVENT, MessageType.STATUS])
def test_ignored_messages_return_the_same_state_object(kind: MessageType) -> None:
    state = run(make(MessageType.QUERY))
    assert P.apply(state, make(kind, "c1" if kind is MessageType.EVENT else None)) is state
    assert P.apply(state, make(MessageType.EVENT, "c1", payload={"kind": "other"})) is state


def test_second_opener_while_active_is_ignored() -> None:
    first = make(MessageType.QUERY)
    state = run(first)
    assert P.apply(state, make(MessageType.COMMAND)) is state
    assert P.apply(state, first) is state  # redelivered opener


def test_opener_after_resolution_starts_a_new_commitment() -> None:
    first, second = make(MessageType.QUERY), make(MessageType.COMMAND)
    state = run(first, make(MessageType.RESPONSE), second)
    assert [c.id for c in chain(state, "c1")] == [first.id, second.id]
    assert state.active("c1") == state.commitments[second.id]
    # A redelivered old opener whose id is known must not reopen anything.
    resolved = P.apply(state, make(MessageType.DONE))
    assert P.apply(resolved, first) is resolved


def test_find_prefers_active_else_latest() -> None:
    state = run(make(MessageType.QUERY), make(MessageType.DECLINE))
    latest = state.latest("c1")
    assert latest is not None and latest.state is CommitmentState.DECLINED
    assert state.active("c1") is None
    assert state.latest("nope") is None and state.active("nope") is None


def test_commitments_keep_insertion_order() -> None:
    ids = ["z", "a", "m"]
    state = run(*(make(MessageType.QUERY, cid) for cid in ids))
    assert [c.correlation_id for c in state.commitments.values()] == ids
    assert [c.correlation_id for c in state.open_commitments()] == ids


# --- expiry -----------------------------------------------------------------------------


def test_expiry_event_shape() -> None:
    now = T0 + timedelta(hours=1)
    event = expiry_event(CHANNEL, "c1", now)
    assert event.type is MessageType.EVENT
    assert (event.sender, event.actor_type) == ("chorus", ActorType.SYSTEM)
    assert event.payload == {"kind": EXPIRY_EVENT_KIND, "correlation_id": "c1"}
    assert event.created_at == now and event.channel == CHANNEL
    assert event.content is None
    assert expiry_event(CHANNEL, "c1", now) == event  # pure: same inputs, same record
    assert expiry_event(CHANNEL, "c2", now).id != event.id
    assert decode_message(encode_message(event)) == event
    assert expiry_target(event) == "c1"


def test_expiry_event_expires_the_active_commitment() -> None:
    deadline = T0 + timedelta(minutes=30)
    state = run(make(MessageType.COMMAND, deadline=deadline), make(MessageType.STATUS))
    event = expiry_event(CHANNEL, "c1", deadline + timedelta(seconds=5))
    expired = P.apply(state, event)
    c = expired.latest("c1")
    assert c is not None
    assert c.state is CommitmentState.EXPIRED
    assert (c.resolved_by, c.resolved_at) == (event.id, event.created_at)
    assert P.apply(expired, event) is expired


def test_expiry_event_on_the_exact_deadline_expires() -> None:
    deadline = T0 + timedelta(minutes=30)
    state = run(make(MessageType.QUERY, deadline=deadline))
    c = P.apply(state, expiry_event(CHANNEL, "c1", deadline)).latest("c1")
    assert c is not None and c.state is CommitmentState.EXPIRED


def test_stale_or_forged_expiry_events_are_ignored() -> None:
    deadline = T0 + timedelta(hours=1)
    state = run(make(MessageType.COMMAND, "c1", deadline=deadline), make(MessageType.QUERY, "c2"))
    early = expiry_event(CHANNEL, "c1", deadline - timedelta(seconds=1))
    no_deadline = expiry_event(CHANNEL, "c2", deadline + timedelta(days=1))
    unknown = expiry_event(CHANNEL, "c9", deadline + timedelta(days=1))
    forged = make(
        MessageType.EVENT,
        "c1",
        at=24 * 60,
        actor_type=ActorType.AGENT,
        payload={"kind": EXPIRY_EVENT_KIND, "correlation_id": "c1"},
    )
    bad_payload = make(
        MessageType.EVENT,
        "c1",
        at=24 * 60,
        actor_type=ActorType.SYSTEM,
        payload={"kind": EXPIRY_EVENT_KIND, "correlation_id": 7},
    )
    for event in (early, no_deadline, unknown, forged, bad_payload):
        assert P.apply(state, event) is state
    assert expiry_target(forged) is None and expiry_target(bad_payload) is None


def test_expiry_after_handoff_with_later_deadline_is_stale() -> None:
    deadline, later = T0 + timedelta(hours=1), T0 + timedelta(hours=5)
    state = run(make(MessageType.COMMAND, deadline=deadline), make(MessageType.HANDOFF))
    state = P.apply(state, make(MessageType.HANDOFF, deadline=later))
    event = expiry_event(CHANNEL, "c1", deadline + timedelta(minutes=1))
    assert P.apply(state, event) is state


def test_overdue_lists_active_commitments_past_their_deadline() -> None:
    state = run(
        make(MessageType.COMMAND, "early", deadline=T0 + timedelta(hours=1)),
        make(MessageType.QUERY, "exact", deadline=T0 + timedelta(hours=2)),
        make(MessageType.QUERY, "late", deadline=T0 + timedelta(hours=3)),
        make(MessageType.QUERY, "none"),
        make(MessageType.COMMAND, "done", deadline=T0),
        make(MessageType.DONE, "done"),
    )
    now = T0 + timedelta(hours=2)
    assert overdue(state, now) == ["early", "exact"]
    assert overdue(state, T0) == []
    for cid in overdue(state, now):
        state = P.apply(state, expiry_event(CHANNEL, cid, now))
    assert overdue(state, now) == []
    assert [c.correlation_id for c in state.open_commitments()] == ["late", "none"]


# --- replay -----------------------------------------------------------------------------


def _lifecycle() -> list[Message]:
    return [
        make(MessageType.COMMAND, "a", deadline=T0 + timedelta(hours=1), target="role:x"),
        make(MessageType.QUERY, "b"),
        make(MessageType.STATUS, "a"),
        make(MessageType.HANDOFF, "a", target="instance:y"),
        make(MessageType.RESPONSE, "b"),
        make(MessageType.PROPOSE, "c"),
        make(MessageType.DECLINE, "c"),
        expiry_event(CHANNEL, "a", T0 + timedelta(hours=2)),
    ]


def test_replay_is_deterministic_and_survives_persistence() -> None:
    messages = _lifecycle()
    first, second = run(*messages), run(*messages)
    assert first == second
    assert canonical_hash(first) == canonical_hash(second)
    restored = load_state(P, dump_state(first))
    assert restored == first
    assert list(restored.commitments) == list(first.commitments)
    assert canonical_hash(restored) == canonical_hash(first)
    # In the order they ended: the handed-off parent, b, c, then the expired child.
    assert [c.state for c in first.commitments.values()] == [
        CommitmentState.DELEGATED,
        CommitmentState.FULFILLED,
        CommitmentState.DECLINED,
        CommitmentState.EXPIRED,
    ]


def test_commitment_is_frozen() -> None:
    c = run(make(MessageType.QUERY)).latest("c1")
    assert isinstance(c, Commitment)
    with pytest.raises(ValueError, match="frozen"):
        c.state = CommitmentState.FAILED  # type: ignore[misc]


# --- properties over random conversations -----------------------------------------------

CIDS = ["c1", "c2", "c3"]
SENDERS = ["alice", "bob", "carol"]
TARGETS = [None, "instance:bob", "role:reviewer", "capability:search"]
KINDS = [*MessageType, "EXPIRE", "REPEAT"]


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    for i in range(draw(st.integers(0, 40))):
        at = T0 + timedelta(minutes=i)
        step = draw(st.sampled_from(KINDS))
        cid = draw(st.sampled_from(CIDS))
        if step == "REPEAT":
            if messages:
                messages.append(draw(st.sampled_from(messages)))
            continue
        if step == "EXPIRE":
            messages.append(expiry_event(CHANNEL, cid, at))
            continue
        kind = MessageType(step)
        minutes = draw(st.none() | st.integers(-5, 30))
        deadline = None if minutes is None else at + timedelta(minutes=minutes)
        target = draw(st.sampled_from(TARGETS))
        if kind is MessageType.HANDOFF and target is None:
            target = "instance:someone"
        if kind in {MessageType.STATUS, MessageType.EVENT} and draw(st.booleans()):
            cid = None  # type: ignore[assignment]
        fields: dict[str, Any] = {
            "id": f"m{i}",
            "channel": CHANNEL,
            "sender": draw(st.sampled_from(SENDERS)),
            "type": kind,
            "correlation_id": cid,
            "target": target,
            "deadline": deadline,
            "created_at": at,
            "content": None if kind is MessageType.EVENT else "because",
        }
        if kind in {
            MessageType.RESPONSE,
            MessageType.DONE,
            MessageType.DECLINE,
            MessageType.FAILURE,
            MessageType.HANDOFF,
        }:
            fields["in_reply_to"] = f"m{max(i - 1, 0)}"
        messages.append(Message(**fields))
    return messages


def _check_invariants(
    before: CommitmentsState, after: CommitmentsState, projection: CommitmentProjection = P
) -> None:
    active_per_cid: dict[str, int] = {}
    for c in after.commitments.values():
        if c.is_active:
            active_per_cid[c.correlation_id] = active_per_cid.get(c.correlation_id, 0) + 1
            assert c.resolved_at is None
        else:
            assert c.resolved_at is not None and c.resolved_by is not None
        if c.parent is not None and c.parent in after.commitments:
            parent = after.commitments[c.parent]
            assert parent.state is CommitmentState.DELEGATED
            assert parent.delegated_to == c.obligor
            assert parent.correlation_id == c.correlation_id
            assert parent.requester == c.requester
    assert all(count == 1 for count in active_per_cid.values())
    # Bounded: every active one (up to max_active), at most keep_terminal ended ones.
    active = [c for c in after.commitments.values() if c.is_active]
    assert len(active) <= projection.max_active
    assert len(after.commitments) - len(active) <= projection.keep_terminal
    # What stays keeps its order; what ended in this step moved to the end.
    ended_now = [
        cid
        for cid, c in after.commitments.items()
        if c.state.is_terminal
        and (cid not in before.commitments or before.commitments[cid].is_active)
    ]
    kept = [cid for cid in before.commitments if cid in after.commitments and cid not in ended_now]
    assert [cid for cid in after.commitments if cid in kept] == kept
    order = list(after.commitments)
    assert all(order.index(e) > order.index(k) for e in ended_now for k in kept)
    for cid, old in before.commitments.items():
        if old.state.is_terminal and cid in after.commitments:
            assert after.commitments[cid] == old
        if old.acknowledged_at is not None and cid in after.commitments:
            assert after.commitments[cid].acknowledged_at == old.acknowledged_at
    # Counters never shrink, and add up.
    assert after.opened == len(active) + sum(after.ended.values())
    assert after.declines == after.ended.get(CommitmentState.DECLINED, 0)
    for counter in ("opened", "declines", "evicted", "untracked"):
        assert getattr(after, counter) >= getattr(before, counter)
    assert all(after.ended.get(k, 0) >= n for k, n in before.ended.items())
    assert after.open_count() == len(active)
    if after == before:
        assert after is before


@settings(max_examples=300)
@given(conversations())
def test_random_conversations_keep_the_invariants(messages: list[Message]) -> None:
    state = P.identity()
    for message in messages:
        after = P.apply(state, message)
        assert after is not None
        _check_invariants(state, after)
        state = after
    assert fold(P, messages) == state
    assert canonical_hash(fold(P, messages)) == canonical_hash(state)
    assert load_state(P, dump_state(state)) == state
    assert set(overdue(state, T0 + timedelta(days=1))) <= {
        c.correlation_id for c in state.open_commitments()
    }


@settings(max_examples=100)
@given(conversations())
def test_folding_is_resumable_at_any_point(messages: list[Message]) -> None:
    whole = fold(P, messages)
    for cut in range(len(messages) + 1):
        head = load_state(P, dump_state(fold(P, messages[:cut])))
        assert fold(P, messages[cut:], head) == whole


def _scanned_latest(state: CommitmentsState, correlation_id: str) -> Commitment | None:
    """The lookup as a plain reverse scan: what the index must always agree with."""
    for commitment in reversed(state.commitments.values()):
        if commitment.correlation_id == correlation_id:
            return commitment
    return None


@settings(max_examples=300)
@given(conversations())
def test_lookups_agree_with_a_scan_on_folded_and_reloaded_states(messages: list[Message]) -> None:
    state = P.identity()
    for message in messages:
        state = P.apply(state, message)
        reloaded = load_state(P, dump_state(state))  # indexed afresh, as in the worker
        for current in (state, reloaded):
            for cid in [*CIDS, "unknown"]:
                expected = _scanned_latest(current, cid)
                assert current.latest(cid) is expected
                assert current.active(cid) is (
                    expected if expected is not None and expected.is_active else None
                )
            assert current.open_count() == len(current.open_commitments())
        # A further message folds into either the same way.
        assert P.apply(reloaded, message) == P.apply(state, message)


@settings(max_examples=200)
@given(conversations())
def test_the_fast_dump_equals_pydantics(messages: list[Message]) -> None:
    small = CommitmentProjection(keep_terminal=2, max_active=3)
    for projection in (P, small):
        state = projection.identity()
        for message in messages:
            state = projection.apply(state, message)
            assert state.dumped() == state.model_dump(mode="json")
            assert orjson.dumps(state.dumped()) == orjson.dumps(state.model_dump(mode="json"))


# --- what a driver event carries: the live part and what one message changed ---------------


def test_live_holds_the_active_commitments_and_the_counters_never_the_ended_ones() -> None:
    small = CommitmentProjection(keep_terminal=5)
    state = fold(
        small,
        [
            make(MessageType.COMMAND, "a", id="open-a"),
            make(MessageType.QUERY, "b", id="open-b"),
            make(MessageType.DONE, "a", id="done-a"),
        ],
    )
    live = small.live(state)
    whole = dump_state(state)["commitments"]["open-b"]
    # a reference, not the whole commitment: that is in `changes` of the event that opened it
    assert live["active"] == [{name: whole[name] for name in LIVE_FIELDS}]
    assert set(LIVE_FIELDS) < set(whole) and "excerpt" not in live["active"][0]
    assert {k: v for k, v in live.items() if k in state.counters()} == state.counters()
    assert live["ended"] == {"FULFILLED": 1} and live["opened"] == 2
    assert (live["active_count"], live["owed"], live["unassigned"]) == (1, {}, 1)


def test_live_lists_the_newest_active_ones_and_counts_every_one_by_obligor() -> None:
    """Bounded by LIVE_COMMITMENTS however many are open; `owed` counts them all."""
    big = CommitmentProjection(max_active=100)
    messages = [
        make(MessageType.COMMAND, f"c{n}", id=f"open-{n}", target=f"role:{'ab'[n % 2]}")
        for n in range(3 * LIVE_COMMITMENTS)
    ]
    messages.append(make(MessageType.QUERY, "anyone", id="open-any"))
    messages.append(make(MessageType.DONE, "c0"))
    live = big.live(fold(big, messages))
    assert [c["id"] for c in live["active"]] == [
        *(f"open-{n}" for n in range(2 * LIVE_COMMITMENTS + 1, 3 * LIVE_COMMITMENTS)),
        "open-any",
    ]
    assert len(live["active"]) == LIVE_COMMITMENTS
    assert live["active_count"] == 3 * LIVE_COMMITMENTS
    assert live["owed"] == {
        "role:a": sum(n % 2 == 0 for n in range(1, 3 * LIVE_COMMITMENTS)),  # c0 is done
        "role:b": sum(n % 2 == 1 for n in range(1, 3 * LIVE_COMMITMENTS)),
    }
    assert live["unassigned"] == 1


def test_changes_are_the_commitments_one_message_opened_changed_or_ended() -> None:
    before = fold(P, [make(MessageType.COMMAND, "a", id="open-a"), make(MessageType.QUERY, "b")])
    opened = P.apply(before, make(MessageType.QUERY, "c", id="open-c"))
    assert [c["id"] for c in P.changes(before, opened)["commitments"]] == ["open-c"]
    acknowledged = P.apply(opened, make(MessageType.STATUS, "a"))
    assert [(c["id"], c["state"]) for c in P.changes(opened, acknowledged)["commitments"]] == [
        ("open-a", "ACKNOWLEDGED")
    ]
    handed = P.apply(acknowledged, make(MessageType.HANDOFF, "a", id="to-bob", target="role:bob"))
    assert [(c["id"], c["state"]) for c in P.changes(acknowledged, handed)["commitments"]] == [
        ("open-a", "DELEGATED"),
        ("to-bob", "OPEN"),
    ]
    ignored = P.apply(handed, make(MessageType.STATUS, None))
    assert P.changes(handed, ignored) == {"commitments": []}


def test_changes_find_the_same_commitments_in_a_state_read_back_from_its_table() -> None:
    before = fold(P, [make(MessageType.COMMAND, "a", id="open-a"), make(MessageType.QUERY, "b")])
    reloaded = load_state(P, dump_state(before))
    after = P.apply(reloaded, make(MessageType.DONE, "b"))
    changed = P.changes(before, after)["commitments"]
    assert [(c["correlation_id"], c["state"]) for c in changed] == [("b", "FULFILLED")]
