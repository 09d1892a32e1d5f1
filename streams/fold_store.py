"""How a fold is stored in the worker's tables: a write in proportion to what changed.

The whole state (`projections`) is the domain truth: the fold step, replay, `--verify` and
the shadow check all see it whole. A commitments state, though, holds up to
`COMMITMENTS_KEEP_TERMINAL` ended commitments and up to `COMMITMENTS_MAX_ACTIVE` active
ones, and one message changes at most a few of them; rewriting all of them with every
message made the table write grow with the bounds and the commitments' text, not with the
message. So a commitments fold is stored split, each commitment a record of its own:

* the fold table's value for the channel (`split_record`) holds the fold's projection,
  version and offset, a state holding the counters and no commitments, `active_ids` (the
  ids of the active commitments, in the order they were opened), `earliest_deadline` (the
  earliest `expires_at` among them, or null: the expiry timer's full scan reads fold records
  only) and `ended_seqs` `[first, next]`: the sequence numbers of the ended commitments the
  state keeps;
* each active commitment is a record of the projection's second table
  (`topology.ended_table_name`, named for what it held first), keyed
  `<channel>#open:<id>` (`active_key`), written when it is opened or changes
  (acknowledged) and deleted when it ends (a hand-off ends it and opens its child);
* each ended commitment is written once to the same table, keyed `<channel>#<seq>`
  (`ended_key`), where `seq` is how many commitments of the channel ended before it. The
  kept ones are exactly `first = evicted` up to `next = sum(ended)`, so eviction deletes
  the keys below the new `first`, and the per-channel record stays O(1) in the history.

`whole_fold` puts them back together: the ended commitments in the order they ended, then
the active ones in the order opened. That is the state's own order up to where active and
ended ones interleave, which no fold depends on: lookups take a correlation id's last
commitment (an active one is always after its ended ones) and eviction the ended one that
ended first. A record without `ended_seqs` is whole (written before this split, by `chorus
replay --rebuild`, or of a projection that is not split) and is read as it is; one with
`ended_seqs` but no `active_ids` (split before the active commitments were stored apart)
holds its active commitments itself. The next fold of either writes it split.

Writing order (the fold stage): the new and changed commitment records first, then the fold
table's record, then the deletions, so a crash between them leaves a record whose
commitments all exist (the refold writes the same keys again); a key that is missing anyway
is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from projections.commitments import CommitmentProjection, CommitmentState
from projections.projection import ChannelProjection, Folded

# Channel names are `/`-separated lowercase kebab-case segments: `#` never occurs in one.
KEY_MARK = "#"
# After KEY_MARK: an ended commitment's key is a number, an active one's this and its id.
ACTIVE_KEY_PREFIX = "open:"
ENDED_SEQS = "ended_seqs"
ACTIVE_IDS = "active_ids"
EARLIEST_DEADLINE = "earliest_deadline"
_ACTIVE = frozenset({CommitmentState.OPEN.value, CommitmentState.ACKNOWLEDGED.value})

# Reads one key of a split fold's second table (None when absent).
ReadApart = Callable[[str], Any]


def is_split(projection: ChannelProjection[Any]) -> bool:
    """Whether the projection's folds are stored split (the built-in commitments)."""
    return isinstance(projection, CommitmentProjection)


def ended_key(channel: str, seq: int) -> str:
    return f"{channel}{KEY_MARK}{seq}"


def active_key(channel: str, commitment_id: str) -> str:
    return f"{channel}{KEY_MARK}{ACTIVE_KEY_PREFIX}{commitment_id}"


def earliest_deadline(commitments: Iterable[Mapping[str, Any]]) -> datetime | None:
    """The earliest `expires_at` among the active ones of `commitments` (JSON form)."""
    earliest = None
    for commitment in commitments:
        expires = commitment.get("expires_at")
        if expires and commitment.get("state") in _ACTIVE:
            at = datetime.fromisoformat(expires)
            earliest = at if earliest is None or at < earliest else earliest
    return earliest


def record_deadline(record: Mapping[str, Any]) -> datetime | None:
    """The earliest deadline of a commitments fold table record, split or whole, without
    reading its other table."""
    if ACTIVE_IDS in record:
        found = record.get(EARLIEST_DEADLINE)
        return datetime.fromisoformat(found) if found else None
    return earliest_deadline((record.get("state") or {}).get("commitments", {}).values())


@dataclass(frozen=True)
class StoredFold:
    """The table writes of one fold: the fold table's record; in the second table, the new
    ended commitments (by sequence number) and the new or changed active ones (by id), and
    what to delete: the evicted sequence numbers and the ids no longer active."""

    record: dict[str, Any]
    ended: dict[int, dict[str, Any]] = field(default_factory=dict)
    dropped: range = range(0)
    active: dict[str, dict[str, Any]] = field(default_factory=dict)
    closed: tuple[str, ...] = ()


def split_record(
    folded: Folded, previous: dict[str, Any] | None, previous_fold: Folded | None = None
) -> StoredFold:
    """The writes that store a commitments fold whose table record was `previous` (None: the
    channel is new here) and whose whole fold was `previous_fold` (None: not known, every
    active commitment is written). Only commitments that ended since `previous`, and active
    ones that are new or differ from `previous_fold`'s, are written; a `previous` without
    `ended_seqs` or `active_ids` has none of them in the second table yet, so all are."""
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
    stored_active: list[str] = []
    known: Mapping[str, Any] = {}
    if previous is not None and ACTIVE_IDS in previous:
        stored_active = previous[ACTIVE_IDS]
        if previous_fold is not None:
            known = previous_fold.state["commitments"]
    deadline = earliest_deadline(active.values())
    record = folded.as_record()
    record["state"] = {**state, "commitments": {}}
    record[ENDED_SEQS] = [first, after]
    record[ACTIVE_IDS] = list(active)
    record[EARLIEST_DEADLINE] = deadline.isoformat() if deadline is not None else None
    # Only the ones that ended since `previous` (the last in `ended`) are written.
    new = ended[max(written - first, 0) :]
    return StoredFold(
        record,
        {
            seq: {"offset": folded.offset, "commitment": commitment}
            for seq, commitment in enumerate(new, start=max(written, first))
        },
        range(previous_first, min(first, written)),
        {
            key: {"offset": folded.offset, "commitment": commitment}
            for key, commitment in active.items()
            if (before := known.get(key)) is not commitment and before != commitment
        },
        tuple(key for key in stored_active if key not in active),
    )


def stored_fold(
    projection: ChannelProjection[Any],
    folded: Folded,
    previous: dict[str, Any] | None,
    previous_fold: Folded | None = None,
) -> StoredFold:
    """The table writes of a fold: split for a split projection, else the whole record."""
    if is_split(projection):
        return split_record(folded, previous, previous_fold)
    return StoredFold(folded.as_record())


def whole_fold(record: dict[str, Any], read_apart: ReadApart | None, channel: str) -> Folded:
    """The whole fold a table record stands for (`record` itself when it is whole);
    `read_apart` reads the projection's second table (None: it has none)."""
    seqs = record.get(ENDED_SEQS)
    if seqs is None or read_apart is None:
        return Folded.model_validate(record)
    first, after = seqs
    commitments: dict[str, Any] = {}
    for seq in range(first, after):
        found = read_apart(ended_key(channel, seq))
        if found is not None:
            commitment = found["commitment"]
            commitments[commitment["id"]] = commitment
    state = record["state"]
    active_ids = record.get(ACTIVE_IDS)
    if active_ids is None:  # split before active commitments were stored apart
        commitments.update(state["commitments"])
    for key in active_ids or ():
        found = read_apart(active_key(channel, key))
        if found is not None:
            commitments[key] = found["commitment"]
    return Folded.model_construct(
        projection=record["projection"],
        version=record["version"],
        offset=record["offset"],
        state={**state, "commitments": commitments},
    )
