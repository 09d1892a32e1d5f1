"""The bounds of a channel's state: what is kept, what is counted, what happens at each bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.channel import MAX_STATE_BYTES, step
from projections.commitments import (
    EXCERPT_LENGTH,
    Commitment,
    CommitmentProjection,
    CommitmentsState,
    CommitmentState,
)
from projections.model import Message, MessageType
from projections.overview import ChannelOverviewProjection
from projections.projection import Folded, dump_state, fold
from projections.termination import AllCommitmentsResolved, EscalateOnDecline, TerminationContext
from streams.interfaces.driver_events import LastOffsets
from streams.records import DriverEvent, ProjectionChange
from streams.replay import Replayer
from tests.replay_projections import message_sequences
from tests.unit.projections.test_commitments import conversations
from tests.unit.streams.replay.support import dumped, records_of, replayed, worker_fold

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CHANNEL = "team/long"


def request(n: int, content: str = "please check", **extra: Any) -> Message:
    return Message(
        id=f"q{n}",
        channel=CHANNEL,
        sender="asker",
        type=MessageType.QUERY,
        correlation_id=f"c{n}",
        content=content,
        created_at=T0 + timedelta(seconds=2 * n),
        **extra,
    )


def answer(n: int, kind: MessageType = MessageType.RESPONSE) -> Message:
    return Message(
        id=f"r{n}",
        channel=CHANNEL,
        sender="helper",
        type=kind,
        correlation_id=f"c{n}",
        in_reply_to=f"q{n}",
        content="done" if kind is not MessageType.DECLINE else "cannot",
        created_at=T0 + timedelta(seconds=2 * n + 1),
    )


def test_only_the_last_ended_commitments_are_kept_and_counters_carry_the_rest() -> None:
    projection = CommitmentProjection(keep_terminal=3, max_active=10)
    messages = [m for n in range(10) for m in (request(n), answer(n))]
    state = fold(projection, [*messages, request(10)])
    ended = [c.id for c in state.commitments.values() if c.state.is_terminal]
    assert ended == ["q7", "q8", "q9"]
    assert [c.id for c in state.open_commitments()] == ["q10"]
    assert state.opened == 11 and state.evicted == 7
    assert state.ended == {CommitmentState.FULFILLED: 10}
    assert state.latest("c2") is None and state.latest("c9") is not None


def test_an_answer_to_an_evicted_request_changes_nothing() -> None:
    projection = CommitmentProjection(keep_terminal=0)
    state = fold(projection, [request(1), answer(1)])
    assert state.commitments == {} and state.evicted == 1
    assert projection.apply(state, answer(1)) is state


def test_a_request_beyond_the_active_bound_is_counted_not_tracked() -> None:
    projection = CommitmentProjection(keep_terminal=5, max_active=2)
    state = fold(projection, [request(1), request(2), request(3)])
    assert [c.id for c in state.open_commitments()] == ["q1", "q2"]
    assert state.untracked == 1 and state.opened == 2
    assert projection.apply(state, answer(3)) is state  # its reply is ignored
    state = fold(projection, [answer(1), request(4)], state)
    assert [c.id for c in state.open_commitments()] == ["q2", "q4"]  # room again
    # Something asked was never tracked: the channel cannot be shown resolved.
    state = fold(projection, [answer(2), answer(4)], state)
    assert state.open_count() == 0
    decision = AllCommitmentsResolved().evaluate(TerminationContext({"commitments": state}))
    assert decision == AllCommitmentsResolved().evaluate(TerminationContext({}))  # CONTINUE


def test_commitment_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="max_active"):
        CommitmentProjection(max_active=0)
    with pytest.raises(ValueError, match="keep_terminal"):
        CommitmentProjection(keep_terminal=-1)


def test_each_commitment_says_what_was_asked_in_at_most_200_characters() -> None:
    projection = CommitmentProjection()
    long = "Please   review\nthe migration plan " + "x" * 400
    state = fold(projection, [request(1, content=long)])
    excerpt = state.commitments["q1"].excerpt
    assert excerpt is not None and len(excerpt) == EXCERPT_LENGTH and excerpt.endswith("…")
    assert excerpt.startswith("Please review the migration plan x")
    handoff = Message(
        id="h1",
        channel=CHANNEL,
        sender="helper",
        type=MessageType.HANDOFF,
        correlation_id="c1",
        in_reply_to="q1",
        target="role:dba",
        content="over to you",
        created_at=T0 + timedelta(minutes=1),
    )
    state = projection.apply(state, handoff)
    assert state.commitments["h1"].excerpt == excerpt  # still what was first asked
    short = fold(projection, [request(2, content="ok?")])
    assert short.commitments["q2"].excerpt == "ok?"


def first_of_each_id(messages: list[Message]) -> list[Message]:
    seen: set[str] = set()
    distinct = []
    for message in messages:
        if message.id not in seen:
            seen.add(message.id)
            distinct.append(message)
    return distinct


@settings(max_examples=200, deadline=None)
@given(conversations(), st.integers(0, 3))
def test_decisions_do_not_depend_on_evicted_commitments(messages: list[Message], keep: int) -> None:
    # A record re-sent with the id of a request whose commitment was evicted opens a new one
    # (documented): the property holds for the log's distinct messages.
    messages = first_of_each_id(messages)
    evicting, keeping = CommitmentProjection(keep_terminal=keep), CommitmentProjection(10**9)
    small, full = evicting.identity(), keeping.identity()
    conditions = [AllCommitmentsResolved(), EscalateOnDecline(0), EscalateOnDecline(1)]
    for message in messages:
        small, full = evicting.apply(small, message), keeping.apply(full, message)
        for condition in conditions:
            assert condition.evaluate(TerminationContext({"commitments": small})) == (
                condition.evaluate(TerminationContext({"commitments": full}))
            )
        assert small.open_commitments() == full.open_commitments()
        assert (small.opened, small.ended, small.declines) == (
            full.opened,
            full.ended,
            full.declines,
        )
        assert small.evicted + len(small.commitments) == len(full.commitments)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_live_fold_equals_replay_with_eviction_in_play(data: st.DataObject) -> None:
    channels = ["a/one", "b/two"]
    messages = data.draw(message_sequences(channels, max_size=60))
    projections: list[Any] = [
        CommitmentProjection(keep_terminal=data.draw(st.integers(0, 2)), max_active=2),
        ChannelOverviewProjection(max_participants=2, max_topics=1),
    ]
    records = records_of(messages, junk_every=7)
    fast, exact = Replayer(projections), Replayer(projections, exact=True)
    fast.feed(0, records)
    exact.feed(0, records)
    expected = {c: dumped(f) for c, f in worker_fold(projections, records).items()}
    assert replayed(fast) == expected
    assert replayed(exact) == expected


def widest_commitment(n: int, state: CommitmentState) -> Commitment:
    """A commitment with every text field at the 200-character limit of the message model."""
    word = f"{n:0>200}"
    return Commitment(
        id=f"i{word}"[:200],
        correlation_id=f"c{word}"[:200],
        requester=word,
        obligor=f"role:{word}"[:200],
        opened_by_type=MessageType.COMMAND,
        state=state,
        opened_by=f"i{word}"[:200],
        opened_at=T0,
        acknowledged_by=word,
        acknowledged_at=T0,
        resolved_by=None if state.is_active else word,
        resolved_at=None if state.is_active else T0,
        expires_at=T0,
        delegated_to=word,
        parent=word,
        excerpt="e" * EXCERPT_LENGTH,
    )


def test_a_state_at_every_default_cap_fits_the_default_state_limit() -> None:
    commitments = CommitmentProjection()
    active = [widest_commitment(n, CommitmentState.OPEN) for n in range(commitments.max_active)]
    ended = [
        widest_commitment(10_000 + n, CommitmentState.FULFILLED)
        for n in range(commitments.keep_terminal)
    ]
    state = CommitmentsState(
        commitments={c.id: c for c in [*active, *ended]},
        opened=10**12,
        ended={s: 10**12 for s in CommitmentState if s.is_terminal},
        declines=10**12,
        evicted=10**12,
        untracked=10**12,
    )
    overview = ChannelOverviewProjection()
    view = fold(
        overview,
        [
            Message(
                channel=CHANNEL,
                sender=f"{n:0>200}",
                type=MessageType.STATUS,
                topic=f"{n:0>200}",
                content="x",
            )
            for n in range(overview.max_participants + 10)
        ],
    )
    commitments_bytes = len(orjson.dumps(dump_state(state)))
    overview_bytes = len(orjson.dumps(dump_state(view)))
    assert commitments_bytes <= MAX_STATE_BYTES and overview_bytes <= MAX_STATE_BYTES
    # Both in one driver event still fit what a chorus topic accepts (1 MiB + 64 KiB).
    assert commitments_bytes + overview_bytes < 1024 * 1024


class Hoarder:
    """A user projection whose state grows with every message: the step must bound it."""

    name = "hoarder"
    version = 1

    def identity(self) -> list[str]:
        return []

    def apply(self, state: list[str], message: Message) -> list[str]:
        return [*state, message.content or ""]


def chat(n: int, text: str = "x" * 100) -> Message:
    return Message(
        id=f"m{n}",
        channel=CHANNEL,
        sender="ann",
        type=MessageType.STATUS,
        content=text,
        created_at=T0 + timedelta(seconds=n),
    )


def test_a_state_over_the_limit_keeps_the_old_fold_and_reports_why() -> None:
    projections: list[Any] = [Hoarder(), ChannelOverviewProjection()]
    stored: dict[str, Folded | None] = {}
    limit = 1_000
    outcomes = []
    for offset in range(12):
        steps = step(projections, stored, chat(offset), offset, max_state_bytes=limit)
        outcomes.append(steps[0].applied)
        for done in steps:
            stored[done.projection.name] = done.folded
    # Nine contents of 100 characters fit in 1,000 bytes; the tenth does not.
    assert outcomes == [True] * 9 + [False] * 3
    hoarded = stored["hoarder"]
    assert hoarded is not None and hoarded.offset == 8 and len(hoarded.state) == 9
    error = step(projections, stored, chat(12), 12, max_state_bytes=limit)[0].error
    assert error is not None and "over the 1000-byte limit" in error
    overview = stored["overview"]
    assert overview is not None and overview.state["message_count"] == 12  # the rest folds


def test_replay_refuses_the_same_oversized_states_as_the_worker() -> None:
    projections: list[Any] = [Hoarder(), CommitmentProjection(), ChannelOverviewProjection()]
    messages = [chat(n, "y" * (n * 13 % 90)) for n in range(60)]
    records = records_of(messages)
    fast = Replayer(projections, max_state_bytes=1_500)
    exact = Replayer(projections, max_state_bytes=1_500, exact=True)
    fast.feed(0, records)
    exact.feed(0, records)
    expected = {c: dumped(f) for c, f in worker_fold(projections, records, 1_500).items()}
    assert replayed(fast) == expected == replayed(exact)
    assert fast.stats.errors["hoarder"] == exact.stats.errors["hoarder"] > 0


def test_a_driver_event_too_large_for_a_record_leaves_out_its_largest_state() -> None:
    event = DriverEvent(
        source=f"channel:{CHANNEL}",
        channel=CHANNEL,
        message_id="m",
        partition=0,
        offset=5,
        projections={
            "big": ProjectionChange(version=1, changes=["x"], live=["x" * 5_000]),
            "small": ProjectionChange(version=3, live={"n": 1}),
        },
        decision={"decision": "CONTINUE", "detail": None},
    )
    assert event.fitted(100_000) == event.to_bytes()
    fitted = orjson.loads(event.fitted(2_000))
    assert len(event.fitted(2_000)) <= 2_000
    assert fitted["projections"]["big"]["live"] is None
    assert fitted["projections"]["big"]["changes"] is None
    assert "left out" in fitted["projections"]["big"]["omitted"]
    assert fitted["projections"]["small"] == {
        "version": 3,
        "changes": None,
        "live": {"n": 1},
        "omitted": None,
    }


def test_driver_event_dedupe_remembers_a_bounded_number_of_channels() -> None:
    seen = LastOffsets(limit=2)
    assert seen.is_new("a", 1) and seen.is_new("a", 2)
    assert not seen.is_new("a", 2) and not seen.is_new("a", 0)  # redeliveries
    assert seen.is_new("b", 7) and seen.is_new("c", 1)
    assert len(seen._last) == 2  # "a", the least recently active, was forgotten
    assert seen.is_new("a", 2)  # so a redelivery for it passes once more


def test_four_thousand_messages_keep_the_state_small() -> None:
    # 2,000 answered requests: twenty times the 100 ended commitments kept. Each step dumps
    # the whole state, so this costs about 1 ms a message; the 20,000-message channel runs on
    # the real broker (tests/integration/test_bounded_state.py).
    projections: list[Any] = [CommitmentProjection(), ChannelOverviewProjection()]
    stored: dict[str, Folded | None] = {}
    sizes = []
    for n in range(2_000):
        for offset, message in ((2 * n, request(n)), (2 * n + 1, answer(n))):
            for done in step(projections, stored, message, offset):
                assert done.error is None
                stored[done.projection.name] = done.folded
        if n % 200 == 199:
            sizes.append(len(orjson.dumps(stored["commitments"].state)))  # type: ignore[union-attr]
    assert len(sizes) == 10
    assert max(sizes) < 1.05 * min(sizes) and max(sizes) < 100_000  # flat: 100 ended kept
    assert stored["commitments"].state["opened"] == 2_000  # type: ignore[union-attr]
