"""Bounded state: per-message fold cost and bytes written as ONE channel grows.

`python -m bench.growth [--quick] [--lengths 100 1000 10000 100000]` (also the "growth"
phase of `python -m bench.run`). One channel of realistic traffic, about half of it
requests (QUERY/COMMAND) that are answered (RESPONSE/DONE, some DECLINE, HANDOFF, STATUS)
with real text from bench/data.py's conversations, is folded

  (a) in process: the worker's fold path without Kafka, `projections.channel.step` over the
      whole folds (kept loaded, as the worker's cache does), every applied fold's record
      encoded as a checkpoint writes it (once per checkpoint, not per message: the bytes
      are what one checkpoint writes of the channel at that length), and the driver event
      (`streams.records.driver_event(...).fitted(limit)`);
  (b) through a real `chorus worker` (one partition, the messages produced beforehand),
      measured on what it wrote: per-message cost from the driver events' timestamps, bytes
      from the driver-event records and the fold tables' changelog records.

Each length L is measured over a window ending at L (the last 1,000 messages, or all when
fewer), so the figures say what a message costs when the channel is that long. The target
(issue 12): flat, every length within 1.5x of the 100-message figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from bench.common import (
    Broker,
    Phase,
    create_topic,
    end_offsets,
    log,
    produce,
    read_records,
)
from bench.data import load_conversations
from projections.channel import decide, step
from projections.model import ActorType, Message, MessageType, encode_message
from projections.projection import Folded
from projections.termination import decision_to_json
from streams.conversations import Conversation
from streams.ops.topics import create_topics
from streams.records import driver_event
from streams.registry import registered_projections
from streams.settings import Settings
from streams.topology import changelog_config, fold_table_name
from streams.worker.configs import ChannelConfigs

LENGTHS = (100, 1_000, 10_000, 100_000)
QUICK_LENGTHS = (100, 1_000, 5_000)
WINDOW = 1_000
TARGET_RATIO = 1.5
CHANNEL = "bench/growing"
AGENTS = [f"agent-{name}" for name in ("planner", "coder", "reviewer", "tester", "ops", "docs")]
# Requests left open at once: past it every message answers one, so the channel keeps a
# realistic backlog of open work instead of one that grows with its length.
OPEN_TARGET = 30
CONTENT_CHARS = (120, 1_200)
# Reply kinds to an open request and their weights; STATUS and HANDOFF leave it open.
REPLIES = (
    (MessageType.RESPONSE, 40),
    (MessageType.DONE, 30),
    (MessageType.DECLINE, 10),
    (MessageType.HANDOFF, 10),
    (MessageType.STATUS, 10),
)


@dataclass
class OpenRequest:
    request_id: str  # what replies point at: the request, or the handoff that moved it
    correlation_id: str
    obligor: str


class Texts:
    """Real conversation text, walked in order: one conversation after another, each
    message's topic the conversation it comes from."""

    def __init__(self, conversations: Sequence[Conversation], rng: random.Random) -> None:
        self.conversations = conversations
        self.rng = rng
        self.conversation = rng.randrange(len(conversations))
        self.turn = 0

    def next(self) -> tuple[str, str, str]:
        """(speaker, content, topic)."""
        if self.turn >= len(self.conversations[self.conversation].turns):
            self.conversation = (self.conversation + 1) % len(self.conversations)
            self.turn = 0
        conversation = self.conversations[self.conversation]
        target = self.rng.randint(*CONTENT_CHARS)
        speaker = conversation.turns[self.turn][0]
        lines: list[str] = []
        while self.turn < len(conversation.turns) and sum(len(x) + 1 for x in lines) < target:
            who, text = conversation.turns[self.turn]
            lines.append(f"{who}: {text}")
            self.turn += 1
        content = "\n".join(lines)[: CONTENT_CHARS[1]]
        return speaker, content, conversation.name[:64]


def _sender(speaker: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in speaker.lower()).strip("-")
    return slug[:40] or "someone"


def growing_channel(
    conversations: Sequence[Conversation], count: int, seed: int = 12
) -> Iterator[Message]:
    """`count` valid messages of one channel, in log order (deterministic for a seed)."""
    rng = random.Random(seed)
    texts = Texts(conversations, rng)
    start = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    open_requests: list[OpenRequest] = []
    kinds = [kind for kind, _ in REPLIES]
    weights = [weight for _, weight in REPLIES]
    for index in range(count):
        speaker, content, topic = texts.next()
        base: dict[str, Any] = {
            "id": f"g{index:07d}",
            "channel": CHANNEL,
            "content": content,
            "topic": topic,
            "created_at": start + timedelta(seconds=2 * index),
        }
        if not open_requests or (len(open_requests) < OPEN_TARGET and rng.random() < 0.5):
            obligor = rng.choice(AGENTS)
            correlation_id = f"r{index:07d}"
            yield Message.model_validate(
                {
                    **base,
                    "sender": _sender(speaker),
                    "actor_type": ActorType.HUMAN,
                    "type": rng.choice((MessageType.QUERY, MessageType.COMMAND)),
                    "correlation_id": correlation_id,
                    "target": f"role:{obligor}",
                }
            )
            open_requests.append(OpenRequest(base["id"], correlation_id, obligor))
            continue
        # Mostly the older requests get answered first, as a queue of work would.
        request = open_requests[min(int(rng.expovariate(0.3)), len(open_requests) - 1)]
        kind = rng.choices(kinds, weights)[0]
        reply: dict[str, Any] = {
            **base,
            "sender": request.obligor,
            "type": kind,
            "in_reply_to": request.request_id,
            "correlation_id": request.correlation_id,
        }
        if kind is MessageType.HANDOFF:
            request.obligor = rng.choice([a for a in AGENTS if a != request.obligor])
            request.request_id = base["id"]
            reply["target"] = f"role:{request.obligor}"
        elif kind is not MessageType.STATUS:
            open_requests.remove(request)
        yield Message.model_validate(reply)


def _encoded(messages: Iterator[Message]) -> Iterator[tuple[bytes, bytes]]:
    for message in messages:
        yield message.channel.encode(), encode_message(message)


def windows(lengths: Sequence[int], window: int) -> list[tuple[int, int]]:
    """(first index, end) of the window that ends at each length."""
    return [(max(0, length - window), length) for length in lengths]


def with_ratios(rows: list[dict[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Each row gets `<key>_vs_first`: its value over the first row's (the 100-message one)."""
    if not rows:
        return rows
    first = rows[0]
    for row in rows:
        for key in keys:
            base, value = first.get(key), row.get(key)
            row[f"{key}_vs_first"] = value / base if base and value is not None else None
    return rows


# --------------------------------------------------------------------------------------------
# (a) In process


def fold_in_process(
    conversations: Sequence[Conversation], lengths: Sequence[int], window: int
) -> dict[str, Any]:
    settings = Settings()
    projections = registered_projections(settings.projections, settings)
    condition = ChannelConfigs({}).conditions(CHANNEL)
    limit = settings.max_message_bytes
    total = max(lengths)
    folds: dict[str, Folded] = {}  # the whole folds in memory, as the worker's cache keeps them
    loaded: dict[str, Any] = {}  # the states in memory, as the worker's cache keeps them
    elapsed_ns = array("q")
    table_bytes = array("q")
    event_bytes = array("q")
    state_bytes: dict[int, dict[str, int]] = {}
    checkpoints = set(lengths)
    cpu_ns = array("q")
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    for offset, message in enumerate(growing_channel(conversations, total)):
        started, cpu_started = clock(), cpu_clock()
        stored = {p.name: folds.get(p.name) for p in projections}
        steps = step(
            projections, stored, message, offset, loaded, max_state_bytes=settings.max_state_bytes
        )
        decision = decision_to_json(decide(condition, steps))
        written = 0
        for done in steps:
            name = done.projection.name
            if done.applied:  # what a checkpoint writes of the channel, once per checkpoint
                written += len(orjson.dumps(done.folded.as_record()))
            folds[name] = done.folded
            loaded[name] = done.state
        event = driver_event(message, 0, offset, steps, decision).fitted(limit)
        cpu_ns.append(cpu_clock() - cpu_started)
        elapsed_ns.append(clock() - started)
        table_bytes.append(written)
        event_bytes.append(len(event))
        if any(done.error for done in steps):
            raise RuntimeError(f"a fold was refused at {offset}: {[s.error for s in steps]}")
        if offset + 1 in checkpoints:
            state_bytes[offset + 1] = {
                name: len(orjson.dumps(folded.state)) for name, folded in folds.items()
            }
    rows = []
    for (first, end), length in zip(windows(lengths, window), lengths, strict=True):
        times = elapsed_ns[first:end]
        count = end - first
        states = state_bytes[length]
        rows.append(
            {
                "length": length,
                "window": count,
                # CPU time: on a shared machine the wall clock also counts other processes.
                "us_per_msg": sum(cpu_ns[first:end]) / count / 1e3,
                "wall_us_per_msg": sum(times) / count / 1e3,
                "wall_us_per_msg_p50": statistics.median(times) / 1e3,
                "table_bytes_per_msg": sum(table_bytes[first:end]) / count,
                "event_bytes_per_msg": sum(event_bytes[first:end]) / count,
                "bytes_per_msg": (sum(table_bytes[first:end]) + sum(event_bytes[first:end]))
                / count,
                "state_bytes": sum(states.values()),
                "state_bytes_by_projection": states,
            }
        )
    return {
        "rows": with_ratios(rows, ("us_per_msg", "bytes_per_msg", "state_bytes")),
        "final_state": {name: folded.state for name, folded in folds.items()},
    }


# --------------------------------------------------------------------------------------------
# (b) Through the worker


def changelog_topic(app_id: str, table: str) -> str:
    return f"{app_id}-{table}-changelog"


async def _changelog_windows(
    bootstrap: str, topic: str, total: int, spans: Sequence[tuple[int, int]], per_message: bool
) -> list[float | None]:
    """Changelog bytes per message in each window of message offsets, attributed by the
    fold offset each record carries. A fold table with one record per message (each message
    its own batch): the window's records are read by offset; else (batched, or the ended
    commitments' table, written when one ends): all of them."""
    ends = await end_offsets(bootstrap, topic)
    count = ends.get(0, 0)
    if count == 0:
        return [0.0 if not per_message else None for _ in spans]
    if per_message and count == total:
        found = [await read_records(bootstrap, topic, 0, first, end) for first, end in spans]
        # A window the cleaner compacted anyway says nothing: no figure rather than a low one.
        return [
            sum(r.size for r in records) / (end - first) if len(records) == end - first else None
            for records, (first, end) in zip(found, spans, strict=True)
        ]
    records = await read_records(bootstrap, topic, 0, 0, count, keep_values=True)
    offsets = [int(orjson.loads(r.value or b"{}").get("offset", -1)) for r in records]
    return [
        sum(r.size for r, at in zip(records, offsets, strict=True) if first <= at < end)
        / (end - first)
        for first, end in spans
    ]


async def fold_through_worker(
    broker: Broker,
    work: Path,
    conversations: Sequence[Conversation],
    lengths: Sequence[int],
    window: int,
    timeout: float,
    fold_batch_max: int,
    fold_only: bool = False,
) -> dict[str, Any]:
    """The longest length's messages produced first, then one worker folds them all; each
    window is read back from what the worker wrote (one partition: a driver event's offset
    is its message's offset)."""
    from bench import fold

    phase = Phase(
        "growth", broker, work, partitions=1, extra={"CHORUS_FOLD_BATCH_MAX": str(fold_batch_max)}
    )
    settings = phase.settings()
    await create_topics(settings)
    total = max(lengths)
    bootstrap = broker.bootstrap
    log(f"  producing {total:,} messages of one channel")
    await produce(
        bootstrap, phase.topic("messages"), _encoded(growing_channel(conversations, total))
    )
    events_topic = phase.topic("driver-events") + ("-fold-only" if fold_only else "")
    app_id = phase.app_id.replace("bench-", "bench-foldonly-", 1) if fold_only else phase.app_id
    projections = registered_projections(settings.projections, settings)
    tables = [fold_table_name(p) for p in projections]
    # As Faust creates them, except that the cleaner leaves them alone for the run: one key
    # in gigabytes of records, and the early windows would be compacted before they are read.
    for table in tables:
        config = {
            "cleanup.policy": "compact",
            "min.compaction.lag.ms": str(24 * 3600 * 1000),
            **changelog_config(settings),
        }
        await create_topic(bootstrap, changelog_topic(app_id, table), 1, config)
    result: dict[str, Any] = {"fold_batch_max": fold_batch_max, "fold_only": fold_only}
    sampler = fold.CpuSampler(0)
    try:
        run, _ = await fold.run_chorus(phase, total, 1, timeout, fold_only, sampler)
        result.update({k: run.get(k) for k in ("msgs_per_s", "cpu_ms_per_msg", "rss_mb")})
    except TimeoutError as error:  # measure the lengths it reached
        result["timeout"] = str(error)
        log(f"  growth: {error}")
    events = (await end_offsets(bootstrap, events_topic)).get(0, 0)
    result["driver_events"] = events
    reached = [length for length in lengths if length <= min(events, total)]
    spans = windows(reached, window)
    changelogs = {
        table: await _changelog_windows(
            bootstrap, changelog_topic(app_id, table), total, spans, table in tables
        )
        for table in tables
    }
    rows = []
    for index, ((first, end), length) in enumerate(zip(spans, reached, strict=True)):
        records = await read_records(bootstrap, events_topic, 0, max(0, first - 1), end)
        inside = [r for r in records if r.offset >= first]
        # From the event before the window, so each message's own time is counted.
        start = records[0] if first > 0 else inside[0]
        counted = len(inside) - (0 if first > 0 else 1)
        per_table = {table: changelogs[table][index] for table in tables}
        event_bytes = sum(r.size for r in inside) / len(inside)
        changelog_bytes = (
            sum(v for v in per_table.values() if v is not None)
            if all(v is not None for v in per_table.values())
            else None
        )
        rows.append(
            {
                "length": length,
                "window": len(inside),
                "ms_per_msg": (inside[-1].timestamp_ms - start.timestamp_ms) / max(counted, 1),
                "cpu_ms_per_msg": sampler.cpu_ms_between(first, end),
                "event_bytes_per_msg": event_bytes,
                "changelog_bytes_per_msg": changelog_bytes,
                "changelog_bytes_per_msg_by_table": per_table,
                "bytes_per_msg": event_bytes + (changelog_bytes or 0.0),
            }
        )
    result["rows"] = with_ratios(rows, ("ms_per_msg", "cpu_ms_per_msg", "bytes_per_msg"))
    if events > total:  # redelivered messages' events: the offsets above are approximate
        result["extra_driver_events"] = events - total
    return result


async def measure(
    broker: Broker | None,
    work: Path,
    lengths: Sequence[int],
    worker_lengths: Sequence[int],
    window: int = WINDOW,
    timeout: float = 900.0,
    fold_batch_max: int = 1,
    fold_only: bool = False,
) -> dict[str, Any]:
    """Both measurements; the worker's is skipped without a broker or worker lengths."""
    source, conversations = load_conversations()
    result: dict[str, Any] = {
        "source": source,
        "channel": CHANNEL,
        "window": window,
        "target_ratio": TARGET_RATIO,
    }
    log(f"growth (a): in process, lengths {', '.join(f'{n:,}' for n in lengths)}")
    in_process = fold_in_process(conversations, lengths, window)
    result["in_process"] = in_process["rows"]
    final = in_process["final_state"]
    commitments = final.get("commitments", {})
    result["final_commitments"] = {k: v for k, v in commitments.items() if k != "commitments"}
    result["final_commitments"]["kept"] = len(commitments.get("commitments", {}))
    overview = final.get("overview", {})
    result["final_participants"] = len(overview.get("participants", {}))
    result["final_topics"] = len(overview.get("topics", {}))
    if broker is not None and worker_lengths:
        log(
            f"growth (b): through the worker, lengths {', '.join(f'{n:,}' for n in worker_lengths)}"
        )
        result["worker"] = await fold_through_worker(
            broker, work, conversations, worker_lengths, window, timeout, fold_batch_max, fold_only
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.growth",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run (under 3 minutes)")
    parser.add_argument("--lengths", type=int, nargs="+", help="channel lengths, in process")
    parser.add_argument(
        "--worker-lengths",
        type=int,
        nargs="*",
        help="channel lengths through the worker (none: skip it)",
    )
    parser.add_argument("--window", type=int, default=WINDOW)
    parser.add_argument("--timeout", type=float, help="seconds the worker may take to fold")
    parser.add_argument(
        "--fold-batch-max",
        type=int,
        default=1,
        help="the worker's CHORUS_FOLD_BATCH_MAX (1: every message its own "
        "batch, as a live channel's messages arrive)",
    )
    parser.add_argument("--fold-only", action="store_true", help="the fold stage alone")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from bench.common import start_broker, work_dir
    from bench.meta import RESULTS, ensure_requirements, run_meta
    from bench.report import write_growth

    ensure_requirements()
    lengths = sorted(args.lengths or (QUICK_LENGTHS if args.quick else LENGTHS))
    worker_lengths = sorted(args.worker_lengths if args.worker_lengths is not None else lengths)
    timeout = args.timeout or (120.0 if args.quick else 900.0)
    command = "python -m bench.growth" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    results: dict[str, Any] = {"meta": run_meta(command, args.quick)}
    work = work_dir()
    started = time.time()
    broker = start_broker(work) if worker_lengths else None
    try:
        results["growth"] = asyncio.run(
            measure(
                broker,
                work,
                lengths,
                worker_lengths,
                args.window,
                timeout,
                args.fold_batch_max,
                args.fold_only,
            )
        )
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
        results["meta"]["seconds"] = round(time.time() - started)
        results["meta"]["load_average_at_end"] = os.getloadavg()
    stem = time.strftime("%Y-%m-%d") + "-growth" + ("-quick" if args.quick else "")
    json_path, md_path = write_growth(results, args.out or RESULTS, stem)
    print(md_path.read_text("utf-8"))
    print(f"wrote {json_path}, {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
