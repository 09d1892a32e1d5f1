"""Checking live state against the log: `verify` (the command) and the worker's shadow check."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from projections.projection import (
    ChannelProjection,
    Folded,
)
from streams.records import key_partition
from streams.replay.compare import (
    Difference,
    compare_channel,
    live_folds,
    sample_channels,
    snapshot_folds,
    verify_limits,
)
from streams.replay.core import Replayer
from streams.replay.log import committed_offsets
from streams.replay.run import replay
from streams.settings import Settings

# --- verify -----------------------------------------------------------------------------------


@dataclass
class VerifyReport:
    channels: int = 0
    compared: int = 0  # (channel, projection) pairs compared
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: int = 0
    seconds: float = 0.0


LiveState = Callable[[str], Awaitable[Any]]


async def _fetch_states(
    fetch: LiveState, channels: Iterable[str], concurrency: int = 16
) -> dict[str, dict[str, Folded] | None]:
    gate = asyncio.Semaphore(concurrency)

    async def one(channel: str) -> tuple[str, dict[str, Folded] | None]:
        async with gate:
            view = await fetch(channel)
        return channel, (live_folds(view) if view is not None else None)

    return dict(await asyncio.gather(*(one(c) for c in channels)))


async def verify(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]],
    *,
    fetch_state: LiveState,
    list_channels: Callable[[], Awaitable[list[str]]] | None = None,
    channels: Sequence[str] = (),
    exact: bool = False,
    progress: bool = False,
    workers: int = 1,
) -> VerifyReport:
    """Compare every channel's live folds with the log folded up to the same offsets.

    Order matters: the group's committed offsets first, then the live states, then the log,
    so the log always holds everything the snapshot has folded.
    """
    report = VerifyReport()
    committed = await committed_offsets(settings)
    listed = list(channels) if channels else sorted(await list_channels()) if list_channels else []
    live = await _fetch_states(fetch_state, listed)
    names = [p.name for p in projections]
    started = time.perf_counter()

    async def fold_like(
        snapshot: Mapping[str, Mapping[str, Folded] | None], only: Iterable[str] | None
    ) -> Replayer:
        """The log folded as far as `snapshot` says the worker has gone, per channel."""
        run = await replay(
            settings,
            projections,
            channels=only,
            limit_for=verify_limits(projections, snapshot, committed),
            exact=exact,
            progress=progress,
            workers=workers,
        )
        report.records += run.records
        return run.replayer

    replayer = await fold_like(live, channels or None)

    # Channels the log has but the worker did not list (another worker's, or missing).
    unlisted = [c for c in replayer.channels if c not in live and replayer.folds(c)]
    later = await _fetch_states(fetch_state, unlisted)
    snapshots: dict[str, tuple[dict[str, Folded], dict[str, Folded]]] = {
        channel: (folds or {}, replayer.folds(channel))
        for channel, folds in [*live.items(), *later.items()]
        if channel in live or folds is None  # None: unknown to the worker, yet in the log
    }
    present = {c: folds for c, folds in later.items() if folds is not None}
    if present:  # listed by another worker: fold again up to the offsets just fetched
        again = await fold_like(present, present)
        for channel, folds in present.items():
            snapshots[channel] = (folds, again.folds(channel))

    served = {name for theirs, _ in snapshots.values() for name in theirs}
    if served:
        for name in names:
            if name not in served:
                report.notes.append(f"the worker serves no fold of {name!r}; not compared")
    versions = {p.name: p.version for p in projections}
    mismatched: dict[tuple[str, int], int] = {}
    for channel, (theirs, ours) in sorted(snapshots.items()):
        comparable = []
        for name in names:
            if served and name not in served:
                continue
            live_fold = theirs.get(name)
            if live_fold is not None and live_fold.version != versions[name]:
                key = (name, live_fold.version)
                mismatched[key] = mismatched.get(key, 0) + 1
                continue
            comparable.append(name)
        report.compared += len(comparable)
        report.differences.extend(compare_channel(channel, theirs, ours, comparable))
    for (name, version), count in sorted(mismatched.items()):
        report.notes.append(
            f"{name}: the worker serves v{version} on {count} channels, this code folds "
            f"v{versions[name]}; not compared there (rebuild, then switch the workers)"
        )
    report.channels = len(snapshots)
    report.seconds = time.perf_counter() - started
    return report


# --- shadow check (the worker calls this from a timer) ----------------------------------------


async def shadow_check(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]],
    snapshot: Mapping[str, Mapping[str, Folded]],
    partitions: int | None = None,
) -> list[Difference]:
    """Re-fold the snapshot's channels from the log, up to their snapshot offsets, and
    return where they differ (empty: all agree).

    Take the snapshot with `snapshot_folds(chorus.folds_of, ...)`. Only the
    sampled channels' partitions are read, up to the furthest snapshot offset in each, so
    the cost is the length of those partition prefixes, at raw read speed except for the
    sampled channels' own records, which are folded.
    """
    if not snapshot:
        return []
    count = partitions or settings.partitions
    stops: dict[int, int] = {}
    for channel, folds in snapshot.items():
        partition = key_partition(channel.encode(), count)
        furthest = max((f.offset for f in folds.values()), default=-1)
        stops[partition] = max(stops.get(partition, 0), furthest + 1)
    run = await replay(
        settings,
        projections,
        channels=snapshot,
        limit_for=verify_limits(projections, snapshot, {}),
        stop_offsets=stops,
        partitions=stops,
    )
    names = [p.name for p in projections]
    differences = []
    for channel, folds in snapshot.items():
        comparable = [
            n for n in names if n not in folds or folds[n].version == _version(projections, n)
        ]
        differences.extend(compare_channel(channel, folds, run.replayer.folds(channel), comparable))
    return differences


def _version(projections: Sequence[ChannelProjection[Any]], name: str) -> int:
    return next(p.version for p in projections if p.name == name)


class ShadowHost(Protocol):
    """What the shadow check needs from the worker (`streams.worker.runtime.Runtime` has it)."""

    settings: Settings
    projections: list[ChannelProjection[Any]]

    def folds_of(self, channel: str) -> dict[str, Folded | None]: ...


async def run_shadow_check(
    host: ShadowHost,
    candidates: Sequence[str],
    sample: int,
    rng: random.Random,
    report: Callable[[Difference], Awaitable[object]],
) -> list[Difference]:
    """One round: sample `sample` of `candidates` (channels this worker actively owns: the
    caller's choice, so no round walks every channel), snapshot their folds, re-fold them
    from the log and `report` every difference. Returns the differences."""
    snapshot = snapshot_folds(host.folds_of, sample_channels(list(candidates), sample, rng))
    differences = await shadow_check(host.settings, host.projections, snapshot)
    for difference in differences:
        await report(difference)
    return differences
