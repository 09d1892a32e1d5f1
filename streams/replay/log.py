"""Reading the log: spans of offsets per partition, batched reads, progress, offsets."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from streams.errors import ChorusError
from streams.kafka.clients import admin, consumer, producer, started
from streams.settings import Settings
from streams.topology import MESSAGES

# A fetch brings whole record batches; large limits mean few round trips per partition.
FETCH_OPTIONS: dict[str, Any] = {
    "max_partition_fetch_bytes": 8 * 1024 * 1024,
    "fetch_max_bytes": 64 * 1024 * 1024,
    "fetch_max_wait_ms": 100,
}
MAX_RECORDS = 50_000
CHUNK = 5_000
IDLE_TIMEOUT_SECONDS = 60.0


class ReplayError(ChorusError):
    """An operational failure (no broker, no worker, refused rebuild); `chorus replay`
    exits 3 on it, so it is never mistaken for `--verify`'s exit code 1 (the log and live
    state differ)."""

    exit_code = 3


@dataclass(frozen=True)
class Span:
    partition: int
    start: int
    stop: int  # exclusive

    @property
    def size(self) -> int:
        return max(0, self.stop - self.start)


async def topic_spans(
    kafka: Any,
    topic: str,
    *,
    to_offset: int | None = None,
    start_offsets: Mapping[int, int] | None = None,
    stop_offsets: Mapping[int, int] | None = None,
    partitions: Iterable[int] | None = None,
) -> list[Span]:
    """Per partition, the offsets to read: from the beginning (or `start_offsets`) to the end
    offsets at this moment (or `stop_offsets` / `to_offset`, whichever is lower)."""
    known = (await kafka._client.fetch_all_metadata()).partitions_for_topic(topic)
    if not known:
        raise ReplayError(f"topic {topic!r} does not exist")
    chosen = sorted(known if partitions is None else set(partitions) & set(known))
    tps = [TopicPartition(topic, p) for p in chosen]
    if not tps:
        return []
    beginnings = await kafka.beginning_offsets(tps)
    ends = await kafka.end_offsets(tps)
    spans = []
    for tp in tps:
        start = max(beginnings[tp], (start_offsets or {}).get(tp.partition, 0))
        stop = ends[tp]
        if stop_offsets is not None and tp.partition in stop_offsets:
            stop = min(stop, stop_offsets[tp.partition])
        if to_offset is not None:
            stop = min(stop, to_offset)
        spans.append(Span(tp.partition, start, max(start, stop)))
    return spans


def log_consumer(settings: Settings) -> Any:
    """A consumer of our own: no group, nothing committed, large fetches."""
    return consumer(settings, group_id=None, enable_auto_commit=False, **FETCH_OPTIONS)


@contextlib.asynccontextmanager
async def _started(client: Any, settings: Settings, stop: str = "stop") -> AsyncIterator[Any]:
    await started(client, settings)
    try:
        yield client
    finally:
        await getattr(client, stop)()


def reading(settings: Settings) -> contextlib.AbstractAsyncContextManager[Any]:
    """A started `log_consumer`, stopped on the way out."""
    return _started(log_consumer(settings), settings)


def producing(settings: Settings, **options: Any) -> contextlib.AbstractAsyncContextManager[Any]:
    """A started producer, stopped (after sending what it holds) on the way out."""
    return _started(producer(settings, **options), settings)


def administering(settings: Settings) -> contextlib.AbstractAsyncContextManager[Any]:
    """A started admin client, closed on the way out."""
    return _started(admin(settings), settings, "close")


async def read_spans(
    kafka: Any,
    topic: str,
    spans: Sequence[Span],
    on_batch: Callable[[int, list[Any]], object],
    on_progress: Callable[[int, int], object] | None = None,
) -> int:
    """Hand each partition's records in `spans` to `on_batch`, in batches; returns the count.

    One `getmany` returns up to `MAX_RECORDS` records across partitions; a partition is paused
    once its span is read.
    """
    remaining: dict[TopicPartition, int] = {}
    for span in spans:
        if span.size:
            remaining[TopicPartition(topic, span.partition)] = span.stop
    if not remaining:
        return 0
    kafka.assign(list(remaining))
    for span in spans:
        if span.size:
            kafka.seek(TopicPartition(topic, span.partition), span.start)
    total = 0
    idle_since = time.monotonic()
    while remaining:
        batches = await kafka.getmany(*remaining, timeout_ms=500, max_records=MAX_RECORDS)
        if batches:
            idle_since = time.monotonic()
        for tp, records in batches.items():
            stop = remaining.get(tp)
            if stop is None or not records:
                continue
            finished = records[-1].offset >= stop - 1
            if records[-1].offset >= stop:
                records = [r for r in records if r.offset < stop]
            for start in range(0, len(records), CHUNK):  # chunks keep the progress live
                chunk = records[start : start + CHUNK]
                on_batch(tp.partition, chunk)
                total += len(chunk)
                if on_progress is not None:
                    on_progress(tp.partition, len(chunk))
            if finished:
                del remaining[tp]
                kafka.pause(tp)
        for tp in [tp for tp in remaining if tp not in batches]:
            if await kafka.position(tp) >= remaining[tp]:  # a gap at the end (compaction)
                del remaining[tp]
                kafka.pause(tp)
        if remaining and time.monotonic() - idle_since > IDLE_TIMEOUT_SECONDS:
            left = {tp.partition: stop for tp, stop in remaining.items()}
            raise ReplayError(f"no records for {IDLE_TIMEOUT_SECONDS:.0f}s; still to read: {left}")
    return total


class _Progress:
    """A rich progress display on stderr: overall and per partition, messages/s and ETA."""

    def __init__(self, spans: Sequence[Span], enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            Task,
            TextColumn,
            TimeRemainingColumn,
        )
        from rich.text import Text

        class Rate(ProgressColumn):
            """Messages/s since the start (partitions are read side by side)."""

            def render(self, task: Task) -> Text:
                elapsed = task.finished_time if task.finished else task.elapsed
                if not elapsed or not task.completed:
                    return Text("        … msg/s")
                return Text(f"{task.completed / elapsed:>9,.0f} msg/s")

        console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description:>14}"),
            BarColumn(),
            MofNCompleteColumn(),
            Rate(),
            TimeRemainingColumn(),
            console=console,
            disable=not (enabled and console.is_terminal),
        )
        self.total = self.progress.add_task("all partitions", total=sum(s.size for s in spans))
        self.tasks = {
            s.partition: self.progress.add_task(f"partition {s.partition}", total=s.size)
            for s in spans
        }

    def advance(self, partition: int, count: int) -> None:
        self.progress.advance(self.tasks[partition], count)
        self.progress.advance(self.total, count)

    def __enter__(self) -> _Progress:
        self.progress.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.progress.stop()


async def committed_offsets(settings: Settings) -> dict[int, int]:
    """The worker group's committed offsets on `chorus.messages` (read only)."""
    topic = settings.topic(MESSAGES)
    async with administering(settings) as client:
        offsets = await client.list_consumer_group_offsets(settings.app_id)
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}
