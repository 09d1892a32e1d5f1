"""How a fold is stored in the worker's tables: a write in proportion to what changed.

The whole state (`projections`) is the domain truth: the fold step, replay, `--verify` and
the shadow check all see it whole. A commitments state, though, holds up to
`COMMITMENTS_KEEP_TERMINAL` ended commitments, and an ended commitment never changes again;
rewriting all of them with every message made the table write grow with the bound, not with
the message. So a commitments fold is stored split:

* the fold table's value for the channel (`split_record`) is the live part: the fold's
  projection, version and offset, a state holding only the active commitments (under
  `commitments`, in the order they were opened) and the counters, and `ended_seqs`
  `[first, next]`: the sequence numbers of the ended commitments the state keeps;
* each ended commitment is written once to the projection's ended table
  (`topology.ended_table_name`), keyed `<channel>#<seq>` (`ended_key`), where `seq` is how
  many commitments of the channel ended before it. The kept ones are exactly
  `first = evicted` up to `next = sum(ended)`, so eviction deletes the keys below the new
  `first`, and the per-channel record stays O(1) in the history.

`whole_fold` puts the two back together: the ended commitments in the order they ended,
then the active ones. That is the state's own order up to where active and ended ones
interleave, which no fold depends on: lookups take a correlation id's last commitment (an
active one is always after its ended ones) and eviction the ended one that ended first. A
record without `ended_seqs` is whole (written before this split, by `chorus replay
--rebuild`, or of a projection that is not split) and is read as it is; the next fold of
that channel writes it split.

Writing order (the fold stage): the new ended records first, then the fold table's record,
then the deletions, so a crash between them leaves a record whose ended commitments exist
(the refold writes the same keys again); a key that is missing anyway is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from projections.commitments import CommitmentProjection, CommitmentState
from projections.projection import ChannelProjection, Folded

# Channel names are `/`-separated lowercase kebab-case segments: `#` never occurs in one.
ENDED_KEY_MARK = "#"
ENDED_SEQS = "ended_seqs"
_ACTIVE = frozenset({CommitmentState.OPEN.value, CommitmentState.ACKNOWLEDGED.value})

# Reads one key of an ended table (None when absent).
ReadEnded = Callable[[str], Any]


def is_split(projection: ChannelProjection[Any]) -> bool:
    """Whether the projection's folds are stored split (the built-in commitments)."""
    return isinstance(projection, CommitmentProjection)


def ended_key(channel: str, seq: int) -> str:
    return f"{channel}{ENDED_KEY_MARK}{seq}"


@dataclass(frozen=True)
class StoredFold:
    """The table writes of one fold: the fold table's record, the ended table's new records
    (by sequence number) and the sequence numbers to delete."""

    record: dict[str, Any]
    ended: dict[int, dict[str, Any]] = field(default_factory=dict)
    dropped: range = range(0)


def split_record(folded: Folded, previous: dict[str, Any] | None) -> StoredFold:
    """The writes that store a commitments fold whose table record was `previous` (None: the
    channel is new here). Only commitments that ended since `previous` are written; a whole
    `previous` (not split) has none in the ended table yet, so all kept ones are."""
    state = folded.state
    first = int(state["evicted"])
    after = sum(state["ended"].values())
    active: dict[str, Any] = {}
    ended: list[dict[str, Any]] = []
    for key, commitment in state["commitments"].items():
        if commitment["state"] in _ACTIVE:
            active[key] = commitment
        else:
            ended.append(commitment)
    if first + len(ended) != after:  # not a state this projection wrote; keep it whole
        return StoredFold(folded.as_record())
    if previous is not None and ENDED_SEQS in previous:
        previous_first, written = previous[ENDED_SEQS]
    else:
        previous_first = written = first
    record = folded.as_record()
    record["state"] = {**state, "commitments": active}
    record[ENDED_SEQS] = [first, after]
    # Only the ones that ended since `previous` (the last in `ended`) are written.
    new = ended[max(written - first, 0) :]
    return StoredFold(
        record,
        {
            seq: {"offset": folded.offset, "commitment": commitment}
            for seq, commitment in enumerate(new, start=max(written, first))
        },
        range(previous_first, min(first, written)),
    )


def stored_fold(
    projection: ChannelProjection[Any], folded: Folded, previous: dict[str, Any] | None
) -> StoredFold:
    """The table writes of a fold: split for a split projection, else the whole record."""
    if is_split(projection):
        return split_record(folded, previous)
    return StoredFold(folded.as_record())


def whole_fold(record: dict[str, Any], read_ended: ReadEnded | None, channel: str) -> Folded:
    """The whole fold a table record stands for (`record` itself when it is whole);
    `read_ended` reads the projection's ended table (None: it has none)."""
    seqs = record.get(ENDED_SEQS)
    if seqs is None or read_ended is None:
        return Folded.model_validate(record)
    first, after = seqs
    commitments: dict[str, Any] = {}
    for seq in range(first, after):
        found = read_ended(ended_key(channel, seq))
        if found is not None:
            commitment = found["commitment"]
            commitments[commitment["id"]] = commitment
    state = record["state"]
    commitments.update(state["commitments"])
    return Folded.model_construct(
        projection=record["projection"],
        version=record["version"],
        offset=record["offset"],
        state={**state, "commitments": commitments},
    )
