"""The fold role's fold tables, one per projection, read through one cache (fold role).

A channel's fold of a projection lives in memory as a `Fold`: the stored record (`Folded`,
its state in JSON types, what the table and the driver events carry) and, once asked, its
state loaded into the projection's own model (loading a long channel's state costs more
than folding a message into it). One cache (`streams.memory.ByteCache`, the `folds` share of
the role's memory) holds the clean ones of every fold table, by (table, channel); what
changed since the last checkpoint is the checkpoint's (`streams.worker.checkpoint`). The
fold step, the views, the timers and the shadow check all read folds here, and the fold
stage is the only writer.

Only immutable (pydantic) states are kept loaded: a plain-data state is loaded from its
table form each time, as it would be after a restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from projections.channel import ChannelStanding, ProjectionStep, standing
from projections.projection import ChannelProjection, Folded, load_state
from projections.termination import TerminationCondition
from streams.fold_store import stored_folded
from streams.memory import ByteCache
from streams.worker.checkpoint import Checkpoint, CheckpointedTable, Codec

# What a fold weighs in memory per byte of its record: the state in JSON types (dicts,
# lists, strings) and, once loaded, the projection's model of it.
FOLD_OVERHEAD = 12.0


class Fold:
    """A projection's fold of a channel: the stored record, and its state loaded once."""

    __slots__ = ("folded", "state")

    def __init__(self, folded: Folded, state: Any = None) -> None:
        self.folded = folded
        self.state = state

    def loaded(self, projection: ChannelProjection[Any]) -> Any:
        """The state in the projection's model (kept when it is immutable)."""
        if self.state is not None:
            return self.state
        state = load_state(projection, self.folded.state)
        if isinstance(state, BaseModel):
            self.state = state
        return state


FOLD = Codec(
    encode=lambda fold: fold.folded.as_record(),
    decode=lambda record: Fold(stored_folded(record)),
    overhead=FOLD_OVERHEAD,
)


class FoldTables:
    """Every projection's fold table, keyed by channel, with one cache."""

    def __init__(
        self,
        checkpoint: Checkpoint,
        tables: dict[str, Any],
        projections: Sequence[ChannelProjection[Any]],
        cache: ByteCache[Any, Any],
    ) -> None:
        """`tables`: projection name -> its Faust table."""
        self.projections = list(projections)
        self.cache = cache
        # Not guarded: the fold step bounds every state (max_state_bytes).
        self.tables: dict[str, CheckpointedTable] = {
            name: checkpoint.table(table, cache=cache, codec=FOLD, guard=False)
            for name, table in tables.items()
        }

    def folds(self, channel: str, partition: int) -> dict[str, Fold | None]:
        """Every projection's fold of `channel` (of `partition`) as this process holds it,
        checkpointed or not (None for a projection with none)."""
        return {name: table.get(channel, partition) for name, table in self.tables.items()}

    def folds_of(self, channel: str, partition: int) -> dict[str, Folded | None]:
        """The stored records of `folds`."""
        return {
            name: fold.folded if fold is not None else None
            for name, fold in self.folds(channel, partition).items()
        }

    def loaded(self, channel: str, folds: dict[str, Fold | None]) -> dict[str, Any]:
        """The states of `folds` already loaded (those the step need not parse)."""
        return {
            name: fold.state
            for name, fold in folds.items()
            if fold is not None and fold.state is not None
        }

    def write(
        self,
        channel: str,
        folds: dict[str, Fold | None],
        steps: Sequence[ProjectionStep],
        partition: int,
        offset: int,
    ) -> None:
        """The folds `steps` applied to `folds` (what `folds` read), from now on; the
        loaded state kept beside each, and beside a fold the step only loaded."""
        for done in steps:
            state = done.state if isinstance(done.state, BaseModel) else None
            if done.applied:
                fold = Fold(done.folded, state)
                self.tables[done.projection.name].set(channel, fold, partition, offset)
                continue
            kept = folds.get(done.projection.name)
            if kept is not None and kept.state is None and kept.folded is done.folded:
                kept.state = state

    def standing(
        self, channel: str, partition: int, conditions: TerminationCondition
    ) -> ChannelStanding | None:
        """Where the channel stands by its folds and `conditions` (None: no fold of it
        here), from the states loaded once."""
        folds = self.folds(channel, partition)
        if all(fold is None for fold in folds.values()):
            return None
        loaded = {
            projection.name: fold.loaded(projection)
            for projection in self.projections
            if (fold := folds.get(projection.name)) is not None
        }
        stored = {name: fold.folded for name, fold in folds.items() if fold is not None}
        return standing(self.projections, stored, conditions, loaded)

    def recently_folded(self, count: int) -> list[str]:
        """Up to `count` channels whose folds were used most recently (from the cache: what a
        sample reads without walking every channel)."""
        found: list[str] = []
        for _, channel in reversed(self.cache.keys()):
            if channel not in found:
                found.append(channel)
                if len(found) >= count:
                    break
        return found
