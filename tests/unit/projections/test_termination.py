from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections.commitments import CommitmentProjection, CommitmentsState, expiry_event
from projections.model import Message, MessageType
from projections.projection import dump_state, fold
from projections.termination import (
    CONTINUE,
    AllCommitmentsResolved,
    Complete,
    Continue,
    Decision,
    Escalate,
    EscalateOnDecline,
    EscalateOnExpiry,
    Failed,
    FailOnFailure,
    MaxMessages,
    Never,
    TerminationCondition,
    TerminationContext,
    decision_to_json,
    parse_condition,
    parse_conditions,
    priority,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CTX = TerminationContext(state={}, message_count=0, elapsed=timedelta(0))


@dataclass(eq=False)
class Const(TerminationCondition):
    """Always returns `decision` and records how often it was asked."""

    decision: Decision
    calls: int = field(default=0)

    def evaluate(self, ctx: TerminationContext) -> Decision:
        self.calls += 1
        return self.decision


C = CONTINUE


# --- decisions --------------------------------------------------------------------------


def test_exactly_four_decision_variants_with_priorities() -> None:
    variants: list[Decision] = [C, Complete("r"), Failed("f"), Escalate("e")]
    assert [priority(d) for d in variants] == [0, 1, 2, 3]
    assert len({type(d) for d in variants}) == 4
    assert Continue() == CONTINUE
    assert Complete("x") == Complete("x") != Complete("y")


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (C, {"decision": "CONTINUE", "detail": None}),
        (Complete("done"), {"decision": "COMPLETE", "detail": "done"}),
        (Failed("broke"), {"decision": "FAILED", "detail": "broke"}),
        (Escalate("urgent"), {"decision": "ESCALATE", "detail": "urgent"}),
    ],
)
def test_decision_to_json(decision: Decision, expected: dict[str, Any]) -> None:
    assert decision_to_json(decision) == expected
    assert json.loads(json.dumps(decision_to_json(decision))) == expected


def test_complete_with_a_model_result_serialises() -> None:
    state = CommitmentsState(declines=2)
    out = decision_to_json(Complete(state))
    assert out["decision"] == "COMPLETE"
    assert out["detail"]["declines"] == 2 and out["detail"]["commitments"] == {}
    json.dumps(out)


# --- combinator table (blocks TerminationConditionTest) --------------------------------

OR_TABLE = [
    (C, C, C),
    (Complete("done"), C, Complete("done")),
    (C, Complete("done"), Complete("done")),
    (Complete("done"), Escalate("urgent"), Escalate("urgent")),
    (Failed("broke"), Complete("done"), Failed("broke")),
]

AND_TABLE = [
    (C, Complete("done"), C),
    (Complete("done"), C, C),
    (Complete("done"), Complete("done"), Complete("done")),
    (Complete("done"), Escalate("urgent"), Escalate("urgent")),
    (Complete("done"), Failed("broke"), Failed("broke")),
]


@pytest.mark.parametrize(("left", "right", "expected"), OR_TABLE)
def test_or_table(left: Decision, right: Decision, expected: Decision) -> None:
    assert (Const(left) | Const(right)).evaluate(CTX) == expected


@pytest.mark.parametrize(("left", "right", "expected"), AND_TABLE)
def test_and_table(left: Decision, right: Decision, expected: Decision) -> None:
    assert (Const(left) & Const(right)).evaluate(CTX) == expected


def test_ties_go_to_the_left() -> None:
    assert (Const(Complete("a")) | Const(Complete("b"))).evaluate(CTX) == Complete("a")
    assert (Const(Failed("a")) & Const(Failed("b"))).evaluate(CTX) == Failed("a")


def test_or_always_evaluates_the_right() -> None:
    right = Const(Escalate("x"))
    assert (Const(Complete("a")) | right).evaluate(CTX) == Escalate("x")
    assert right.calls == 1


def test_and_does_not_evaluate_the_right_after_continue() -> None:
    right = Const(Escalate("x"))
    assert (Const(C) & right).evaluate(CTX) == C
    assert right.calls == 0


# --- combinator laws --------------------------------------------------------------------

decisions = st.one_of(
    st.just(C),
    st.builds(Complete, st.sampled_from(["r1", "r2", 1, None])),
    st.builds(Failed, st.sampled_from(["f1", "f2"])),
    st.builds(Escalate, st.sampled_from(["e1", "e2"])),
)


@given(decisions, decisions)
def test_results_come_from_the_sides(a: Decision, b: Decision) -> None:
    assert (Const(a) | Const(b)).evaluate(CTX) in (a, b)
    assert (Const(a) & Const(b)).evaluate(CTX) in (a, b, C)


@given(decisions, decisions)
def test_and_short_circuits_exactly_on_continue(a: Decision, b: Decision) -> None:
    right = Const(b)
    (Const(a) & right).evaluate(CTX)
    assert right.calls == (0 if isinstance(a, Continue) else 1)


@given(decisions, decisions)
def test_priority_dominance(a: Decision, b: Decision) -> None:
    either = (Const(a) | Const(b)).evaluate(CTX)
    both = (Const(a) & Const(b)).evaluate(CTX)
    assert priority(either) == max(priority(a), priority(b))
    if isinstance(a, Continue) or isinstance(b, Continue):
        assert both == C
    else:
        assert priority(both) == max(priority(a), priority(b))
        assert both == (b if priority(b) > priority(a) else a)


@given(decisions, decisions, decisions)
def test_or_and_and_are_associative(a: Decision, b: Decision, c: Decision) -> None:
    assert ((Const(a) | Const(b)) | Const(c)).evaluate(CTX) == (
        Const(a) | (Const(b) | Const(c))
    ).evaluate(CTX)
    assert ((Const(a) & Const(b)) & Const(c)).evaluate(CTX) == (
        Const(a) & (Const(b) & Const(c))
    ).evaluate(CTX)


@given(decisions)
def test_continue_is_the_identity_of_or(a: Decision) -> None:
    assert (Never() | Const(a)).evaluate(CTX) == a
    assert (Const(a) | Never()).evaluate(CTX) == a
    assert (Const(C) | Const(a)).evaluate(CTX) == a


@given(decisions)
def test_continue_absorbs_and(a: Decision) -> None:
    assert (Never() & Const(a)).evaluate(CTX) == C
    assert (Const(a) & Never()).evaluate(CTX) == C


# --- built-in conditions ----------------------------------------------------------------


def ctx(count: int = 0, **state: Any) -> TerminationContext:
    return TerminationContext(state=state, message_count=count, elapsed=timedelta(seconds=1))


def test_max_messages() -> None:
    condition = MaxMessages(5)
    assert condition.evaluate(ctx(3)) == C
    assert condition.evaluate(ctx(5)) == Complete("Max messages reached")
    assert condition.evaluate(ctx(6)) == Complete("Max messages reached")
    with pytest.raises(ValueError, match="at least 1"):
        MaxMessages(0)


_n = iter(range(1_000_000))


def msg(kind: MessageType, cid: str) -> Message:
    n = next(_n)
    extra: dict[str, Any] = {}
    if kind in {MessageType.DECLINE, MessageType.DONE, MessageType.RESPONSE, MessageType.FAILURE}:
        extra["in_reply_to"] = "m0"
    return Message(
        id=f"m{n}",
        channel="c",
        sender="alice",
        type=kind,
        correlation_id=cid,
        content="reason",
        created_at=T0 + timedelta(minutes=n),
        **extra,
    )


def commitments(*messages: Message) -> CommitmentsState:
    return fold(CommitmentProjection(), messages)


def test_all_commitments_resolved() -> None:
    condition = AllCommitmentsResolved()
    assert condition.evaluate(ctx()) == C
    assert condition.evaluate(ctx(commitments=commitments())) == C
    a, b = msg(MessageType.QUERY, "a"), msg(MessageType.COMMAND, "b")
    one_open = commitments(a, b, msg(MessageType.RESPONSE, "a"))
    assert condition.evaluate(ctx(commitments=one_open)) == C
    resolved = fold(CommitmentProjection(), [msg(MessageType.DONE, "b")], one_open)
    said = Complete("All commitments resolved (2 fulfilled)")
    assert condition.evaluate(ctx(commitments=resolved)) == said
    assert condition.evaluate(ctx(commitments=dump_state(resolved))) == said


def test_all_commitments_resolved_says_how_they_ended() -> None:
    ended = commitments(
        msg(MessageType.QUERY, "a"),
        msg(MessageType.DECLINE, "a"),
        msg(MessageType.QUERY, "b"),
        msg(MessageType.FAILURE, "b"),
        msg(MessageType.QUERY, "c"),
        msg(MessageType.DONE, "c"),
    )
    assert AllCommitmentsResolved().evaluate(ctx(commitments=ended)) == Complete(
        "All commitments resolved (1 fulfilled, 1 declined, 1 failed)"
    )


def test_fail_on_failure() -> None:
    failed = commitments(msg(MessageType.QUERY, "a"), msg(MessageType.FAILURE, "a"))
    decision = FailOnFailure().evaluate(ctx(commitments=failed))
    assert decision == Failed("1 commitment failed (threshold: 0)")
    assert FailOnFailure(1).evaluate(ctx(commitments=failed)) == C
    assert FailOnFailure().evaluate(ctx()) == C
    with pytest.raises(ValueError, match="at least 0"):
        FailOnFailure(-1)


def test_escalate_on_expiry() -> None:
    asked = msg(MessageType.QUERY, "a")
    late = asked.model_copy(update={"deadline": asked.created_at + timedelta(minutes=1)})
    expired = commitments(late, expiry_event("c", "a", late.created_at + timedelta(minutes=2)))
    decision = EscalateOnExpiry().evaluate(ctx(commitments=expired))
    assert decision == Escalate("1 commitment expired (threshold: 0)")
    assert EscalateOnExpiry(1).evaluate(ctx(commitments=expired)) == C
    with pytest.raises(ValueError, match="at least 0"):
        EscalateOnExpiry(-1)


def test_the_default_conditions_surface_failures_and_expiries() -> None:
    defaults = parse_conditions([])
    declined_then_failed = commitments(
        msg(MessageType.COMMAND, "a"),
        msg(MessageType.DECLINE, "a"),
        msg(MessageType.COMMAND, "b"),
        msg(MessageType.FAILURE, "b"),
    )
    decision = defaults.evaluate(ctx(commitments=declined_then_failed))
    assert isinstance(decision, Failed), "a failed request must not read plain COMPLETE"
    done = commitments(msg(MessageType.COMMAND, "a"), msg(MessageType.DONE, "a"))
    assert defaults.evaluate(ctx(commitments=done)) == Complete(
        "All commitments resolved (1 fulfilled)"
    )
    assert defaults.evaluate(ctx(10**6)) == C  # nothing asked yet


def test_escalate_on_decline() -> None:
    condition = EscalateOnDecline(1)
    one = commitments(msg(MessageType.QUERY, "a"), msg(MessageType.DECLINE, "a"))
    assert condition.evaluate(ctx(commitments=one)) == C
    two = fold(
        CommitmentProjection(), [msg(MessageType.QUERY, "b"), msg(MessageType.DECLINE, "b")], one
    )
    decision = condition.evaluate(ctx(commitments=two))
    assert isinstance(decision, Escalate)
    assert "2 declines" in decision.reason and "threshold: 1" in decision.reason
    assert EscalateOnDecline(0).evaluate(ctx(commitments=one)) == Escalate(
        "1 decline (threshold: 0)"
    )
    assert condition.evaluate(ctx()) == C
    with pytest.raises(ValueError):
        EscalateOnDecline(-1)


def test_escalation_beats_completion_when_combined() -> None:
    declined = commitments(msg(MessageType.QUERY, "a"), msg(MessageType.DECLINE, "a"))
    condition = AllCommitmentsResolved() | EscalateOnDecline(0)
    assert isinstance(condition.evaluate(ctx(commitments=declined)), Escalate)


# --- parsing ----------------------------------------------------------------------------


def test_parse_condition() -> None:
    assert parse_condition("max-messages:100") == MaxMessages(100)
    assert parse_condition("  max-messages : 7 ") == MaxMessages(7)
    assert parse_condition("all-commitments-resolved") == AllCommitmentsResolved()
    assert parse_condition("escalate-on-decline:2") == EscalateOnDecline(2)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("max-iterations:3", "unknown termination condition 'max-iterations:3'"),
        ("", "unknown termination condition ''"),
        ("max-messages", "needs a number"),
        ("max-messages:", "needs a number"),
        ("max-messages:ten", "'ten' is not a whole number"),
        ("max-messages:0", "at least 1"),
        ("escalate-on-decline:-1", "at least 0"),
        ("all-commitments-resolved:3", "takes no argument"),
    ],
)
def test_parse_condition_rejects(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_condition(spec)


def test_parse_conditions_joins_with_or() -> None:
    condition = parse_conditions(["max-messages:3", "escalate-on-decline:0"])
    declined = commitments(msg(MessageType.QUERY, "a"), msg(MessageType.DECLINE, "a"))
    assert condition.evaluate(ctx(1)) == C
    assert condition.evaluate(ctx(3)) == Complete("Max messages reached")
    assert isinstance(condition.evaluate(ctx(3, commitments=declined)), Escalate)
    assert parse_conditions(["max-messages:3"]) == MaxMessages(3)


def test_parse_never_opts_out_of_every_condition() -> None:
    condition = parse_conditions(["never"])
    done = commitments(msg(MessageType.COMMAND, "a"), msg(MessageType.FAILURE, "a"))
    assert condition.evaluate(ctx(10**6, commitments=done)) == C


def test_parse_fail_and_expiry_conditions() -> None:
    assert parse_condition("fail-on-failure") == FailOnFailure(0)
    assert parse_condition("fail-on-failure:2") == FailOnFailure(2)
    assert parse_condition("escalate-on-expiry") == EscalateOnExpiry(0)
    assert parse_condition("escalate-on-expiry:1") == EscalateOnExpiry(1)
    with pytest.raises(ValueError, match="known: max-messages:N"):
        parse_condition("fail-fast")
