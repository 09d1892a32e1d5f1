"""One log record through every registered projection: the step the worker and replay share.

Pure: given the stored folds of a channel and the next message at its offset, it returns the
new folds, which ones changed, the errors, and the channel's termination decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from projections.model import Message
from projections.overview import ChannelOverview, ChannelOverviewProjection
from projections.projection import (
    ChannelProjection,
    Folded,
    advance,
    initial_folded,
    load_state,
)
from projections.termination import Decision, TerminationCondition, TerminationContext


@dataclass(frozen=True)
class ProjectionStep:
    """What one projection did with one message."""

    projection: ChannelProjection[Any]
    folded: Folded
    state: Any  # folded.state loaded: what the projection's apply returned
    applied: bool
    error: str | None = None


def step(
    projections: Sequence[ChannelProjection[Any]],
    stored: Mapping[str, Folded | None],
    message: Message,
    offset: int,
    loaded: Mapping[str, Any] | None = None,
) -> list[ProjectionStep]:
    """Fold `message` into each projection; a projection that raises keeps its old fold.

    `loaded` may hold states already in memory for `stored` (same fold, not re-parsed).
    """
    steps = []
    for projection in projections:
        previous = stored.get(projection.name)
        state = loaded.get(projection.name) if loaded and previous is not None else None
        try:
            folded, new_state, applied = advance(projection, previous, message, offset, state)
            steps.append(ProjectionStep(projection, folded, new_state, applied))
        except Exception as error:  # a user projection's bug must not stop the channel
            kept = previous if previous is not None else initial_folded(projection)
            reason = f"{type(error).__name__}: {error}"
            kept_state = state if state is not None else load_state(projection, kept.state)
            steps.append(ProjectionStep(projection, kept, kept_state, False, reason))
    return steps


def decide(condition: TerminationCondition, steps: Sequence[ProjectionStep]) -> Decision:
    """The channel's termination decision over the states after this step."""
    states = {s.projection.name: s.state for s in steps}
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
