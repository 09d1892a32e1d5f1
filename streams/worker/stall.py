"""A watchdog for partitions whose consumer stopped delivering (docs/reliability.md, bug 6).

After a restart or a rebalance Faust's consumer was seen to stop fetching one partition of
`chorus.messages` for good while records waited there: nothing folded past them and nothing
said why. The cause is inside the consumer; the guard is outside it. Each tick compares, per
partition this worker owns, the next offset to fold (`fold-positions`) with the partition's
high watermark. A partition with records waiting whose next offset has not moved for
`patience` seconds is stalled: the fold stage seeks its consumer back to the next offset to
fold and resumes it, logs why, and counts it. Folds are idempotent, so a false alarm costs a
re-read, never a double apply.

`StallWatch` is pure (no Faust, no clock of its own), so it is unit-tested without Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# How long records may wait on a partition whose next offset does not move.
STALL_PATIENCE_SECONDS = 30.0


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
