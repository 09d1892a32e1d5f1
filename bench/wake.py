"""Wake latency: how long an agent waits to be woken, as it feels it (issue 30).

An independent client produces real meeting turns, about one in five a request or its
reply (bench/data.py), over M channels at fixed rates, each for a fixed time, against a
running system: `chorus worker` with both roles and default settings (summaries and
recaps on), then the Quix Streams peer. A consumer reads the driver events back; a
message's wake time is its event's arrival at that consumer minus the moment the client
handed the message to its producer. Messages whose event has not arrived a drain time
after the last send are "never woken".

Before each rate the system has folded one warm-up message per channel. Around each rate's
window the end offsets of every topic the system writes are taken, after a settle time as
long as a checkpoint interval so the window's checkpoint is inside it; records per message
come from the offsets, bytes from reading the window's records (key + value).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiokafka import ConsumerRecord

from bench.data import encoded_messages
from bench.kafka import Follower, Offsets, all_topics, end_offsets, opened, record_bytes, send_paced
from bench.measure import wake_figures, writes_per_message
from bench.systems import Broker, Makers, System, chorus_worker, log, quix_peer, side_by_side
from streams.conversations import Conversation

# CHORUS_CHECKPOINT_MS's default, and Quix Streams' commit interval: 5 s.
SETTLE_SECONDS = 6.0
Record = tuple[str, bytes, bytes]


class WakeClock:
    """When each message's first driver event was read back, and how many came again."""

    def __init__(self) -> None:
        self.woken: dict[str, float] = {}
        self.events: Counter[str] = Counter()

    def take(self, record: ConsumerRecord[bytes, bytes], arrived: float) -> None:
        message_id = str(orjson.loads(record.value or b"{}").get("message_id"))
        self.woken.setdefault(message_id, arrived)
        self.events[message_id] += 1

    def repeated(self, sent: Sequence[str]) -> int:
        """Events beyond the first for the messages sent (redelivered after a crash)."""
        return sum(max(0, self.events[m] - 1) for m in sent)


def warm_and_load(
    conversations: list[Conversation], channels: int, count: int, tag: str
) -> tuple[list[Record], list[Record]]:
    """Real turns over `channels` channels as (id, key, value): the first of each channel
    (the warm-up), and `count` more after them, in the order they were made."""
    records = [
        (str(orjson.loads(value)["id"]), key, value)
        for key, value in encoded_messages(
            conversations, count + channels, channels, seed=11, tag=tag, merged=False
        )
    ]
    firsts: dict[bytes, Record] = {}
    for record in records:
        firsts.setdefault(record[1], record)
    warm = set(map(id, firsts.values()))
    return list(firsts.values()), [r for r in records if id(r) not in warm][:count]


async def send_and_clock(
    system: System,
    broker: Broker,
    records: list[Record],
    rate: float,
    drain: float,
    on_tick: Callable[[float], None] | None = None,
) -> tuple[dict[str, float], WakeClock]:
    """Send at `rate` and read the driver events back until every message is woken or
    `drain` seconds passed after the last send."""
    clock = WakeClock()
    async with Follower(broker.settings, system.topic("driver-events"), clock.take):
        topic = system.topic("messages")
        sent = await send_paced(broker.settings, topic, records, rate, on_tick)
        deadline = time.monotonic() + drain
        while any(m not in clock.woken for m in sent) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
    return sent, clock


async def written(broker: Broker, system: System) -> Offsets:
    """End offsets of every topic the system writes."""
    mine = [topic for topic in await all_topics(broker.settings) if system.role_of(topic)]
    async with opened(broker.settings) as kafka:
        return await end_offsets(kafka, mine)


async def warm_up(system: System, broker: Broker, records: list[Record]) -> None:
    """One message per channel, every one woken: the system is reading and holds every
    channel's state."""
    sent, clock = await send_and_clock(system, broker, records, rate=100.0, drain=180.0)
    if len(clock.woken.keys() & sent.keys()) < len(sent):
        raise TimeoutError(f"{system.name}: warm-up messages not woken in 180 s")


async def run_rates(
    system: System,
    broker: Broker,
    warm: list[Record],
    windows: list[tuple[float, list[Record]]],
    drain: float,
) -> dict[str, Any]:
    system.start()
    try:
        await warm_up(system, broker, warm)
        results: dict[str, Any] = {}
        for rate, records in windows:
            await asyncio.sleep(SETTLE_SECONDS)
            before = await written(broker, system)
            sent, clock = await send_and_clock(system, broker, records, rate, drain)
            await asyncio.sleep(SETTLE_SECONDS)
            after = await written(broker, system)
            counts = {
                t: sum(e.values()) - sum(before.get(t, {}).values()) for t, e in after.items()
            }
            sizes = await record_bytes(broker.settings, before, after)
            figures = wake_figures(sent, clock.woken)
            figures["writes"] = writes_per_message(counts, sizes, len(sent), system.role_of)
            results[f"{rate:g}"] = figures
            log(
                f"  {system.name} at {rate:g} msg/s: p50 {figures['wake_ms']['p50']:.0f} ms, "
                f"p99 {figures['wake_ms']['p99']:.0f} ms, never woken {figures['never_woken']}"
            )
        return results
    finally:
        system.process.stop()


async def measure(
    broker: Broker,
    work: Path,
    conversations: list[Conversation],
    rates: Sequence[float],
    seconds: float,
    channels: int,
    drain: float,
) -> dict[str, Any]:
    counts = [int(rate * seconds) for rate in rates]
    warm, load = warm_and_load(conversations, channels, sum(counts), "wake")
    windows, start = [], 0
    for rate, count in zip(rates, counts, strict=True):
        windows.append((rate, load[start : start + count]))
        start += count
    result: dict[str, Any] = {"rates": list(rates), "seconds": seconds, "channels": channels}
    makers: Makers = [
        ("chorus", lambda: chorus_worker(broker, work, "wake-chorus")),
        ("quix", lambda: quix_peer(broker, work, "wake-quix")),
    ]

    async def run(system: System) -> dict[str, Any]:
        return await run_rates(system, broker, warm, windows, drain)

    result.update(await side_by_side("wake latency", makers, run))
    return result
