"""The fold role's expiry of commitments: every CHORUS_EXPIRY_CHECK_SECONDS (timer
`expire-commitments`), an expiry EVENT on `chorus.messages` for each overdue commitment of
the channels this worker owns.

The EVENT goes through the log, so the fold expires the commitment as it folds the EVENT,
and a replay expires the same commitments at the same place in each channel's history.
The fold owns the commitments' state; this stage reads it (`Runtime.folds_of`) and keeps
only what saves work: an index of each channel's earliest deadline, told by the fold as it
applies messages (`on_folded`), so a tick visits only the channels that can be overdue,
and the expiries sent and not yet folded, so a tick does not send them again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from projections.channel import ProjectionStep
from projections.commitments import (
    ACTIVE_STATES,
    CommitmentProjection,
    CommitmentsState,
    expiry_event,
    overdue,
)
from projections.model import encode_message, utc_now
from streams.worker.runtime import Runtime

# The projection whose state this stage reads.
COMMITMENTS = CommitmentProjection.name


def earliest_deadline(commitments: Iterable[Mapping[str, Any]]) -> datetime | None:
    """The earliest `expires_at` among the active ones of `commitments` (as stored: JSON)."""
    earliest = None
    for commitment in commitments:
        expires = commitment.get("expires_at")
        if expires and commitment.get("state") in ACTIVE_STATES:
            at = datetime.fromisoformat(expires)
            earliest = at if earliest is None or at < earliest else earliest
    return earliest


class CommitmentExpiry:
    """The timer's body, apart from Faust's decorators so tests can drive it."""

    def __init__(self, chorus: Runtime) -> None:
        self.chorus = chorus
        # (channel, correlation id) of the expiries sent whose commitment is still overdue.
        self._expiry_sent: set[tuple[str, str]] = set()
        # channel -> the earliest deadline among its active commitments (none: not listed),
        # so the timer visits only channels that can be overdue. The table is scanned in
        # full from time to time (`Rescan`: rebalance, recovery, replay rebuilds).
        self._deadlines: dict[str, datetime] = {}
        self._rescan = chorus.checkpoint.rescan()

    def on_folded(self, channel: str, steps: Sequence[ProjectionStep]) -> None:
        """The fold applied a message of `channel`: index its commitments' earliest deadline
        when they changed (a `Folder` watcher)."""
        for done in steps:
            if done.projection.name != COMMITMENTS or not done.applied:
                continue
            if done.state is not done.before:
                commitments = done.folded.state.get("commitments", {})
                self._index_deadline(channel, earliest_deadline(commitments.values()))

    def _index_deadline(self, channel: str, earliest: datetime | None) -> None:
        if earliest is None:
            self._deadlines.pop(channel, None)
        else:
            self._deadlines[channel] = earliest

    async def expire_overdue(self, now: datetime) -> int:
        """Write an expiry EVENT for each overdue commitment this worker owns.

        The EVENT goes through the log, so replay expires the same commitments at the
        same place in each channel's history.
        """
        table = self.chorus.folds.get(COMMITMENTS)
        if table is None:
            return 0
        sent: set[tuple[str, str]] = set()
        still_overdue: set[tuple[str, str]] = set()
        if self._rescan.due():
            self._deadlines.clear()
            for channel, folded in table.items():
                if folded is not None:
                    commitments = folded.state.get("commitments", {}).values()
                    self._index_deadline(str(channel), earliest_deadline(commitments))
        for channel in [c for c, at in self._deadlines.items() if at <= now]:
            partition = self.chorus.messages_partition(channel)
            if partition is None:
                continue
            folded = self.chorus.folds_of(channel).get(COMMITMENTS)
            if folded is None:
                continue
            state = CommitmentsState.model_validate(folded.state)
            for correlation_id in overdue(state, now):
                still_overdue.add((channel, correlation_id))
                if (channel, correlation_id) in self._expiry_sent:
                    continue
                event = expiry_event(channel, correlation_id, now)
                await self.chorus.messages.send(key=channel.encode(), value=encode_message(event))
                sent.add((channel, correlation_id))
        # Forget commitments that were expired by the fold, so the set stays bounded.
        self._expiry_sent = (self._expiry_sent | sent) & still_overdue
        return len(sent)


def install(chorus: Runtime) -> CommitmentExpiry:
    """The expiry stage (the fold role): its timer; the fold stage tells it what it folds
    (`CommitmentExpiry.on_folded`, wired by `streams.worker.compose`)."""
    expiry = CommitmentExpiry(chorus)

    @chorus.app.timer(chorus.settings.expiry_check_seconds, name="expire-commitments")
    async def expire_commitments() -> None:
        await expiry.expire_overdue(utc_now())

    return expiry
