"""Throughput: N pre-produced real messages through each system, measured on its output.

Each system gets its own copy of the same N messages (0.5-2 KB, over M channels) in its
messages topic, then is started and polled every 0.2 s: its driver events' end offsets, the
CPU (user + system) of all its processes, and the broker's. Msg/s and CPU per message run
from the first poll that saw output (start-up and state recovery are no message's cost) to
the poll that saw the last; `run_figures` does the arithmetic.

  fold stage  the fold role with only its config and fold stages (bench/fold_worker.py);
  quix        Quix Streams running chorus's fold (bench/quix_peer);
  pipeline    `chorus worker`, both roles, CHORUS_SUMMARY_AFTER_SECONDS=2 so the tail is
              summarised without the default 300 s wait: to its last driver event, and to
              its last summary, when every channel's latest summary covers its last message.

Before them the pipeline runs unmeasured on topics of its own, to warm the broker's JVM up,
until a run finds the broker's JIT compiler threads nearly quiet (at most WARM_UP_RUNS_MAX
runs): every system is measured on a broker past its warm-up, whichever runs first.

After its run the pipeline is started twice more, to measure what a restart costs: warm
(its data directory kept) and cold (deleted: every table restored from its changelog),
each timed from spawn until both roles answer ready; beside them the changelog records the
state stands in (their end offsets: a cold restore reads at most these, less what the
broker's cleaner compacted).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
from aiokafka import ConsumerRecord

from bench.data import encoded_messages, size_stats
from bench.kafka import Follower, all_topics, end_offsets, opened, produce
from bench.measure import (
    Poll,
    all_covered,
    channel_ends,
    cpu_seconds,
    jit_cpu_seconds,
    run_figures,
)
from bench.systems import (
    Broker,
    Makers,
    System,
    chorus_worker,
    fold_stage,
    log,
    quix_peer,
    quix_version,
    side_by_side,
)
from streams.conversations import Conversation

SUMMARY_AFTER_SECONDS = "2"
POLL_SECONDS = 0.2
STALL_SECONDS = 120.0
RESTART_TIMEOUT = 300.0
# How long the broker holds the summary reader's fetch while nothing new arrived (aiokafka's
# default; a summary that arrives ends the wait at once).
SUMMARY_READER_WAIT_MS = 500
# Warm-up runs of the pipeline before the measured systems: until one finds the broker's JIT
# compiling at most this much CPU per message (a tenth of the target for all its CPU), or
# this many runs.
WARM_JIT_MS_PER_MSG = 0.03
WARM_UP_RUNS_MAX = 3


async def poll_until(
    system: System,
    broker: Broker,
    done: Callable[[int], bool],
    timeout: float,
    processes: Callable[[], Mapping[str, int]] | None = None,
) -> list[Poll]:
    """Poll the system's driver events and CPU until `done(driver events so far)`; with
    `processes` (label -> pid), each of those processes' own CPU too."""
    topic = system.topic("driver-events")
    broker_pid = broker.pid()
    polls: list[Poll] = []
    deadline = time.monotonic() + timeout
    last_change = time.monotonic()
    async with opened(broker.settings) as kafka:
        while True:
            count = sum((await end_offsets(kafka, [topic]))[topic].values())
            cpu = cpu_seconds(system.process.pid)
            broker_cpu = cpu_seconds(broker_pid)
            by_process = {
                label: (pid, cpu_seconds(pid, descendants=False))
                for label, pid in (processes() if processes else {}).items()
            }
            polls.append(
                Poll(time.time(), count, cpu, broker_cpu, jit_cpu_seconds(broker_pid), by_process)
            )
            if done(count):
                return polls
            system.process.check_alive()
            if len(polls) > 1 and count != polls[-2].outputs:
                last_change = time.monotonic()
            now = time.monotonic()
            if now > deadline or now - last_change > STALL_SECONDS:
                raise TimeoutError(f"{system.name}: stopped at {count:,} driver events")
            await asyncio.sleep(POLL_SECONDS)


async def run_system(
    system: System,
    broker: Broker,
    records: list[tuple[bytes, bytes]],
    timeout: float,
    summaries: bool = False,
) -> dict[str, Any]:
    channels = [key.decode() for key, _ in records]
    ends = channel_ends(channels, await produce(broker.settings, system.topic("messages"), records))
    covered: dict[str, int] = {}

    def take_summary(record: ConsumerRecord[bytes, bytes], _: float) -> None:
        summary = orjson.loads(record.value) if record.value else {}
        channel, last = summary.get("channel"), summary.get("last_offset")
        if channel is not None and last is not None:
            covered[channel] = max(last, covered.get(channel, -1))

    def done(count: int) -> bool:
        return count >= len(records) and (not summaries or all_covered(ends, covered))

    # Read as the coverage check needs it (polled every POLL_SECONDS), not as the wake clock:
    # at the wake clock's 10 ms its fetches were 62% of the broker's requests in a pipeline
    # run (5,262 of 8,433, the broker's request log), all counted in the broker's CPU.
    summary_reader = Follower(
        broker.settings,
        system.topic("summaries"),
        take_summary,
        from_beginning=True,
        max_wait_ms=SUMMARY_READER_WAIT_MS,
    )
    if summaries:
        await summary_reader.start()
    system.process.spawn()  # not waited for: its output is polled from the start
    try:
        polls = await poll_until(system, broker, done, timeout)
    finally:
        system.process.stop()
        await summary_reader.stop()
    result: dict[str, Any] = {**run_figures(polls), "messages": len(records)}
    if summaries:
        to_events = [poll for poll in polls if poll.outputs < len(records)]
        last_event = next(poll for poll in polls if poll.outputs >= len(records))
        first = next(poll for poll in polls if poll.outputs > 0)
        result["to_last_event"] = run_figures([*to_events, last_event])
        result["last_event_s"] = last_event.wall - first.wall
        result["last_summary_s"] = polls[-1].wall - first.wall
        result["channels_covered"] = sum(1 for c, e in ends.items() if covered.get(c, -1) >= e)
    log(f"  {system.name}: {result['msgs_per_s'] or 0:,.0f} msg/s")
    return result


async def restarts(system: System, broker: Broker) -> dict[str, Any]:
    """Seconds from spawn to ready with the data directory kept, then deleted."""
    changelogs = [
        topic
        for topic in await all_topics(broker.settings)
        if system.role_of(topic) and topic.endswith("-changelog")
    ]
    async with opened(broker.settings) as kafka:
        ends = await end_offsets(kafka, changelogs)
    result: dict[str, Any] = {
        "changelog_records": sum(sum(offsets.values()) for offsets in ends.values())
    }
    for kind in ("warm", "cold"):
        if kind == "cold":
            shutil.rmtree(system.process.env["CHORUS_DATA_DIR"])
        started = time.monotonic()
        try:
            await asyncio.to_thread(system.process.start, RESTART_TIMEOUT)
            result[f"{kind}_start_s"] = time.monotonic() - started
        finally:
            system.process.stop()
    log(f"  restarts: warm {result['warm_start_s']:.1f} s, cold {result['cold_start_s']:.1f} s")
    return result


async def measure(
    broker: Broker,
    work: Path,
    conversations: list[Conversation],
    messages: int,
    channels: int,
    timeout: float,
) -> dict[str, Any]:
    records = encoded_messages(conversations, messages, channels)
    result: dict[str, Any] = {
        "messages": messages,
        "channels": channels,
        "message_bytes": size_stats(records),
    }
    makers: Makers = [
        ("fold_stage", lambda: fold_stage(broker, work, "tput-fold")),
        ("quix", lambda: quix_peer(broker, work, "tput-quix")),
        (
            "pipeline",
            lambda: chorus_worker(
                broker, work, "tput-pipeline", CHORUS_SUMMARY_AFTER_SECONDS=SUMMARY_AFTER_SECONDS
            ),
        ),
    ]

    async def run(system: System) -> dict[str, Any]:
        summaries = system.name == "chorus"  # the whole pipeline, to its last summary
        result = await run_system(system, broker, records, timeout, summaries)
        if summaries:
            try:
                result["restarts"] = await restarts(system, broker)
            except Exception as error:  # the throughput measured stands
                log(f"  restarts failed: {error}")
                result["restarts"] = {"error": f"{type(error).__name__}: {error}"}
        return result

    # A fresh broker's JVM spends its first minutes compiling its hot paths (its JIT threads
    # were most of its CPU in the first runs on it): the whole pipeline runs unmeasured first,
    # again until the JIT is nearly quiet, so no system's broker figures carry the warm-up.
    result["warm_up"] = []
    for run_number in range(1, WARM_UP_RUNS_MAX + 1):
        log(f"throughput: warming the broker up (the pipeline, unmeasured, run {run_number})")
        warm_up = chorus_worker(
            broker,
            work,
            f"tput-warm-up-{run_number}",
            CHORUS_SUMMARY_AFTER_SECONDS=SUMMARY_AFTER_SECONDS,
        )
        warmed = await run_system(warm_up, broker, records, timeout, True)
        result["warm_up"].append(
            {key: warmed[key] for key in ("broker_cpu_ms_per_msg", "broker_jit_ms_per_msg")}
        )
        if (warmed["broker_jit_ms_per_msg"] or 0.0) <= WARM_JIT_MS_PER_MSG:
            break
    result.update(await side_by_side("throughput", makers, run))
    result["quix_version"] = quix_version()
    return result
