"""Replay's speed next to a raw aiokafka read of the same topic, in the same run."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from projections.projection import (
    ChannelProjection,
)
from streams.registry import registered_projections
from streams.replay.log import read_spans, reading, topic_spans
from streams.replay.parallel import resolve_workers
from streams.replay.run import replay
from streams.settings import Settings
from streams.topology import MESSAGES


@dataclass(frozen=True)
class Benchmark:
    """Messages/s of a raw read, of replay's decode and validation alone (no projection),
    and of the full replay in one process and with `workers` processes, over the same topic
    in one run. `replay_rate` is the best of the two replays."""

    messages: int
    raw_rate: float
    decode_rate: float
    replay_rate: float
    single_rate: float = 0.0
    workers: int = 1
    parallel_rate: float = 0.0

    @property
    def ratio(self) -> float:
        return self.replay_rate / self.raw_rate if self.raw_rate else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "raw_messages_per_s": round(self.raw_rate),
            "decode_only_messages_per_s": round(self.decode_rate),
            "replay_messages_per_s": round(self.replay_rate),
            "replay_vs_raw": round(self.ratio, 3),
            "replay_one_process_messages_per_s": round(self.single_rate),
            "workers": self.workers,
            "replay_workers_messages_per_s": round(self.parallel_rate),
        }


async def raw_read_rate(settings: Settings) -> tuple[int, float]:
    """A raw aiokafka read of `chorus.messages`: the same consumer, nothing decoded."""
    topic = settings.topic(MESSAGES)
    async with reading(settings) as kafka:
        spans = await topic_spans(kafka, topic)
        started = time.perf_counter()
        count = await read_spans(kafka, topic, spans, lambda _p, _r: None)
        seconds = time.perf_counter() - started
    return count, (count / seconds if seconds > 0 else 0.0)


async def measure_replay_vs_raw(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]] | None = None,
    workers: int = 0,
) -> Benchmark:
    """Replay messages/s next to a raw read of the same topic in the same run.

    The raw read goes first and again last (the better one counts), so the broker's page
    cache is equally warm for both. The decode-only run is the replay's own cost (reading,
    decoding and validating every record as the worker does); the rest is the projections'.
    The full replay runs in one process, then with `workers` processes (0: one per CPU; the
    raw read stays one process); the parallel time includes forking and collecting results.
    """
    chosen = projections
    if chosen is None:
        chosen = registered_projections(settings.projections, settings)
    count, first = await raw_read_rate(settings)
    decode = await replay(settings, [])
    single = await replay(settings, chosen)
    processes = resolve_workers(workers)
    parallel = await replay(settings, chosen, workers=processes) if processes > 1 else single
    _, second = await raw_read_rate(settings)
    return Benchmark(
        count,
        max(first, second),
        decode.rate,
        max(single.rate, parallel.rate),
        single_rate=single.rate,
        workers=processes,
        parallel_rate=parallel.rate,
    )
