"""One log record through every registered projection: the step the worker and replay share.

Pure: given the stored folds of a channel and the next message at its offset, it returns the
new folds, which ones changed, the errors, and the channel's termination decision.

Two rules of the step itself, which replay applies the same way (`joined`, `oversize`):
* a projection whose new state would encode to more than `max_state_bytes` is handled like
  a projection that raised: it keeps its old fold and the step reports the error, so a
  state can never grow past what a table's changelog and a driver event can carry;
* then the overview's `open_commitments` becomes the commitments projection's open count
  after the same message (the overview keeps no copy of the commitments).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import orjson

from projections.commitments import CommitmentProjection, CommitmentsState
from projections.fastcopy import copy_with
from projections.model import Message
from projections.overview import ChannelOverview, ChannelOverviewProjection
from projections.projection import (
    ChannelProjection,
    Folded,
    advance,
    initial_folded,
    load_state,
)
from projections.termination import (
    Decision,
    TerminationCondition,
    TerminationContext,
    decision_to_json,
)

# Default of CHORUS_MAX_STATE_BYTES: half of what a chorus topic accepts (1 MiB + 64 KiB),
# so a driver event carrying the built-in states at their bounds still fits.
MAX_STATE_BYTES = 512 * 1024


class StepFailure(StrEnum):
    """Why a projection kept its old fold: its `apply` raised, or the state it returned
    outgrew `max_state_bytes` (CHORUS_MAX_STATE_BYTES)."""

    RAISED = "raised"
    STATE_BYTES = "state-bytes"


@dataclass(frozen=True)
class ProjectionStep:
    """What one projection did with one message; `failure` and `error` (the reason, one
    line) when it kept its old fold."""

    projection: ChannelProjection[Any]
    folded: Folded
    state: Any  # folded.state loaded: what the projection's apply returned
    applied: bool
    error: str | None = None
    # The loaded state before the message (`state` itself when nothing was applied): what a
    # driver event's `changes` are measured against.
    before: Any = None
    failure: StepFailure | None = None


def step(
    projections: Sequence[ChannelProjection[Any]],
    stored: Mapping[str, Folded | None],
    message: Message,
    offset: int,
    loaded: Mapping[str, Any] | None = None,
    *,
    max_state_bytes: int = MAX_STATE_BYTES,
) -> list[ProjectionStep]:
    """Fold `message` into each projection; a projection that raises, or whose state would
    outgrow `max_state_bytes`, keeps its old fold.

    `loaded` may hold states already in memory for `stored` (same fold, not re-parsed).
    """
    steps = []
    for projection in projections:
        previous = stored.get(projection.name)
        state = loaded.get(projection.name) if loaded and previous is not None else None
        try:
            folded, before, new_state, applied = advance(
                projection, previous, message, offset, state
            )
            steps.append(ProjectionStep(projection, folded, new_state, applied, before=before))
        except Exception as error:  # a user projection's bug must not stop the channel
            raised = f"{type(error).__name__}: {error}"
            steps.append(_kept(projection, previous, state, raised, StepFailure.RAISED))
    for index, done in enumerate(steps):
        previous = stored.get(done.projection.name)
        if not done.applied or (previous is not None and done.folded.state is previous.state):
            continue
        reason = oversize(done.folded.state, max_state_bytes)
        if reason is not None:
            state = loaded.get(done.projection.name) if loaded and previous is not None else None
            steps[index] = _kept(done.projection, previous, state, reason, StepFailure.STATE_BYTES)
    _join_open_count(steps)
    return steps


def _kept(
    projection: ChannelProjection[Any],
    previous: Folded | None,
    state: Any,
    reason: str,
    failure: StepFailure,
) -> ProjectionStep:
    kept = previous if previous is not None else initial_folded(projection)
    kept_state = state if state is not None else load_state(projection, kept.state)
    return ProjectionStep(
        projection, kept, kept_state, False, reason, before=kept_state, failure=failure
    )


def oversize(dumped_state: Any, limit: int) -> str | None:
    """Why a state (already dumped to JSON types) is refused, or None when it fits."""
    size = len(orjson.dumps(dumped_state))
    if size <= limit:
        return None
    return (
        f"state would be {size} bytes encoded, over the {limit}-byte limit "
        "(CHORUS_MAX_STATE_BYTES); the previous state is kept"
    )


def joined(overview: ChannelOverview, commitments: CommitmentsState) -> ChannelOverview:
    """The overview with the commitments' open count (the same object when it has it)."""
    count = commitments.open_count()
    if overview.open_commitments == count:
        return overview
    return copy_with(overview, {"open_commitments": count})


def _join_open_count(steps: list[ProjectionStep]) -> None:
    by_name = {done.projection.name: index for index, done in enumerate(steps)}
    at_overview = by_name.get(ChannelOverviewProjection.name)
    at_commitments = by_name.get(CommitmentProjection.name)
    if at_overview is None or at_commitments is None:
        return
    overview, commitments = steps[at_overview], steps[at_commitments]
    if not (
        overview.applied
        and isinstance(overview.state, ChannelOverview)
        and isinstance(commitments.state, CommitmentsState)
    ):
        return
    state = joined(overview.state, commitments.state)
    if state is overview.state:
        return
    folded = overview.folded.model_copy(
        update={"state": {**overview.folded.state, "open_commitments": state.open_commitments}}
    )
    steps[at_overview] = ProjectionStep(
        overview.projection, folded, state, True, before=overview.before
    )


def decide(condition: TerminationCondition, steps: Sequence[ProjectionStep]) -> Decision:
    """The channel's termination decision over the states after this step."""
    return decide_states(condition, {s.projection.name: s.state for s in steps})


def decide_states(condition: TerminationCondition, states: Mapping[str, Any]) -> Decision:
    """The termination decision over loaded states by projection name: what the fold
    decided after the message those states are at (a read view asks it again)."""
    overview = states.get(ChannelOverviewProjection.name)
    if not isinstance(overview, ChannelOverview):
        return condition.evaluate(TerminationContext(state=states))
    elapsed = (
        overview.last_activity - overview.first_activity
        if overview.last_activity and overview.first_activity
        else timedelta(0)
    )
    return condition.evaluate(
        TerminationContext(state=states, message_count=overview.message_count, elapsed=elapsed)
    )


@dataclass(frozen=True)
class ChannelStanding:
    """Where a channel stands by its stored folds: the loaded states, the termination
    decision over them (what the fold decided after the same message, under the conditions
    given), the offset of the last message folded, its time and the message count."""

    states: dict[str, Any]
    decision: Decision
    offset: int | None
    at: datetime | None
    message_count: int

    def decision_json(self) -> dict[str, Any]:
        """`{"decision", "detail", "offset"}`: the decision and the offset it is current at."""
        return {**decision_to_json(self.decision), "offset": self.offset}


def standing(
    projections: Sequence[ChannelProjection[Any]],
    stored: Mapping[str, Folded | None],
    condition: TerminationCondition,
    loaded: Mapping[str, Any] | None = None,
) -> ChannelStanding:
    """The standing of a channel from its stored folds (a read view's question); `loaded`
    may hold states already loaded from them (not parsed again)."""
    states: dict[str, Any] = {}
    offsets: list[int] = []
    for projection in projections:
        folded = stored.get(projection.name)
        if folded is None:
            continue
        state = loaded.get(projection.name) if loaded else None
        states[projection.name] = (
            state if state is not None else load_state(projection, folded.state)
        )
        if folded.offset >= 0:
            offsets.append(folded.offset)
    overview = states.get(ChannelOverviewProjection.name)
    at = overview.last_activity if isinstance(overview, ChannelOverview) else None
    count = overview.message_count if isinstance(overview, ChannelOverview) else 0
    return ChannelStanding(
        states=states,
        decision=decide_states(condition, states),
        offset=max(offsets) if offsets else None,
        at=at,
        message_count=count,
    )
