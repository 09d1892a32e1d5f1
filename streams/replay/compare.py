"""The functional core of verification: live folds against replayed ones, and their diffs."""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from projections.projection import (
    ChannelProjection,
    Folded,
    canonical_hash,
)
from streams.replay.core import LimitFor


@dataclass(frozen=True)
class Difference:
    channel: str
    projection: str
    kind: Literal["state", "offset", "version", "missing-live", "missing-replay"]
    live: Folded | None
    replay: Folded | None

    def describe(self) -> str:
        live = _where(self.live)
        replay = _where(self.replay)
        reasons = {
            "state": "states differ",
            "offset": "last folded offsets differ",
            "version": "versions differ",
            "missing-live": "the log folds into this projection but the worker has no fold",
            "missing-replay": "the worker has a fold the log does not produce",
        }
        return (
            f"{self.channel} [{self.projection}]: {reasons[self.kind]} "
            f"(live {live}, replay {replay})"
        )


def _where(folded: Folded | None) -> str:
    if folded is None:
        return "none"
    return f"v{folded.version}@{folded.offset} {canonical_hash(folded.state)[:12]}"


def live_folds(view: Mapping[str, Any] | None) -> dict[str, Folded]:
    """The folds in a worker state view (`GET /channels/{channel}/state`)."""
    if not view:
        return {}
    return {
        name: Folded(
            projection=name, version=body["version"], offset=body["offset"], state=body["state"]
        )
        for name, body in (view.get("projections") or {}).items()
    }


def compare_channel(
    channel: str,
    live: Mapping[str, Folded],
    replay: Mapping[str, Folded],
    names: Iterable[str],
) -> list[Difference]:
    """Differences between the live folds and the replayed ones, per projection."""
    differences = []
    for name in names:
        theirs, ours = live.get(name), replay.get(name)
        kind: Literal["state", "offset", "version", "missing-live", "missing-replay"] | None
        if theirs is None and ours is None:
            kind = None
        elif theirs is None:
            kind = "missing-live"
        elif ours is None:
            kind = "missing-replay"
        elif theirs.version != ours.version:
            kind = "version"
        elif canonical_hash(theirs.state) != canonical_hash(ours.state):
            kind = "state"
        elif theirs.offset != ours.offset:
            kind = "offset"
        else:
            kind = None
        if kind is not None:
            differences.append(Difference(channel, name, kind, theirs, ours))
    return differences


def _pretty(folded: Folded | None) -> list[str]:
    if folded is None:
        return []
    body = {"version": folded.version, "offset": folded.offset, "state": folded.state}
    text = orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    return text.splitlines()


def render_diff(difference: Difference, max_lines: int = 80) -> str:
    """A unified diff of the live and replayed folds as sorted, indented JSON."""
    label = f"{difference.channel} [{difference.projection}]"
    lines = list(
        difflib.unified_diff(
            _pretty(difference.live),
            _pretty(difference.replay),
            fromfile=f"live {label}",
            tofile=f"replay {label}",
            lineterm="",
        )
    )
    if len(lines) > max_lines:
        hidden = len(lines) - max_lines
        lines = [*lines[:max_lines], f"... ({hidden} more diff lines)"]
    return "\n".join(lines)


def verify_limits(
    projections: Sequence[ChannelProjection[Any]],
    live: Mapping[str, Mapping[str, Folded] | None],
    committed: Mapping[int, int],
) -> LimitFor:
    """How far to fold each channel so that it is comparable with its live snapshot.

    A projection with a live fold: up to that fold's offset. A projection without one: as
    far as the worker is known to have gone for the channel, the furthest of its other folds
    and the group's committed offset (everything before it was processed). A channel the
    worker does not know: up to the committed offset.
    """

    def limit_for(channel: str, partition: int) -> list[int | None]:
        processed = committed.get(partition, 0) - 1
        folds = live.get(channel) or {}
        furthest = max([processed, *(f.offset for f in folds.values())])
        return [folds[p.name].offset if p.name in folds else furthest for p in projections]

    return limit_for


def sample_channels(channels: Sequence[str], size: int, rng: random.Random) -> list[str]:
    """A uniform sample (all of them when there are fewer), in a stable order."""
    if size >= len(channels):
        return sorted(channels)
    return sorted(rng.sample(list(channels), size))


def snapshot_folds(
    read: Callable[[str], Mapping[str, Folded | None]], channels: Iterable[str]
) -> dict[str, dict[str, Folded]]:
    """Copy the live folds of `channels` out of the worker's tables, through `read(channel)`
    (the worker's `Runtime.folds_of`: whole folds).

    Synchronous, with no await, so the copy is consistent across projections.
    """
    return {
        channel: {name: folded for name, folded in read(channel).items() if folded is not None}
        for channel in channels
    }
