"""The recap phase machine: debounce, generations, backoff, at most one recap per quiet period."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.model import MessageType
from projections.recap import (
    RecapPhase,
    RecapStatus,
    countdown_label,
    due,
    is_conversation_change,
    on_generation_failed,
    on_generation_started,
    on_generation_succeeded,
    on_message,
)
from tests.unit.projections.recap.support import DEBOUNCE, T0, at, make, msg

# --------------------------------------------------------------------------- phase machine


def completed(offset: int = 0, seconds: float = 0.0) -> RecapStatus:
    status = msg(RecapStatus(), offset, seconds)
    status = on_generation_started(status, at(seconds + DEBOUNCE))
    return on_generation_succeeded(status, status.generation)


def test_initial_status_is_idle_and_json_round_trips() -> None:
    status = msg(RecapStatus(), 4, 1.0)
    assert RecapStatus().phase is RecapPhase.IDLE
    assert RecapStatus.model_validate_json(status.model_dump_json()) == status
    assert status.model_dump(mode="json")["phase"] == "PENDING"


def test_conversation_message_arms_the_countdown() -> None:
    status = msg(RecapStatus(), 0, 1.0)
    assert status.phase is RecapPhase.PENDING
    assert status.due_at == at(1.0 + DEBOUNCE)
    assert status.last_activity == at(1.0)
    assert status.covered_offset == 0
    assert status.generation == 1


def test_activity_restarts_the_countdown_while_pending() -> None:
    status = msg(RecapStatus(), 0, 0.0)
    status = msg(status, 1, 2.0, conversation=False)
    assert status.phase is RecapPhase.PENDING
    assert status.due_at == at(2.0 + DEBOUNCE)
    assert status.generation == 1  # typing does not change the conversation
    assert not due(status, at(DEBOUNCE))
    assert due(status, at(2.0 + DEBOUNCE))


def test_activity_in_idle_changes_nothing() -> None:
    idle = RecapStatus()
    assert msg(idle, 0, 1.0, conversation=False) is idle


def test_completed_ignores_activity() -> None:
    done = completed()
    assert done.phase is RecapPhase.COMPLETED
    assert msg(done, 1, 10.0, conversation=False) is done
    assert not due(done, at(100.0))


def test_new_message_rearms_after_completed() -> None:
    done = completed()
    status = msg(done, 1, 10.0)
    assert status.phase is RecapPhase.PENDING
    assert status.due_at == at(10.0 + DEBOUNCE)
    assert status.generation == done.generation + 1


def test_activity_never_shortens_the_countdown() -> None:
    status = msg(RecapStatus(), 0, 5.0)
    later = msg(status, 1, 1.0, conversation=False)  # late-arriving, older timestamp
    assert later.due_at == status.due_at


def test_replayed_offsets_are_ignored() -> None:
    status = msg(msg(RecapStatus(), 0, 0.0), 1, 1.0)
    assert msg(status, 1, 9.0) is status
    assert msg(status, 0, 9.0) is status
    assert msg(status, 1, 9.0, conversation=False) is status


def test_generating_plus_new_message_discards_the_stale_result() -> None:
    status = msg(RecapStatus(), 0, 0.0)
    running = on_generation_started(status, at(DEBOUNCE))
    assert running.phase is RecapPhase.GENERATING
    started_under = running.generation

    moved_on = msg(running, 1, 4.0)
    assert moved_on.phase is RecapPhase.PENDING
    assert moved_on.generation == started_under + 1
    assert moved_on.due_at == at(4.0 + DEBOUNCE)

    assert on_generation_succeeded(moved_on, started_under) is moved_on
    assert on_generation_failed(moved_on, at(5.0), "boom", 1.0, 60.0) is moved_on
    assert (
        on_generation_failed(moved_on, at(5.0), "boom", 1.0, 60.0, generation=started_under)
        is moved_on
    )


def test_activity_while_generating_changes_nothing() -> None:
    running = on_generation_started(msg(RecapStatus(), 0, 0.0), at(DEBOUNCE))
    assert msg(running, 1, 4.0, conversation=False) is running


def test_start_refused_when_not_due() -> None:
    status = msg(RecapStatus(), 0, 0.0)
    assert on_generation_started(status, at(1.0)) is status
    assert on_generation_started(RecapStatus(), at(100.0)).phase is RecapPhase.IDLE
    running = on_generation_started(status, at(DEBOUNCE))
    assert on_generation_started(running, at(DEBOUNCE + 1)) is running


def test_success_completes_and_resets_attempts() -> None:
    status = msg(RecapStatus(), 0, 0.0)
    running = on_generation_started(status, at(DEBOUNCE))
    failed = on_generation_failed(running, at(DEBOUNCE), "timeout", 2.0, 60.0)
    retry = on_generation_started(failed, failed.next_retry_at or T0)
    done = on_generation_succeeded(retry, retry.generation)
    assert done.phase is RecapPhase.COMPLETED
    assert done.attempts == 0
    assert done.last_error is None
    assert done.next_retry_at is None
    assert done.due_at is None


def test_success_without_a_conversation_is_ignored() -> None:
    idle = RecapStatus()
    assert on_generation_succeeded(idle, idle.generation) is idle


def test_failure_backs_off_exponentially_then_retry_becomes_due() -> None:
    status = on_generation_started(msg(RecapStatus(), 0, 0.0), at(DEBOUNCE))
    now = at(DEBOUNCE)
    delays = []
    for expected_attempts in range(1, 6):
        status = on_generation_failed(status, now, "model down", 2.0, 20.0)
        assert status.phase is RecapPhase.ERROR
        assert status.attempts == expected_attempts
        assert status.last_error == "model down"
        assert status.next_retry_at is not None
        delays.append((status.next_retry_at - now).total_seconds())
        assert not due(status, status.next_retry_at - timedelta(milliseconds=1))
        assert due(status, status.next_retry_at)
        now = status.next_retry_at
        status = on_generation_started(status, now)
        assert status.phase is RecapPhase.GENERATING
    assert delays == [2.0, 4.0, 8.0, 16.0, 20.0]


def test_failure_outside_generating_is_ignored() -> None:
    pending = msg(RecapStatus(), 0, 0.0)
    assert on_generation_failed(pending, at(1.0), "x", 1.0, 10.0) is pending


def test_new_message_during_error_goes_pending_and_keeps_backoff() -> None:
    running = on_generation_started(msg(RecapStatus(), 0, 0.0), at(DEBOUNCE))
    failed = on_generation_failed(running, at(DEBOUNCE), "down", 1.0, 60.0)
    assert msg(failed, 1, 4.0, conversation=False) is failed  # retry keeps its own clock
    status = msg(failed, 2, 4.0)
    assert status.phase is RecapPhase.PENDING
    assert status.next_retry_at is None
    assert status.attempts == 1


def test_late_success_for_the_current_generation_is_accepted_in_error() -> None:
    running = on_generation_started(msg(RecapStatus(), 0, 0.0), at(DEBOUNCE))
    failed = on_generation_failed(running, at(DEBOUNCE), "timeout", 1.0, 60.0)
    assert on_generation_succeeded(failed, running.generation).phase is RecapPhase.COMPLETED


def test_negative_durations_are_rejected() -> None:
    with pytest.raises(ValueError, match="debounce"):
        on_message(RecapStatus(), offset=0, at=T0, debounce=-1, changes_conversation=True)
    running = on_generation_started(msg(RecapStatus(), 0, 0.0), at(DEBOUNCE))
    with pytest.raises(ValueError, match="backoff"):
        on_generation_failed(running, T0, "x", -1.0, 10.0)


def test_naive_datetimes_are_treated_as_utc() -> None:
    status = on_message(
        RecapStatus(),
        offset=0,
        at=datetime(2025, 1, 1, 12, 0, 0),
        debounce=DEBOUNCE,
        changes_conversation=True,
    )
    assert status.due_at == at(DEBOUNCE)
    assert due(status, datetime(2025, 1, 1, 12, 0, 3))


def test_countdown_labels() -> None:
    assert countdown_label(RecapStatus(), T0) == "idle"
    pending = msg(RecapStatus(), 0, 0.0)
    assert countdown_label(pending, at(0.0)) == "3s"
    assert countdown_label(pending, at(0.5)) == "3s"
    assert countdown_label(pending, at(1.0)) == "2s"
    assert countdown_label(pending, at(2.9)) == "1s"
    assert countdown_label(pending, at(3.0)) == "0s"
    assert countdown_label(pending, at(30.0)) == "0s"
    running = on_generation_started(pending, at(DEBOUNCE))
    assert countdown_label(running, at(3.0)) == "generating"
    assert countdown_label(on_generation_succeeded(running, running.generation), T0) == "done"
    failed = on_generation_failed(running, at(3.0), "x", 1.0, 10.0)
    assert countdown_label(failed, at(3.0)) == "error"


def test_is_conversation_change() -> None:
    assert not is_conversation_change(make(MessageType.EVENT, content=None))
    assert is_conversation_change(make(MessageType.STATUS))


# --------------------------------------------------------------------------- properties

events_strategy = st.lists(
    st.tuples(st.integers(min_value=0, max_value=80), st.booleans()),  # gap (0.1s), conversation
    min_size=1,
    max_size=25,
)
TICK = 0.5


def simulate(
    events: list[tuple[int, bool]], outcomes: list[bool]
) -> tuple[RecapStatus, list[list[tuple[str, float]]], list[float]]:
    """Drive the machine like the Faust timer would: ticks every TICK, events in between.

    Returns the final status, the (kind, time) of starts/successes per quiet period
    (the gap after each event, the last one stretched long), and the event times.
    """
    status = RecapStatus()
    now = 0.0
    times: list[float] = []
    periods: list[list[tuple[str, float]]] = []
    outcome_iter = iter(outcomes)
    for index, (gap, conversation) in enumerate(events):
        now += gap / 10
        times.append(now)
        status = msg(status, index, now, conversation=conversation)
        next_time = now + events[index + 1][0] / 10 if index + 1 < len(events) else now + 600
        period: list[tuple[str, float]] = []
        tick = now + TICK
        while tick < next_time:
            if due(status, at(tick)):
                started = on_generation_started(status, at(tick))
                assert started.phase is RecapPhase.GENERATING
                period.append(("start", tick))
                if next(outcome_iter, True):
                    status = on_generation_succeeded(started, started.generation)
                    period.append(("success", tick))
                else:
                    status = on_generation_failed(started, at(tick), "x", 1.0, 8.0)
            tick += TICK
        periods.append(period)
    return status, periods, times


@settings(max_examples=300, deadline=None)
@given(events=events_strategy)
def test_at_most_one_recap_per_quiet_period_when_generation_succeeds(
    events: list[tuple[int, bool]],
) -> None:
    status, periods, times = simulate(events, [])
    conversation_count = sum(1 for _, conversation in events if conversation)
    starts = [t for period in periods for kind, t in period if kind == "start"]
    assert all(len(period) in (0, 2) for period in periods)
    assert len(starts) <= conversation_count
    for index, period in enumerate(periods):
        for _, t in period:
            # Nothing burns until the channel has been quiet for the whole debounce.
            assert t >= times[index] + DEBOUNCE
    # After a conversation message the long final silence always ends in a recap.
    if conversation_count:
        assert status.phase is RecapPhase.COMPLETED
        assert len(starts) >= 1
    else:
        assert status.phase is RecapPhase.IDLE
        assert starts == []


@settings(max_examples=300, deadline=None)
@given(events=events_strategy, outcomes=st.lists(st.booleans(), max_size=40))
def test_at_most_one_success_per_quiet_period_even_with_failures(
    events: list[tuple[int, bool]], outcomes: list[bool]
) -> None:
    _, periods, times = simulate(events, outcomes)
    last_conversation = None
    for index, period in enumerate(periods):
        if events[index][1]:
            last_conversation = times[index]
        assert sum(1 for kind, _ in period if kind == "success") <= 1
        for _, t in period:
            assert last_conversation is not None
            assert t >= last_conversation + DEBOUNCE


@settings(max_examples=200, deadline=None)
@given(events=events_strategy, cut=st.integers(min_value=0, max_value=25))
def test_replaying_a_prefix_changes_nothing(events: list[tuple[int, bool]], cut: int) -> None:
    status = RecapStatus()
    now = 0.0
    folded: list[tuple[int, float, bool]] = []
    for index, (gap, conversation) in enumerate(events):
        now += gap / 10
        folded.append((index, now, conversation))
        status = msg(status, index, now, conversation=conversation)
    for offset, t, conversation in folded[:cut]:
        assert msg(status, offset, t + 1000, conversation=conversation) is status
