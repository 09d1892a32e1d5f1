"""The fold role's watch for partitions whose consumer stopped delivering (timer
`watch-stalls`; docs/reliability.md, bug 6).

After a restart or a rebalance Faust's consumer was seen to stop fetching one partition of
`chorus.messages` for good while records waited there: nothing folded past them and nothing
said why. The cause is inside the consumer; the guard is outside it. Each tick compares, per
partition this worker owns, the next offset to fold (the fold's `fold-positions`) with the
partition's high watermark. A partition with records waiting whose next offset has not
moved for `patience` seconds is stalled: the stage seeks its consumer back to the next
offset to fold and resumes it, logs why, and counts it. Folds are idempotent, so a false
alarm costs a re-read, never a double apply.

`StallWatch` decides, and is pure (no Faust, no clock of its own), so it is unit-tested
without Kafka; `StallGuard` asks the consumer and acts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from faust.types import TP as TopicPartition

from streams.worker.runtime import Runtime
from streams.worker.timers import every, moving

log = logging.getLogger(__name__)

# How long records may wait on a partition whose next offset does not move.
STALL_PATIENCE_SECONDS = 30.0
# How often the watch looks at the owned partitions (it acts after STALL_PATIENCE_SECONDS).
STALL_CHECK_SECONDS = 5.0


@dataclass(frozen=True)
class Stall:
    partition: int
    next_offset: int
    highwater: int
    seconds: float

    def describe(self) -> str:
        return (
            f"partition {self.partition} has {self.highwater - self.next_offset} records "
            f"waiting at offset {self.next_offset} and has not moved for {self.seconds:.0f} s; "
            "seeking the consumer back to it"
        )


class StallWatch:
    """Remembers since when each partition's next offset has stayed where it is."""

    def __init__(self, patience: float = STALL_PATIENCE_SECONDS) -> None:
        self.patience = patience
        self._since: dict[int, tuple[int, float]] = {}

    def check(
        self, now: float, next_offsets: Mapping[int, int], highwaters: Mapping[int, int]
    ) -> list[Stall]:
        """The stalled partitions among `next_offsets` (the owned ones) at time `now`.

        A partition with nothing waiting, or one that moved since the last check, is fine;
        one that is reported starts a new wait, so it is reported again only if the seek
        did not help within another `patience`.
        """
        stalls = []
        for partition, next_offset in next_offsets.items():
            highwater = highwaters.get(partition)
            since = self._since.get(partition)
            if highwater is None or highwater <= next_offset:
                self._since.pop(partition, None)
                continue
            if since is None or since[0] != next_offset:
                self._since[partition] = (next_offset, now)
                continue
            waited = now - since[1]
            if waited >= self.patience:
                stalls.append(Stall(partition, next_offset, highwater, waited))
                self._since[partition] = (next_offset, now)
        for partition in set(self._since) - set(next_offsets):
            del self._since[partition]  # no longer ours
        return stalls


class StallGuard:
    """The timer's body, apart from Faust's decorators so tests can drive it: it reads the
    fold's next offsets (`Runtime.next_offset`) and the consumer's high watermarks, and
    seeks back what `StallWatch` finds stalled."""

    def __init__(self, chorus: Runtime, watch: StallWatch | None = None) -> None:
        self.chorus = chorus
        self.watch = watch or StallWatch()

    async def unstall(self, now: float) -> list[Stall]:
        """Seek back and resume every owned partition whose consumer stopped delivering;
        not while partitions move or tables recover."""
        app = self.chorus.app
        if moving(app):
            return []
        topic = self.chorus.messages.get_topic_name()
        next_offsets = {
            partition: found
            for partition in self.chorus.ownership.owned_partitions()
            for found in [self.chorus.next_offset(partition)]
            if found is not None
        }
        if not next_offsets:
            return []
        highwaters = await app.consumer.highwaters(
            *[TopicPartition(topic, p) for p in next_offsets]
        )
        stalls = self.watch.check(
            now, next_offsets, {tp.partition: int(at) for tp, at in highwaters.items()}
        )
        for stall in stalls:
            log.warning("stalled consumer: %s", stall.describe())
            self.chorus.meter.stalls.inc()
            partition = TopicPartition(topic, stall.partition)
            await app.consumer.seek(partition, stall.next_offset)
            app.consumer.resume_partitions([partition])
        return stalls


def install(chorus: Runtime) -> StallGuard:
    """The stall watch (the fold role), over the fold's next offsets."""
    guard = StallGuard(chorus)

    async def watch_stalls(_: object) -> None:
        await guard.unstall(time.monotonic())

    every(chorus.app, chorus.meter, STALL_CHECK_SECONDS, "watch-stalls", watch_stalls)
    return guard
