"""The whole pipeline measured to its last output: driver events and the summaries.

A message is *covered* by a `chorus.summaries` record of its channel whose `last_offset`
(an offset of the messages topic's partition the channel's key hashes to) is at or past the
message's offset. The pipeline has finished N messages when every channel's latest summary
covers that channel's last message, and its last driver event is out.

Used twice:
  * the fold phase: N pre-produced messages through a real `chorus worker` (both roles,
    default settings but `CHORUS_SUMMARY_AFTER_SECONDS`, so the tail is summarised without
    waiting the default 300 s); msg/s to the last output and CPU per message over all its
    processes, beside Quix Streams';
  * the latency phase: the summary lag, from a message's send to the first summary record
    that covers it.

The pure parts (coverage, lags, CPU and ratio arithmetic) are unit-tested in
tests/unit/bench/test_pipeline.py; the readers below only collect what they work on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

# The bench worker's CHORUS_SUMMARY_AFTER_SECONDS (default 300): a channel's last messages
# are summarised about this long (plus the 1 s timer) after they are folded.
SUMMARY_AFTER_SECONDS = 2.0


@dataclass(frozen=True)
class Summary:
    """What the bench keeps of one `chorus.summaries` record."""

    channel: str
    last_offset: int
    created_ms: int  # the record's CreateTime, stamped by the context role's producer
    arrived: float  # epoch seconds when the bench's consumer read it


def summary_of(value: bytes | None, timestamp_ms: int, arrived: float) -> Summary | None:
    """A summaries record as a Summary; None for a tombstone or one that covers nothing."""
    if value is None:
        return None
    try:
        record = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict):
        return None
    last = record.get("last_offset")
    channel = record.get("channel")
    if last is None or channel is None:
        return None
    return Summary(str(channel), int(last), timestamp_ms, arrived)


def covers(summary_last_offset: int | None, offset: int) -> bool:
    """Whether a summary through `summary_last_offset` covers the message at `offset`."""
    return summary_last_offset is not None and summary_last_offset >= offset


@dataclass
class Coverage:
    """Which channels' last messages the summaries seen so far cover.

    `ends`: channel -> offset of its last message (the N messages'). Done when every
    channel is covered; `done_ms`/`done_at` are the CreateTime and arrival of the summary
    that completed it."""

    ends: Mapping[str, int]
    covered: dict[str, int] = field(default_factory=dict)  # channel -> highest last_offset
    done_ms: int | None = None
    done_at: float | None = None
    first_ms: int | None = None
    records: int = 0

    def add(self, summary: Summary) -> None:
        self.records += 1
        if self.first_ms is None or summary.created_ms < self.first_ms:
            self.first_ms = summary.created_ms
        if summary.last_offset > self.covered.get(summary.channel, -1):
            self.covered[summary.channel] = summary.last_offset
        if self.done_ms is None and self.missing() == 0:
            self.done_ms, self.done_at = summary.created_ms, summary.arrived

    def missing(self) -> int:
        """Channels whose last message no summary covers yet."""
        return sum(
            1 for channel, end in self.ends.items() if not covers(self.covered.get(channel), end)
        )

    @property
    def done(self) -> bool:
        return self.done_ms is not None


def channel_ends(records: Iterable[tuple[str, int]]) -> dict[str, int]:
    """channel -> its highest offset, from (channel, offset) pairs of the messages topic."""
    ends: dict[str, int] = {}
    for channel, offset in records:
        if offset > ends.get(channel, -1):
            ends[channel] = offset
    return ends


@dataclass(frozen=True)
class Sent:
    """A message the latency phase sent: its channel, where it landed, when it was sent."""

    channel: str
    offset: int
    sent_at: float  # epoch seconds


def first_covering(
    sent: Mapping[str, Sent], summaries: Sequence[Summary], by: str = "arrived"
) -> dict[str, float]:
    """message id -> the time (epoch seconds) of the first summary that covers it.

    "First" in the order the summaries were `by`: "arrived" (at the bench) or "created"
    (their CreateTime). Messages no summary covers are left out."""

    def when(summary: Summary) -> float:
        return summary.arrived if by == "arrived" else summary.created_ms / 1000.0

    per_channel: dict[str, list[Summary]] = {}
    for summary in summaries:
        per_channel.setdefault(summary.channel, []).append(summary)
    # Per channel: the running highest offset covered, in time order, and when it was reached.
    steps: dict[str, list[tuple[int, float]]] = {}
    for channel, found in per_channel.items():
        reached: list[tuple[int, float]] = []
        for summary in sorted(found, key=when):
            if not reached or summary.last_offset > reached[-1][0]:
                reached.append((summary.last_offset, when(summary)))
        steps[channel] = reached
    out: dict[str, float] = {}
    for message_id, message in sent.items():
        for through, at in steps.get(message.channel, ()):
            if covers(through, message.offset):
                out[message_id] = at
                break
    return out


def lags_ms(sent: Mapping[str, Sent], covered_at: Mapping[str, float]) -> list[float]:
    """Each sent message's summary lag in ms; +inf for one no summary covered."""
    return [
        (covered_at[m] - s.sent_at) * 1000.0 if m in covered_at else float("inf")
        for m, s in sent.items()
    ]


def percentiles(values: Sequence[float], qs: Sequence[int] = (50, 95, 99)) -> dict[str, float]:
    from bench.common import percentile

    return {f"p{q}": percentile(values, q) for q in qs}


# --------------------------------------------------------------------------------------------
# CPU and rates


def cpu_ms_per_message_to(
    samples: Sequence[tuple[float, int, float]],
    messages: int,
    per_message: int,
    end_cpu: float,
) -> float | None:
    """CPU per message from the first poll that saw output to `end_cpu` (the CPU when the
    last output was seen), over the messages not yet output at that first poll.

    `samples`: (wall, output records, cpu seconds) polls, as CpuSampler keeps them."""
    seen = [s for s in samples if s[1] > 0]
    if not seen:
        return None
    _, count0, cpu0 = seen[0]
    remaining = messages - count0 / per_message
    if remaining <= 0 or end_cpu < cpu0:
        return None
    return (end_cpu - cpu0) * 1000.0 / remaining


def bytes_per_message(
    sizes: Mapping[str, int], app_id: str, prefix: str, messages: int
) -> dict[str, float]:
    """What the worker of `app_id` wrote per input message, by topic (`sizes`: bytes per
    topic on the broker): its outputs and both roles' changelogs, named without the
    phase's prefix, largest first. The input, and the fold-only, floor and Quix runs of
    the same phase, are left out."""
    written: dict[str, float] = {}
    for topic, size in sizes.items():
        if not topic.startswith(app_id) or any(
            other in topic for other in ("foldonly", "fold-only", "quix", "floor")
        ):
            continue
        name = topic.removeprefix(prefix).removeprefix(app_id).lstrip("-.")
        if name == "messages" or not size:
            continue
        written[name] = size / messages
    return dict(sorted(written.items(), key=lambda item: -item[1]))


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def pipeline_ratios(fold: Mapping[str, Any]) -> dict[str, float | None]:
    """The pipeline against Quix Streams: msg/s (higher is better) and CPU per message
    (lower is better; above 1 the pipeline spends more CPU per message than Quix)."""
    pipeline = fold.get("chorus_pipeline") or {}
    quix = fold.get("quix") or {}
    return {
        "pipeline_vs_quix": ratio(pipeline.get("msgs_per_s"), quix.get("msgs_per_s")),
        "pipeline_cpu_vs_quix": ratio(pipeline.get("cpu_ms_per_msg"), quix.get("cpu_ms_per_msg")),
    }


def pipeline_result(
    messages: int,
    first_event_ms: int,
    last_event_ms: int,
    coverage: Coverage,
    cpu_ms_per_msg: float | None,
    cores_used: float | None,
    processes: int,
) -> dict[str, Any]:
    """The pipeline's figures: N ÷ (last output − first output), the outputs being the
    driver events and the summaries that cover the N messages (CreateTime both)."""
    first = min(first_event_ms, coverage.first_ms or first_event_ms)
    last = max(last_event_ms, coverage.done_ms or last_event_ms)
    seconds = max(last - first, 1) / 1000.0
    return {
        "messages": messages,
        "seconds": seconds,
        "msgs_per_s": messages / seconds if coverage.done else None,
        "last_driver_event_s": (last_event_ms - first) / 1000.0,
        "last_summary_s": None if coverage.done_ms is None else (coverage.done_ms - first) / 1000.0,
        "summaries_done": coverage.done,
        "channels": len(coverage.ends),
        "channels_not_covered": coverage.missing(),
        "summary_records": coverage.records,
        "summary_after_seconds": SUMMARY_AFTER_SECONDS,
        "cpu_ms_per_msg": cpu_ms_per_msg,
        "cores_used": cores_used,
        "processes": processes,
    }


# --------------------------------------------------------------------------------------------
# Readers


async def read_channel_ends(bootstrap: str, topic: str) -> dict[str, int]:
    """channel -> offset of its last message, reading every record's key (channel)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        pairs: list[tuple[str, int]] = []
        position = {tp: -1 for tp in tps}
        while any(position[tp] + 1 < ends[tp] for tp in tps):
            batches = await consumer.getmany(timeout_ms=1000)
            if not batches:
                continue
            for tp, records in batches.items():
                for record in records:
                    position[tp] = record.offset
                    if record.key is not None:
                        pairs.append((record.key.decode(), record.offset))
        return channel_ends(pairs)
    finally:
        await consumer.stop()


async def collect_summaries(
    bootstrap: str, topic: str, found: list[Summary], stop: asyncio.Event
) -> None:
    """Append every summary record of `topic` (from its beginning) to `found` until `stop`."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=20,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    try:
        tps: list[TopicPartition] = []
        while not tps and not stop.is_set():  # the worker creates the topic
            await consumer._client.force_metadata_update()
            tps = [
                TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())
            ]
            if not tps:
                await asyncio.sleep(0.25)
        if not tps:
            return
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=50)
            now = time.time()
            for records in batches.values():
                for record in records:
                    summary = summary_of(record.value, record.timestamp, now)
                    if summary is not None:
                        found.append(summary)
    finally:
        await consumer.stop()


def process_name(root: bool, cmdline: list[str], pid: int) -> str:
    """What a process of `chorus worker` is, by its command line: the supervisor (`root`),
    a role, or its pid."""
    if root:
        return "supervisor"
    if "--role" in cmdline[:-1]:
        return cmdline[cmdline.index("--role") + 1]
    return f"pid {pid}"
