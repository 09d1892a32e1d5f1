"""The fold role's expiry of commitments: every CHORUS_EXPIRY_CHECK_SECONDS (timer
`expire-commitments`), an expiry EVENT on `chorus.messages` for each overdue commitment of
the channels this worker owns.

The EVENT goes through the log, so the fold expires the commitment as it folds the EVENT,
and a replay expires the same commitments at the same place in each channel's history.
The fold owns the commitments' state; this stage reads it and keeps an index of when each
channel's next deadline falls (`streams.worker.deadlines`, kind `expiry`), told by the fold
as it applies messages (`on_folded`: the domain's `next_deadline` before and after, an
index write only when it moved). A tick reads the entries due in the owned partitions, at
most EXPIRIES_PER_TICK of them, and sends their EVENTs in one batch: it costs what is due,
not what exists. The expiries sent and not folded yet are remembered (bounded by what is
due and in flight), so a tick does not send them again, unless the fold has not applied
them within EXPIRY_RESEND_SECONDS.

The index of a fold table written by something other than this worker's fold (a replay
rebuild, a version upgrade) is built once per partition and table from that table
(`index_partition`, in slices, once the tables have recovered after the partition's first
assignment), and a marker in the index says so: later starts and moves read nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from projections.channel import ProjectionStep
from projections.commitments import (
    CommitmentProjection,
    CommitmentsState,
    expiry_event,
    next_deadline,
    overdue,
)
from projections.model import encode_message, utc_now
from streams.worker.deadlines import Deadlines, Due
from streams.worker.folds import Fold, FoldTables
from streams.worker.runtime import Runtime
from streams.worker.timers import Clock, every

log = logging.getLogger(__name__)

# The projection whose state this stage reads.
COMMITMENTS = CommitmentProjection.name
KIND = "expiry"
# At most this many due channels a tick looks at: a thousand channels expiring together
# take a few ticks, none of them long.
EXPIRIES_PER_TICK = 500
# An expiry sent and not folded after this long is sent again.
EXPIRY_RESEND_SECONDS = 30.0
# Channels indexed per slice when a partition's index is built from its fold table.
INDEX_SLICE = 500


def _built_key(table: str) -> str:
    """The marker, in the index table, that a partition's index covers fold table `table`."""
    return f"built|{table}"


class CommitmentExpiry:
    """The timer's body, apart from Faust's decorators so tests drive it with their clock."""

    def __init__(self, chorus: Runtime) -> None:
        if chorus.folds is None:
            raise ValueError("the expiry stage runs in the fold role")
        self.chorus = chorus
        self.folds: FoldTables = chorus.folds
        self.index = Deadlines(chorus.deadlines, KIND)
        self.projection = next(p for p in chorus.projections if p.name == COMMITMENTS)
        # channel -> correlation id -> when its expiry was sent, until the fold applies it.
        self.sent: dict[str, dict[str, datetime]] = {}

    def on_folded(
        self, channel: str, partition: int, offset: int, steps: Sequence[ProjectionStep]
    ) -> None:
        """The fold applied a message of `channel`: index its next deadline when it moved
        (a `Folder` watcher)."""
        for done in steps:
            if done.projection.name != COMMITMENTS or not done.applied:
                continue
            if done.state is done.before:
                continue
            before, after = _deadline(done.before), _deadline(done.state)
            if before == after:
                continue
            if before is not None:
                self.index.remove(Due(channel, before), partition)
            if after is not None:
                self.index.put(channel, after, partition, offset)
            self.sent.pop(channel, None)

    async def expire_overdue(self, now: datetime) -> int:
        """Send an expiry EVENT for each overdue commitment this worker owns (at most
        EXPIRIES_PER_TICK channels); how many were sent."""
        events: list[tuple[bytes | None, bytes | None, int]] = []
        resend_before = now - timedelta(seconds=EXPIRY_RESEND_SECONDS)
        for partition in sorted(self.chorus.ownership.owned_partitions()):
            for due in self.index.due(partition, now, EXPIRIES_PER_TICK):
                fold = self.folds.tables[COMMITMENTS].get(due.channel, partition)
                state = _state(self.projection, fold)
                if state is None:
                    self.index.remove(due, partition)
                    continue
                late = overdue(state, now)
                if not late:  # an entry the state moved away from: put it where it is
                    self.index.move(due, partition, next_deadline(state))
                    continue
                sent = self.sent.setdefault(due.channel, {})
                for correlation_id in late:
                    at = sent.get(correlation_id)
                    if at is not None and at > resend_before:
                        continue
                    sent[correlation_id] = now
                    event = expiry_event(due.channel, correlation_id, now)
                    events.append((due.channel.encode(), encode_message(event), partition))
        if events:
            await self.chorus.publish(self.chorus.messages, events)
        return len(events)

    async def index_partition(self, partition: int) -> int:
        """Index the deadlines of `partition`'s commitments fold table unless this worker's
        index already covers that table there (see the module); how many were indexed."""
        table = self.folds.tables[COMMITMENTS]
        marker = _built_key(table.name)
        index = self.chorus.deadlines
        if index.get(marker, partition) is not None:
            return 0
        indexed = 0
        for count, (channel, fold) in enumerate(table.scan(partition, "", "\uffff"), 1):
            if count % INDEX_SLICE == 0:
                await asyncio.sleep(0)
            state = _state(self.projection, fold)
            at = next_deadline(state) if state is not None else None
            if at is not None:
                self.index.put(str(channel), at, partition)
                indexed += 1
        index.set(marker, 1, partition)
        log.info("indexed %d deadlines of %s, partition %d", indexed, table.name, partition)
        return indexed


def _deadline(state: Any) -> datetime | None:
    return next_deadline(state) if isinstance(state, CommitmentsState) else None


def _state(projection: Any, fold: Fold | None) -> CommitmentsState | None:
    if fold is None:
        return None
    state = fold.loaded(projection)
    return state if isinstance(state, CommitmentsState) else None


def install(chorus: Runtime, clock: Clock = utc_now) -> CommitmentExpiry:
    """The expiry stage (the fold role): its timer; the fold stage tells it what it folds
    (`CommitmentExpiry.on_folded`, wired by `streams.worker.compose`)."""
    expiry = CommitmentExpiry(chorus)

    async def recovered(*_: Any, **__: Any) -> None:
        for partition in sorted(chorus.ownership.owned_partitions()):
            await expiry.index_partition(partition)

    chorus.app.on_rebalance_complete.connect(recovered)  # after the tables' recovery
    every(
        chorus.app,
        chorus.meter,
        chorus.settings.expiry_check_seconds,
        "expire-commitments",
        expiry.expire_overdue,
        clock,
    )
    return expiry
