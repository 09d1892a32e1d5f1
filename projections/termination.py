"""When a channel's work is over: decisions, conditions and their combinators (blocks §4).

Conditions read projection states only, so a decision is as replayable as the states
it was made from.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any, Final

from projections.commitments import CommitmentsState, CommitmentState
from projections.projection import dump_state
from projections.text.lines import counted


@dataclass(frozen=True)
class Continue:
    pass


@dataclass(frozen=True)
class Complete:
    result: Any = None


@dataclass(frozen=True)
class Failed:
    reason: str


@dataclass(frozen=True)
class Escalate:
    reason: str


Decision = Continue | Complete | Failed | Escalate

CONTINUE: Final = Continue()


class DecisionName(StrEnum):
    """How a decision reads on the wire and in every view."""

    CONTINUE = "CONTINUE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"
    ESCALATE = "ESCALATE"


_PRIORITY: Final[dict[type[Decision], int]] = {Continue: 0, Complete: 1, Failed: 2, Escalate: 3}
_JSON_NAME: Final[dict[type[Decision], DecisionName]] = {
    Continue: DecisionName.CONTINUE,
    Complete: DecisionName.COMPLETE,
    Failed: DecisionName.FAILED,
    Escalate: DecisionName.ESCALATE,
}


def priority(decision: Decision) -> int:
    return _PRIORITY[type(decision)]


def _stronger(left: Decision, right: Decision) -> Decision:
    return right if priority(right) > priority(left) else left


def decision_to_json(decision: Decision) -> dict[str, Any]:
    detail: Any
    if isinstance(decision, Complete):
        detail = dump_state(decision.result)
    elif isinstance(decision, Failed | Escalate):
        detail = decision.reason
    else:
        detail = None
    return {"decision": _JSON_NAME[type(decision)], "detail": detail}


@dataclass(frozen=True)
class TerminationContext:
    state: Mapping[str, Any] = field(default_factory=dict)
    message_count: int = 0
    elapsed: timedelta = timedelta(0)


class TerminationCondition(ABC):
    @abstractmethod
    def evaluate(self, ctx: TerminationContext) -> Decision: ...

    def __or__(self, other: TerminationCondition) -> TerminationCondition:
        return Or(self, other)

    def __and__(self, other: TerminationCondition) -> TerminationCondition:
        return And(self, other)


@dataclass(frozen=True)
class Or(TerminationCondition):
    left: TerminationCondition
    right: TerminationCondition

    def evaluate(self, ctx: TerminationContext) -> Decision:
        left = self.left.evaluate(ctx)
        # Both sides run even when the left has decided: a louder right (an escalation)
        # must not be hidden by a quieter left.
        right = self.right.evaluate(ctx)
        if isinstance(left, Continue):
            return right
        if isinstance(right, Continue):
            return left
        return _stronger(left, right)


@dataclass(frozen=True)
class And(TerminationCondition):
    left: TerminationCondition
    right: TerminationCondition

    def evaluate(self, ctx: TerminationContext) -> Decision:
        left = self.left.evaluate(ctx)
        if isinstance(left, Continue):
            return left
        right = self.right.evaluate(ctx)
        if isinstance(right, Continue):
            return right
        return _stronger(left, right)


@dataclass(frozen=True)
class Never(TerminationCondition):
    """Always Continue; the neutral element of `|`, used when a channel configures nothing."""

    def evaluate(self, ctx: TerminationContext) -> Decision:
        return CONTINUE


@dataclass(frozen=True)
class MaxMessages(TerminationCondition):
    n: int

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"max-messages must be at least 1, got {self.n}")

    def evaluate(self, ctx: TerminationContext) -> Decision:
        return Complete("Max messages reached") if ctx.message_count >= self.n else CONTINUE


def _commitments(ctx: TerminationContext, projection: str) -> CommitmentsState:
    """The commitments state under `projection` in the context: the projection's state or
    its dumped JSON, so conditions work on states fresh from a table."""
    state = ctx.state.get(projection)
    if state is None:
        return CommitmentsState()
    if isinstance(state, CommitmentsState):
        return state
    return CommitmentsState.model_validate(state)


@dataclass(frozen=True)
class AllCommitmentsResolved(TerminationCondition):
    """Complete once something was asked and nothing is owed. Reads the counters and the
    active commitments only, so evicting ended ones never changes the decision; a request
    refused at the active-commitment bound (`untracked`) may still be owed, so a channel
    that had one never completes by this condition."""

    projection: str = "commitments"

    def evaluate(self, ctx: TerminationContext) -> Decision:
        commitments = _commitments(ctx, self.projection)
        if not commitments.ever_opened or commitments.open_count() or commitments.untracked:
            return CONTINUE
        return Complete(f"All commitments resolved{_outcomes(commitments)}")


def _outcomes(commitments: CommitmentsState) -> str:
    """ " (3 fulfilled, 1 declined)": how the channel's commitments ended, from the counters
    (so eviction never changes it); a delegation is not counted, its child is."""
    counts = [
        f"{count} {state.value.lower()}"
        for state in _OUTCOME_ORDER
        for count in [commitments.ended.get(state, 0)]
        if count
    ]
    return f" ({', '.join(counts)})" if counts else ""


_OUTCOME_ORDER = (
    CommitmentState.FULFILLED,
    CommitmentState.DECLINED,
    CommitmentState.FAILED,
    CommitmentState.EXPIRED,
)


@dataclass(frozen=True)
class FailOnFailure(TerminationCondition):
    """FAILED once more than `max_failures` commitments failed (a FAILURE reply)."""

    max_failures: int = 0
    projection: str = "commitments"

    def __post_init__(self) -> None:
        if self.max_failures < 0:
            raise ValueError(f"fail-on-failure must be at least 0, got {self.max_failures}")

    def evaluate(self, ctx: TerminationContext) -> Decision:
        failed = _commitments(ctx, self.projection).ended.get(CommitmentState.FAILED, 0)
        if failed > self.max_failures:
            said = counted(failed, "commitment")
            return Failed(f"{said} failed (threshold: {self.max_failures})")
        return CONTINUE


@dataclass(frozen=True)
class EscalateOnExpiry(TerminationCondition):
    """ESCALATE once more than `max_expiries` commitments passed their deadline."""

    max_expiries: int = 0
    projection: str = "commitments"

    def __post_init__(self) -> None:
        if self.max_expiries < 0:
            raise ValueError(f"escalate-on-expiry must be at least 0, got {self.max_expiries}")

    def evaluate(self, ctx: TerminationContext) -> Decision:
        expired = _commitments(ctx, self.projection).ended.get(CommitmentState.EXPIRED, 0)
        if expired > self.max_expiries:
            said = counted(expired, "commitment")
            return Escalate(f"{said} expired (threshold: {self.max_expiries})")
        return CONTINUE


@dataclass(frozen=True)
class EscalateOnDecline(TerminationCondition):
    max_declines: int
    projection: str = "commitments"

    def __post_init__(self) -> None:
        if self.max_declines < 0:
            raise ValueError(f"escalate-on-decline must be at least 0, got {self.max_declines}")

    def evaluate(self, ctx: TerminationContext) -> Decision:
        declines = _commitments(ctx, self.projection).declines
        if declines > self.max_declines:
            said = counted(declines, "decline")
            return Escalate(f"{said} (threshold: {self.max_declines})")
        return CONTINUE


def _int_argument(spec: str, name: str, argument: str | None) -> int:
    if argument is None or not argument.strip():
        raise ValueError(f"termination condition {spec!r}: {name} needs a number, e.g. {name}:3")
    try:
        return int(argument.strip())
    except ValueError:
        raise ValueError(
            f"termination condition {spec!r}: {argument.strip()!r} is not a whole number"
        ) from None


# What a channel without a termination config gets: it completes once everything asked is
# resolved, but a failure reads FAILED and a missed deadline ESCALATE rather than COMPLETE
# (a decline is said in the COMPLETE detail: re-assigning refused work is ordinary).
DEFAULT_TERMINATION: Final = (
    "all-commitments-resolved",
    "fail-on-failure:0",
    "escalate-on-expiry:0",
)
# The spec that opts a channel out of every condition (always CONTINUE).
NEVER_SPEC: Final = "never"
CONDITION_SPECS: Final = (
    "max-messages:N",
    "all-commitments-resolved",
    "escalate-on-decline:N",
    "fail-on-failure[:N]",
    "escalate-on-expiry[:N]",
    NEVER_SPEC,
)


def parse_condition(spec: str) -> TerminationCondition:
    """One condition from its config form: "max-messages:100", "all-commitments-resolved",
    "escalate-on-decline:2", "fail-on-failure" (N = 0) or "fail-on-failure:1",
    "escalate-on-expiry[:N]", "never"."""
    name, separator, argument = spec.strip().partition(":")
    name = name.strip()
    value = argument if separator else None
    if name == "max-messages":
        return MaxMessages(_int_argument(spec, name, value))
    if name == "escalate-on-decline":
        return EscalateOnDecline(_int_argument(spec, name, value))
    if name == "fail-on-failure":
        return FailOnFailure(_int_argument(spec, name, value) if separator else 0)
    if name == "escalate-on-expiry":
        return EscalateOnExpiry(_int_argument(spec, name, value) if separator else 0)
    if name in ("all-commitments-resolved", NEVER_SPEC):
        if separator:
            raise ValueError(f"termination condition {spec!r}: {name} takes no argument")
        return AllCommitmentsResolved() if name != NEVER_SPEC else Never()
    raise ValueError(f"unknown termination condition {spec!r}; known: {', '.join(CONDITION_SPECS)}")


def parse_conditions(specs: Iterable[str]) -> TerminationCondition:
    """The conditions joined with `|`: the first to decide ends the channel. No specs at
    all means the defaults (`DEFAULT_TERMINATION`); `never` opts out."""
    combined: TerminationCondition | None = None
    for spec in list(specs) or DEFAULT_TERMINATION:
        condition = parse_condition(spec)
        combined = condition if combined is None else combined | condition
    return Never() if combined is None else combined
