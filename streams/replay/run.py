"""`replay`: fold the log (or spans of it) into a `Replayer`, in one process or several."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from projections.projection import (
    ChannelProjection,
    Folded,
)
from projections.termination import parse_conditions
from streams.kafka.clients import topic_partitions
from streams.kafka.consume import read_topic
from streams.records import ChannelConfig
from streams.replay.core import LimitFor, Replayer, TimeField
from streams.replay.log import Span, _Progress, read_spans, reading, topic_spans
from streams.replay.parallel import (
    _Job,
    fewer_collections,
    merge_parts,
    resolve_workers,
    run_job,
    share_partitions,
)
from streams.settings import Settings
from streams.topology import CHANNEL_CONFIG, MESSAGES


@dataclass
class ReplayRun:
    replayer: Replayer
    spans: list[Span]
    seconds: float

    @property
    def records(self) -> int:
        return self.replayer.stats.records

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


async def channel_writers(settings: Settings) -> dict[str, list[str]]:
    """Each channel's writers, from the latest records of the compacted config topic (only
    the channels that have some)."""
    latest: dict[str, list[str]] = {}
    async for record in read_topic(settings, settings.topic(CHANNEL_CONFIG)):
        if record.key is None:
            continue
        if record.value is None:  # a tombstone: no config any more
            latest.pop(record.key, None)
            continue
        try:
            config = ChannelConfig.model_validate(record.value)
            parse_conditions(config.termination)
        except ValueError:  # not a config: the worker dead-letters it and keeps the last
            continue
        latest[record.key] = config.writers
    return {channel: writers for channel, writers in latest.items() if writers}


async def replay(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]],
    *,
    channels: Iterable[str] | None = None,
    to_offset: int | None = None,
    as_of: datetime | None = None,
    time_field: TimeField = "created_at",
    limit_for: LimitFor | None = None,
    keep_messages: bool = False,
    exact: bool = False,
    start_offsets: Mapping[int, int] | None = None,
    stop_offsets: Mapping[int, int] | None = None,
    partitions: Iterable[int] | None = None,
    seeds: Mapping[str, tuple[int, Mapping[str, Folded]]] | None = None,
    progress: bool = False,
    workers: int = 1,
) -> ReplayRun:
    """Fold `chorus.messages` (or the given spans of it) into a `Replayer`.

    `workers` > 1 reads and folds the partitions in that many processes (0: one per CPU):
    this one and forked ones, each over a share of the partitions (`streams.replay.parallel`).
    """
    options: dict[str, Any] = {
        "channels": None if channels is None else list(channels),
        "max_message_bytes": settings.max_message_bytes,
        "max_state_bytes": settings.max_state_bytes,
        "to_offset": to_offset,
        "as_of": as_of,
        "time_field": time_field,
        "limit_for": limit_for,
        "keep_messages": keep_messages,
        "exact": exact,
    }
    topic = settings.topic(MESSAGES)
    async with reading(settings) as kafka:
        spans = await topic_spans(
            kafka,
            topic,
            to_offset=to_offset,
            start_offsets=start_offsets,
            stop_offsets=stop_offsets,
            partitions=partitions,
        )
        # The worker rejects a record off its key's partition of the whole topic: so does replay.
        options["partitions"] = len(await topic_partitions(kafka, topic))
        # ... and a message from a sender outside the channel's writers.
        options["writers"] = await channel_writers(settings)
        replayer = Replayer(projections, **options)
        for name, (partition, folds) in (seeds or {}).items():
            replayer.seed(name, partition, folds)
        replayer.dirty.clear()
        shares = share_partitions(spans, resolve_workers(workers))
        started = time.perf_counter()
        if len(shares) <= 1:
            with _Progress(spans, progress) as bar, fewer_collections():
                await read_spans(kafka, topic, spans, replayer.feed, bar.advance)
            return ReplayRun(replayer, spans, time.perf_counter() - started)
        job = _Job(settings, list(projections), options, shares, dict(seeds or {}))
        with _Progress(spans, progress) as bar:
            parts = await run_job(job, kafka, bar)
    merge_parts(replayer, parts)
    return ReplayRun(replayer, spans, time.perf_counter() - started)
