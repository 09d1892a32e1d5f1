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
  (`topology.parts_table_name`, named for what it held first), keyed
  `<channel>#open:<id>` (`active_key`), written when it is opened or changes
  (acknowledged) and deleted when it ends (a hand-off ends it and opens its child);
* each ended commitment is written once to the same table, keyed `<channel>#<seq>`
  (`ended_key`), where `seq` is how many commitments of the channel ended before it. The
  kept ones are exactly `first = evicted` up to `next = sum(ended)`, so eviction deletes
  the keys below the new `first`, and the per-channel record stays O(1) in the history.

An overview fold is stored split likewise (`overview_record`): its record holds the
counters and no `participants` or `topics`; the participants are spread over up to
`PARTICIPANT_BUCKETS` records of its second table (`topology.parts_table_name`) by a stable
hash of the name, each participant with its message count and a sequence number that
orders them by recent activity (the record keeps the next one, `participant_seq`); the
topics are one record. Parts are versioned: a changed bucket is written under a new key,
`<channel>#p:<bucket>@<offset>` (`<channel>#topics@<offset>`), the record names the version
of each (`participant_parts`, `topics_version`), and the replaced version is deleted. A
message writes the record and its sender's bucket (and an evicted participant's): about 6
of the 200 participants, not all of them. Since a part is never changed in place, a record
read back always stands for the state it was written with, whatever a crash kept of the
writes after it.

`whole_fold` puts commitments back together: the ended commitments in the order they ended, then
the active ones in the order opened. That is the state's own order up to where active and
ended ones interleave, which no fold depends on: lookups take a correlation id's last
commitment (an active one is always after its ended ones) and eviction the ended one that
ended first. A record without `ended_seqs` is whole (written before this split, by `chorus
replay --rebuild`, or of a projection that is not split) and is read as it is; one with
`ended_seqs` but no `active_ids` (split before the active commitments were stored apart)
holds its active commitments itself. The next fold of either writes it split.

Writing order (the fold stage): the new and changed parts first, then the fold table's
record, then, once the broker has acknowledged those, the deletions: a crash never leaves a
record whose parts were deleted (it may leave a deleted part's record in place, never read
again); the refold writes the same keys again. A part that is missing anyway is skipped.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from projections.commitments import CommitmentProjection, CommitmentState
from projections.overview import ChannelOverviewProjection
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


# An overview record stored split names the version (the offset it was written at) of each
# bucket holding participants and of its topics, and the sequence number the next active
# participant gets.
PARTICIPANT_PARTS = "participant_parts"
TOPICS_VERSION = "topics_version"
PARTICIPANT_SEQ = "participant_seq"
# 200 participants (the default bound) over 32 buckets: about 6 in the one a message rewrites.
PARTICIPANT_BUCKETS = 32


def is_split(projection: ChannelProjection[Any]) -> bool:
    """Whether the projection's folds are stored split (the built-in commitments and
    overview), with a second table (`topology.parts_table_name`)."""
    return isinstance(projection, CommitmentProjection | ChannelOverviewProjection)


def part_key(channel: str, part: str) -> str:
    """The key of one part of a split fold in its second table."""
    return f"{channel}{KEY_MARK}{part}"


def ended_part(seq: int) -> str:
    return str(seq)


def active_part(commitment_id: str) -> str:
    return f"{ACTIVE_KEY_PREFIX}{commitment_id}"


def bucket_part(bucket: int, version: int) -> str:
    return f"p:{bucket}@{version}"


def topics_part(version: int) -> str:
    return f"topics@{version}"


def ended_key(channel: str, seq: int) -> str:
    return part_key(channel, ended_part(seq))


def active_key(channel: str, commitment_id: str) -> str:
    return part_key(channel, active_part(commitment_id))


def bucket_of(participant: str) -> int:
    """A participant's bucket: stable across processes (unlike `hash`)."""
    return zlib.crc32(participant.encode()) % PARTICIPANT_BUCKETS


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
    """The table writes of one fold, in the order they are made: the parts to write in the
    second table (by part name, `part_key` makes the key), the fold table's record, then the
    parts to delete. A commitments fold writes its new ended commitments (`ended_part`) and
    its new or changed active ones (`active_part`), and deletes the evicted ended ones and
    the active ones that ended; an overview fold writes the buckets that changed."""

    record: dict[str, Any]
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    removed: tuple[str, ...] = ()


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
    parts = {
        ended_part(seq): {"offset": folded.offset, "commitment": commitment}
        for seq, commitment in enumerate(new, start=max(written, first))
    }
    parts.update(
        (active_part(key), {"offset": folded.offset, "commitment": commitment})
        for key, commitment in active.items()
        if (before := known.get(key)) is not commitment and before != commitment
    )
    removed = [ended_part(seq) for seq in range(previous_first, min(first, written))]
    removed += [active_part(key) for key in stored_active if key not in active]
    return StoredFold(record, parts, tuple(removed))


def overview_record(
    folded: Folded,
    previous: dict[str, Any] | None,
    previous_fold: Folded | None,
    read_apart: ReadApart | None,
) -> StoredFold:
    """The writes that store an overview fold split: the record without participants or
    topics, naming the version of each part it stands for (`participant_parts`: per
    bucket, the offset its version was written at, or null when it holds no one); a new
    version of each bucket whose participants changed since `previous_fold` (the sender,
    an evicted one), with their sequence numbers, and of the topics when they changed; the
    deletion of the versions they replace. Every part is written again when `previous` is
    not split or a part it names cannot be read."""
    state = folded.state
    participants: dict[str, int] = state["participants"]
    offset = folded.offset
    record = folded.as_record()
    record["state"] = {**state, "participants": {}, "topics": []}
    old: list[int | None] = list(previous.get(PARTICIPANT_PARTS, [])) if previous else []
    old_topics: int | None = previous.get(TOPICS_VERSION) if previous else None
    changed = None
    if old and previous is not None and previous_fold is not None and read_apart is not None:
        changed = _changed_buckets(folded, previous, previous_fold, read_apart)
    if changed is not None:
        assert previous is not None and previous_fold is not None
        buckets, numbered = changed
        versions = list(old)
        parts: dict[str, dict[str, Any]] = {}
        removed: list[str] = []
        for bucket, held in buckets.items():
            replaced = old[bucket]
            if replaced is not None and replaced != offset:
                removed.append(bucket_part(bucket, replaced))
            versions[bucket] = offset if held else None
            if held:
                parts[bucket_part(bucket, offset)] = {"offset": offset, "participants": held}
        record[PARTICIPANT_SEQ] = int(previous[PARTICIPANT_SEQ]) + numbered
        record[PARTICIPANT_PARTS] = versions
        record[TOPICS_VERSION] = old_topics
        if old_topics is None or state["topics"] != previous_fold.state["topics"]:
            parts[topics_part(offset)] = {"offset": offset, "topics": state["topics"]}
            record[TOPICS_VERSION] = offset
            if old_topics is not None and old_topics != offset:
                removed.append(topics_part(old_topics))
        return StoredFold(record, parts, tuple(removed))
    # Every part again: the participants numbered in their order of activity.
    everyone: dict[int, dict[str, list[int]]] = {}
    for seq, (name, count) in enumerate(participants.items()):
        everyone.setdefault(bucket_of(name), {})[name] = [count, seq]
    record[PARTICIPANT_SEQ] = len(participants)
    record[PARTICIPANT_PARTS] = [
        offset if bucket in everyone else None for bucket in range(PARTICIPANT_BUCKETS)
    ]
    record[TOPICS_VERSION] = offset
    written = {
        bucket_part(bucket, offset): {"offset": offset, "participants": held}
        for bucket, held in sorted(everyone.items())
    }
    written[topics_part(offset)] = {"offset": offset, "topics": state["topics"]}
    stale = [bucket_part(b, v) for b, v in enumerate(old) if v is not None and v != offset]
    if old_topics is not None and old_topics != offset:
        stale.append(topics_part(old_topics))
    return StoredFold(record, written, tuple(stale))


def _changed_buckets(
    folded: Folded, previous: dict[str, Any], previous_fold: Folded, read_apart: ReadApart
) -> tuple[dict[int, dict[str, list[int]]], int] | None:
    """What each bucket whose participants changed holds now (empty: no one), and how many
    sequence numbers were given (one per changed participant); None when it cannot be done
    in part: a part `previous` names is missing, or the changed participants are not the
    most recently active ones in order (not a state the overview projection folds)."""
    participants: dict[str, int] = folded.state["participants"]
    before: dict[str, int] = previous_fold.state["participants"]
    # A fold changes the most recently active (the last) and evicts the least (the first):
    # scanned from each end up to the first that stayed, so the cost is the change's.
    changed: list[str] = []
    for name in reversed(participants):
        if before.get(name) == participants[name]:
            break
        changed.append(name)
    changed.reverse()
    gone: list[str] = []
    for name in before:
        if name in participants:
            break
        gone.append(name)
    if len(before) - len(gone) + sum(name not in before for name in changed) != len(participants):
        return None  # changed elsewhere too: not a state the overview projection folds
    seq = int(previous[PARTICIPANT_SEQ])
    versions: list[int | None] = previous[PARTICIPANT_PARTS]
    buckets: dict[int, dict[str, list[int]]] = {}
    for bucket in sorted({bucket_of(name) for name in changed + gone}):
        held: dict[str, list[int]] = {}
        version = versions[bucket]
        if version is not None:
            found = read_apart(bucket_part(bucket, version))
            if found is None:
                return None
            held = dict(found["participants"])
        for name in gone:
            held.pop(name, None)
        for number, name in enumerate(changed):
            if bucket_of(name) == bucket:
                held[name] = [participants[name], seq + number]
        buckets[bucket] = held
    return buckets, len(changed)


def stored_fold(
    projection: ChannelProjection[Any],
    folded: Folded,
    previous: dict[str, Any] | None,
    previous_fold: Folded | None = None,
    read_apart: ReadApart | None = None,
) -> StoredFold:
    """The table writes of a fold: split for a split projection, else the whole record.
    `read_apart` reads a part of the projection's second table (by part name)."""
    if isinstance(projection, CommitmentProjection):
        return split_record(folded, previous, previous_fold)
    if isinstance(projection, ChannelOverviewProjection):
        return overview_record(folded, previous, previous_fold, read_apart)
    return StoredFold(folded.as_record())


def whole_fold(record: dict[str, Any], read_apart: ReadApart | None, channel: str) -> Folded:
    """The whole fold a table record stands for (`record` itself when it is whole);
    `read_apart` reads the projection's second table by key (None: it has none)."""
    if PARTICIPANT_PARTS in record and read_apart is not None:
        return _whole_overview(record, read_apart, channel)
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


def _whole_overview(record: dict[str, Any], read_apart: ReadApart, channel: str) -> Folded:
    ordered: list[tuple[int, str, int]] = []
    for bucket, version in enumerate(record[PARTICIPANT_PARTS]):
        if version is None:
            continue
        found = read_apart(part_key(channel, bucket_part(bucket, version)))
        if found is not None:
            ordered += [(seq, name, count) for name, (count, seq) in found["participants"].items()]
    version = record.get(TOPICS_VERSION)
    topics = read_apart(part_key(channel, topics_part(version))) if version is not None else None
    state = {
        **record["state"],
        "participants": {name: count for _, name, count in sorted(ordered)},
        "topics": list(topics["topics"]) if topics is not None else [],
    }
    return Folded.model_construct(
        projection=record["projection"],
        version=record["version"],
        offset=record["offset"],
        state=state,
    )


class MemoryFoldStore:
    """The fold tables and their second tables as dicts, written in the fold stage's order
    (parts, the record, the deletions): what the in-process benches and the tests fold into.
    `write` returns the bytes it wrote (orjson of each value; deletions count nothing)."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], dict[str, Any]] = {}
        self.parts: dict[str, dict[str, Any]] = {}

    def write(
        self,
        projection: ChannelProjection[Any],
        channel: str,
        folded: Folded,
        previous_fold: Folded | None = None,
    ) -> int:
        name = projection.name
        parts = self.parts.setdefault(name, {})
        writes = stored_fold(
            projection,
            folded,
            self.records.get((name, channel)),
            previous_fold,
            lambda part: parts.get(part_key(channel, part)),
        )
        size = len(orjson.dumps(writes.record))
        for part, value in writes.parts.items():
            parts[part_key(channel, part)] = value
            size += len(orjson.dumps(value))
        self.records[(name, channel)] = writes.record
        for part in writes.removed:
            parts.pop(part_key(channel, part), None)
        return size

    def record(self, name: str, channel: str) -> dict[str, Any] | None:
        return self.records.get((name, channel))

    def whole(self, name: str, channel: str) -> Folded | None:
        record = self.records.get((name, channel))
        if record is None:
            return None
        return whole_fold(record, self.parts.get(name, {}).get, channel)
