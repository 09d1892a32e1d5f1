"""Channels: what a message costs once chorus holds many channels (issue 40).

Each system gets N channels of its own, each a COMMAND and its reply (2N messages): nine in
ten answered with DONE, one in ten acknowledged with a STATUS and left open with a deadline
a day ahead. They are produced to its messages topic as fast as the broker takes them,
in blocks of `BLOCK` channels (the block's COMMANDs, then their replies), before the
system starts; then it is started and measured:

  fold      msg/s over the 2N messages, from its first driver event to its last (the
            throughput phase's arithmetic), and each process's peak RSS from start on;
  wake      with the N channels resident, an independent client sends real turns at
            `PROBE_RATE` msg/s over `PROBE_CHANNELS` fresh channels for `probe_seconds`
            and times each message's driver event (produce → read back: the wake phase's
            clock): p50/p95/p99/max and how many were never woken, beside the records
            published meanwhile to the topics the fold role follows for its views
            (`FOLLOWED`: summaries and recaps, which the context role may still be writing
            for the N channels when the probe starts);
  timers    chorus's slowest timer tick by timer, start to end
            (`chorus_timer_slowest_seconds` on each role's /metrics), and the longest a
            tick held the event loop at once (`chorus_timer_held_slowest_seconds`), and
            the consumer keepalives Faust lost (its log; the lines before each loss are
            kept in the result, since the log goes with the working directory);
  stop      SIGTERM → the process group gone (killed at 30 s);
  restarts  warm (data directory kept) and cold (deleted): from spawn until a probe
            message sent every half second to a fresh channel is woken, and for chorus
            until both roles answer /ready.

chorus runs `chorus worker` (both roles, default settings); the peer is Quix Streams running
chorus's fold (bench/quix_peer), on the same broker, one after the other; `fold` (named in
`--many-systems`) is chorus's fold stage alone (bench/fold_worker.py), for where time goes.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.kafka import Follower, end_offsets, opened, produce, send_paced
from bench.measure import Poll, rss_bytes, run_figures, wake_figures
from bench.systems import (
    Broker,
    Makers,
    System,
    chorus_worker,
    fold_stage,
    log,
    quix_peer,
    side_by_side,
)
from bench.throughput import poll_until
from bench.wake import send_and_clock, warm_and_load
from streams.conversations import Conversation
from streams.topology import RECAPS, SUMMARIES

# Channels per block: the block's COMMANDs go out before their replies, so a reply finds its
# channel folded a block ago, not the message before.
BLOCK = 1_000
# One channel in this many is left open (a STATUS, no DONE) with a deadline a day ahead.
OPEN_EVERY = 10
PROBE_RATE = 100.0
PROBE_CHANNELS = 200
PROBE_DRAIN_SECONDS = 60.0
# The topics chorus's context role publishes and its fold role follows (the latest summary
# and recap of each channel, for its views); a system without them counts 0.
FOLLOWED = (SUMMARIES, RECAPS)
# How often a restart's readiness probe sends a fresh message, and how long it tries.
RESTART_PROBE_SECONDS = 0.5
RESTART_TIMEOUT = 900.0
STOP_TIMEOUT = 30.0
KEEPALIVE_LOST = "keepalive is not responding"
# What the result keeps of the worker's log when a keepalive is lost: the lines up to each of
# the first few losses, each line cut.
KEEPALIVE_EXCERPTS = 3
KEEPALIVE_CONTEXT = 40
KEEPALIVE_LINE_CHARS = 400
TIMER_GAUGE = re.compile(
    r'^chorus_timer_(slowest|held_slowest|held_cpu_slowest)_seconds\{timer="([^"]+)"\} '
    r"([0-9.e+-]+)$"
)


async def published(broker: Broker, system: System) -> dict[str, int]:
    """The records on each of the system's `FOLLOWED` topics so far (their end offsets,
    summed over partitions; 0 where the topic does not exist)."""
    topics = {name: system.topic(name) for name in FOLLOWED}
    async with opened(broker.settings) as kafka:
        ends = await end_offsets(kafka, list(topics.values()))
    return {name: sum(ends[topic].values()) for name, topic in topics.items()}


def channel_records(channels: int, tag: str, contents: list[str]) -> list[tuple[bytes, bytes]]:
    """2 x `channels` (key, value) records: per block of BLOCK channels their COMMANDs, then
    their replies (DONE, or STATUS for the one in OPEN_EVERY left open a day)."""
    now = datetime.now(UTC)
    deadline = (now + timedelta(days=1)).isoformat()
    created = now.isoformat()
    records: list[tuple[bytes, bytes]] = []
    for start in range(0, channels, BLOCK):
        block = range(start, min(channels, start + BLOCK))
        replies = []
        for i in block:
            channel = f"{tag}/c{i:07d}"
            key = channel.encode()
            request = f"{tag}-{i}-q"
            left_open = i % OPEN_EVERY == 0
            command: dict[str, Any] = {
                "id": request,
                "channel": channel,
                "sender": "planner",
                "type": "COMMAND",
                "content": contents[i % len(contents)],
                "correlation_id": f"r-{i}",
                "target": f"instance:worker-{i % 50}",
                "created_at": created,
            }
            if left_open:
                command["deadline"] = deadline
            reply = {
                "id": f"{tag}-{i}-a",
                "channel": channel,
                "sender": f"worker-{i % 50}",
                "type": "STATUS" if left_open else "DONE",
                "content": "on it" if left_open else contents[(i + 1) % len(contents)],
                "correlation_id": f"r-{i}",
                "in_reply_to": request,
                "created_at": created,
            }
            records.append((key, orjson.dumps(command)))
            replies.append((key, orjson.dumps(reply)))
        records += replies
    return records


def short_turns(conversations: list[Conversation], count: int = 5_000) -> list[str]:
    """Real turns, cut to at most 200 characters: the requests' and replies' contents."""
    found = [text[:200] for c in conversations for _, text in c.turns if text.strip()]
    return found[:count] or ["write the changelog"]


class Peaks:
    """The peak RSS of each process of a system, by label, sampled as it runs."""

    def __init__(self, processes: Callable[[], dict[str, int]]) -> None:
        self.processes = processes
        self.peaks: dict[str, int] = {}

    def sample(self) -> None:
        for label, pid in self.processes().items():
            found = rss_bytes(pid)
            if found > self.peaks.get(label, 0):
                self.peaks[label] = found

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            self.sample()
            await asyncio.sleep(0.5)

    def mib(self) -> dict[str, float]:
        return {label: peak / 2**20 for label, peak in sorted(self.peaks.items())}


def processes_of(system: System) -> Callable[[], dict[str, int]]:
    """label -> pid: chorus's two roles (and the supervisor), or the one process of the fold
    stage alone or of the peer."""

    def found() -> dict[str, int]:
        if system.process.process is None or system.process.process.poll() is not None:
            return {}
        if system.process.command is not None:
            return {system.name: system.process.pid}
        try:
            roles = system.process.role_pids()
        except OSError:
            roles = {}
        return {"supervisor": system.process.pid, **roles}

    return found


def data_dir(system: System) -> Path:
    """Where the system keeps its state: chorus's data directory (the worker's, the fold
    stage's), or the peer's state directory."""
    command = list(system.process.command or [])
    if "--state-dir" in command:
        return Path(command[command.index("--state-dir") + 1])
    return Path(system.process.env["CHORUS_DATA_DIR"])


async def slowest_timers(system: System) -> dict[str, dict[str, float]]:
    """Per gauge, timer -> seconds, from both roles' /metrics (chorus only): `slowest` (a
    tick, start to end), `held_slowest` (the longest a tick held the event loop at once) and
    `held_cpu_slowest` (the most CPU one step of a tick used)."""
    if system.process.command is not None:
        return {}
    found: dict[str, dict[str, float]] = {}
    async with httpx.AsyncClient(headers=system.process.auth, timeout=10) as web:
        for url in (system.process.base_url, system.process.context_url):
            try:
                text = (await web.get(f"{url}/metrics")).text
            except httpx.HTTPError:
                continue
            for line in text.splitlines():
                match = TIMER_GAUGE.match(line)
                if match:
                    by_timer = found.setdefault(match[1], {})
                    by_timer[match[2]] = max(by_timer.get(match[2], 0.0), float(match[3]))
    return found


def keepalives_lost(log_text: str) -> dict[str, Any]:
    """How many consumer keepalives Faust lost in `log_text` (a worker's log), and the log's
    `KEEPALIVE_CONTEXT` lines up to each of the first `KEEPALIVE_EXCERPTS` losses (each line
    cut to `KEEPALIVE_LINE_CHARS`): the log goes with the bench's working directory, so what
    held the loop must be kept in the result to be read at all."""
    lines = log_text.splitlines()
    lost = [n for n, line in enumerate(lines) if KEEPALIVE_LOST in line]
    excerpts = [
        [line[:KEEPALIVE_LINE_CHARS] for line in lines[max(0, n + 1 - KEEPALIVE_CONTEXT) : n + 1]]
        for n in lost[:KEEPALIVE_EXCERPTS]
    ]
    return {"count": len(lost), "before": excerpts}


def worker_log(system: System) -> str:
    log_path = system.process.log_path
    return log_path.read_text(errors="replace") if log_path.exists() else ""


async def fold_all(system: System, broker: Broker, messages: int, timeout: float) -> dict[str, Any]:
    """Spawn the system (its backlog produced already) and poll until every message's driver
    event is out."""
    system.process.spawn()
    polls: list[Poll] = await poll_until(
        system, broker, lambda n: n >= messages, timeout, processes_of(system)
    )
    return run_figures(polls)


async def stop_seconds(system: System) -> dict[str, Any]:
    """SIGTERM to the process group, then seconds until it is gone (killed past STOP_TIMEOUT)."""
    process = system.process.process
    assert process is not None
    started = time.monotonic()
    await asyncio.to_thread(system.process.stop)
    return {"seconds": time.monotonic() - started, "killed": process.returncode == -9}


async def restart(system: System, broker: Broker, cold: bool) -> dict[str, Any]:
    """Seconds from spawn until a fresh channel's message is woken (and, for chorus, both
    roles answer /ready); the data directory deleted first when `cold`."""
    if cold:
        shutil.rmtree(data_dir(system), ignore_errors=True)
    woken: dict[str, float] = {}

    def take(record: Any, arrived: float) -> None:
        woken.setdefault(str(orjson.loads(record.value or b"{}").get("message_id")), arrived)

    result: dict[str, Any] = {}
    async with Follower(broker.settings, system.topic("driver-events"), take):
        started, spawned_at = time.monotonic(), time.time()
        system.process.spawn()
        deadline = started + RESTART_TIMEOUT
        probes: set[str] = set()
        while not probes & woken.keys():
            system.process.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{system.name}: not folding {RESTART_TIMEOUT:g} s after spawn")
            message_id = f"restart-{uuid.uuid4().hex[:12]}"
            probes.add(message_id)
            value = orjson.dumps(
                {
                    "id": message_id,
                    "channel": f"restart/p{message_id[-12:]}",
                    "sender": "probe",
                    "type": "STATUS",
                    "content": "still there?",
                    "created_at": datetime.now(UTC).isoformat(),
                }
            )
            await send_paced(
                broker.settings,
                system.topic("messages"),
                [(message_id, f"restart/p{message_id[-12:]}".encode(), value)],
                rate=1000.0,
            )
            await asyncio.sleep(RESTART_PROBE_SECONDS)
        result["folding_s"] = min(woken[m] for m in probes & woken.keys()) - spawned_at
        if system.process.command is None:
            remaining = max(1.0, deadline - time.monotonic())
            await asyncio.to_thread(system.process.wait_ready, remaining)
            result["ready_s"] = time.monotonic() - started
    return result


async def run_system(
    system: System,
    broker: Broker,
    records: list[tuple[bytes, bytes]],
    probe: tuple[list[Any], list[Any]],
    timeout: float,
) -> dict[str, Any]:
    log(f"  producing {len(records):,} messages")
    started = time.monotonic()
    await produce(broker.settings, system.topic("messages"), records)
    result: dict[str, Any] = {"produce_s": time.monotonic() - started}
    peaks = Peaks(processes_of(system))
    stopping = asyncio.Event()
    sampler = asyncio.create_task(peaks.run(stopping))
    try:
        result["fold"] = await fold_all(system, broker, len(records), timeout)
        log(f"  folded {len(records):,}: {result['fold']['msgs_per_s'] or 0:,.0f} msg/s")
        warm, load = probe
        sent, clock = await send_and_clock(system, broker, warm, 100.0, PROBE_DRAIN_SECONDS)
        before = await published(broker, system)
        sent, clock = await send_and_clock(system, broker, load, PROBE_RATE, PROBE_DRAIN_SECONDS)
        after = await published(broker, system)
        result["wake"] = {
            **wake_figures(sent, clock.woken),
            "rate": PROBE_RATE,
            "followed_published": {name: after[name] - before[name] for name in FOLLOWED},
        }
        wake_ms = result["wake"]["wake_ms"]
        log(f"  wake p50 {wake_ms['p50']:.0f} ms, p99 {wake_ms['p99']:.0f} ms")
        timers = await slowest_timers(system)
        result["timers_slowest_s"] = timers.get("slowest", {})
        result["timers_held_slowest_s"] = timers.get("held_slowest", {})
        result["timers_held_cpu_slowest_s"] = timers.get("held_cpu_slowest", {})
        lost = keepalives_lost(worker_log(system))
        result["keepalives_lost"] = lost["count"]
        if lost["count"]:
            result["keepalives_lost_log"] = lost["before"]
        peaks.sample()
        result["peak_rss_mib"] = peaks.mib()
        result["stop"] = await stop_seconds(system)
        log(f"  stopped in {result['stop']['seconds']:.1f} s")
        for kind in ("warm", "cold"):
            result[kind] = await restart(system, broker, cold=kind == "cold")
            log(f"  {kind} restart: {result[kind]}")
            await asyncio.to_thread(system.process.stop)
    finally:
        stopping.set()
        await sampler
        system.process.stop()
    return result


async def measure(
    broker: Broker,
    work: Path,
    conversations: list[Conversation],
    channels: int,
    probe_seconds: float,
    timeout: float,
    systems: tuple[str, ...] = ("chorus", "quix"),
) -> dict[str, Any]:
    records = channel_records(channels, "many", short_turns(conversations))
    warm, load = warm_and_load(
        conversations, PROBE_CHANNELS, int(PROBE_RATE * probe_seconds), "probe"
    )
    result: dict[str, Any] = {
        "channels": channels,
        "messages": len(records),
        "open_every": OPEN_EVERY,
        "probe": {"rate": PROBE_RATE, "channels": PROBE_CHANNELS, "seconds": probe_seconds},
    }
    makers: Makers = [
        (name, make)
        for name, make in (
            ("chorus", lambda: chorus_worker(broker, work, "many-chorus")),
            ("fold", lambda: fold_stage(broker, work, "many-fold")),
            ("quix", lambda: quix_peer(broker, work, "many-quix")),
        )
        if name in systems
    ]

    async def run(system: System) -> dict[str, Any]:
        return await run_system(system, broker, records, (warm, load), timeout)

    result.update(await side_by_side("channels", makers, run))
    return result
