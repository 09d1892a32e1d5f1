"""Parallel replay over partitions in forked worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from projections.projection import (
    ChannelProjection,
    Folded,
)
from streams.replay.core import Replayer, ReplayStats, _Channel
from streams.replay.log import Span, _Progress, read_spans, reading
from streams.settings import Settings
from streams.topology import MESSAGES

#
# A channel lives in one partition (key = channel, murmur2; validation rejects a record
# anywhere else), so partitions fold independently.
# Each worker process reads a share of the partitions with its own consumer, folds them into a
# Replayer of its own, and returns its channels; the parent merges them. The processes are
# forked, so the projections, `limit_for` and the seeds reach them without pickling; only the
# results travel back (pickled channel states). Linux/macOS only (fork); elsewhere one process.


@contextlib.contextmanager
def fewer_collections(threshold: int = 50_000) -> Iterator[None]:
    """Run the cyclic garbage collector less often while folding: states and messages are
    long-lived and acyclic, and scanning them again and again costs about a tenth of the
    fold. Restores the thresholds after."""
    before = gc.get_threshold()
    gc.set_threshold(max(threshold, before[0]), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def resolve_workers(workers: int) -> int:
    """`workers`, with 0 meaning one per CPU; 1 where processes cannot be forked."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    if workers <= 0:
        return max(1, os.cpu_count() or 1)
    return workers


def share_partitions(spans: Sequence[Span], workers: int) -> list[list[Span]]:
    """Split the non-empty spans into at most `workers` shares of about equal size (largest
    first, each into the smallest share so far). Deterministic."""
    todo = sorted((s for s in spans if s.size), key=lambda s: (-s.size, s.partition))
    shares: list[list[Span]] = [[] for _ in range(max(1, min(workers, len(todo))))]
    sizes = [0] * len(shares)
    for span in todo:
        smallest = sizes.index(min(sizes))
        shares[smallest].append(span)
        sizes[smallest] += span.size
    return [sorted(share, key=lambda s: s.partition) for share in shares if share]


@dataclass
class _Part:
    """What one worker process hands back: its share's channels and counts."""

    channels: dict[str, _Channel]
    stats: ReplayStats
    dirty: set[str]


@dataclass
class _Job:
    settings: Settings
    projections: list[ChannelProjection[Any]]
    options: dict[str, Any]
    shares: list[list[Span]]
    seeds: dict[str, tuple[int, Mapping[str, Folded]]]
    counts: Any = None  # multiprocessing.Array: records read per partition (progress)


_JOB: _Job | None = None  # set in the parent just before forking; read by the children


async def run_job(job: _Job, kafka: Any, bar: _Progress) -> list[_Part]:
    """Fold the first share here, with the parent's started consumer `kafka`, while forked
    worker processes fold the others; their parts, in share order."""
    global _JOB
    context = multiprocessing.get_context("fork")
    job.counts = context.Array("q", max(s.partition for share in job.shares for s in share) + 1)
    loop = asyncio.get_running_loop()
    _JOB = job
    try:
        with ProcessPoolExecutor(len(job.shares) - 1, mp_context=context) as pool:
            futures = [
                loop.run_in_executor(pool, _replay_share, index)
                for index in range(1, len(job.shares))
            ]
            _JOB = None  # the children have it (forked at the first submit)
            others = asyncio.gather(*futures)
            reported: dict[int, int] = {}

            def report() -> None:
                for share in job.shares[1:]:
                    for span in share:
                        now = job.counts[span.partition]
                        if now != reported.get(span.partition, 0):
                            bar.advance(span.partition, now - reported.get(span.partition, 0))
                            reported[span.partition] = now

            own = _share_replayer(job, 0)
            topic = job.settings.topic(MESSAGES)

            def feed(partition: int, records: list[Any]) -> None:
                own.feed(partition, records)
                report()

            with fewer_collections():
                await read_spans(kafka, topic, job.shares[0], feed, bar.advance)
            while not others.done():
                await asyncio.wait([others], timeout=0.2)
                report()
            return [_Part(own.channels, own.stats, own.dirty), *await others]
    finally:
        _JOB = None


def _share_replayer(job: _Job, index: int) -> Replayer:
    """A `Replayer` for one share, seeded with the channels of its partitions."""
    mine = {span.partition for span in job.shares[index]}
    replayer = Replayer(job.projections, **job.options)
    for name, (partition, folds) in job.seeds.items():
        if partition in mine:
            replayer.seed(name, partition, folds)
    replayer.dirty.clear()
    return replayer


def _replay_share(index: int) -> _Part:
    """In a worker process: read and fold one share of the partitions."""
    job = _JOB
    assert job is not None, "worker processes are forked from replay()"
    share = job.shares[index]
    replayer = _share_replayer(job, index)
    counts = job.counts

    def progress(partition: int, count: int) -> None:
        counts[partition] += count

    async def read() -> None:
        topic = job.settings.topic(MESSAGES)
        async with reading(job.settings) as kafka:
            await read_spans(kafka, topic, share, replayer.feed, progress)

    gc.freeze()  # the parent's objects: never scanned here, nor their pages copied
    with fewer_collections():
        asyncio.run(read())
    return _Part(replayer.channels, replayer.stats, replayer.dirty)


def merge_parts(replayer: Replayer, parts: Sequence[_Part]) -> None:
    """Merge the worker processes' channels into `replayer` (which holds the seeds). Their
    channels are disjoint: a record off its key's partition is rejected, so a channel's
    records are all in one partition, read by one process."""
    stats = replayer.stats
    for part in parts:
        replayer.channels.update(part.channels)
        replayer.dirty.update(part.dirty)
        for name in (
            "records",
            "folded",
            "invalid",
            "filtered",
            "beyond",
            "after_cutoff",
        ):
            setattr(stats, name, getattr(stats, name) + getattr(part.stats, name))
        for name, count in part.stats.errors.items():
            stats.errors[name] = stats.errors.get(name, 0) + count
