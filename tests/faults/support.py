"""Shared helpers for the fault tests: traffic, bounded waits, end checks and figures."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from aiokafka import TopicPartition

from projections.model import ActorType, Message, MessageType, decode_message, encode_message
from streams.kafka.clients import consumer, producer, topic_partitions
from streams.settings import Settings
from streams.topology import DRIVER_EVENTS, MESSAGES
from tests.factories import worker_states

AGENTS = ["planner", "coder", "reviewer", "tester"]


def scale() -> float:
    """CHORUS_FAULT_SCALE (default 1): multiplies message counts, for slow machines."""
    return float(os.environ.get("CHORUS_FAULT_SCALE", "1"))


def scaled(count: int, minimum: int = 1) -> int:
    return max(minimum, int(count * scale()))


def channel_names(count: int, prefix: str = "load") -> list[str]:
    return [f"{prefix}/c{index:03d}" for index in range(count)]


def traffic(channels: Sequence[str], count: int, seed: int = 1) -> list[Message]:
    """`count` small valid messages over `channels`, in produce order.

    Mostly short STATUS and EVENT records; about one in forty opens a request that a later
    message acknowledges, hands off, fulfils, declines or fails, so the commitment rules are
    exercised while states (and so driver events and changelog records) stay small.
    """
    rng = random.Random(seed)
    start = datetime(2026, 2, 1, 8, 0, tzinfo=UTC)
    pending: dict[str, list[tuple[str, str]]] = defaultdict(list)
    messages: list[Message] = []
    for index in range(count):
        channel = channels[index % len(channels)] if index < len(channels) else rng.choice(channels)
        base: dict[str, Any] = {
            "id": f"f{seed}-{index}",
            "channel": channel,
            "sender": rng.choice(AGENTS),
            "created_at": start + timedelta(milliseconds=index * 50),
        }
        roll = rng.random()
        open_here = pending[channel]
        if open_here and roll < 0.08:
            request_id, correlation_id = open_here[0]
            reply = rng.choice(
                [
                    MessageType.STATUS,
                    MessageType.HANDOFF,
                    MessageType.DONE,
                    MessageType.RESPONSE,
                    MessageType.DECLINE,
                    MessageType.FAILURE,
                ]
            )
            extra: dict[str, Any] = {
                "type": reply,
                "in_reply_to": request_id,
                "correlation_id": correlation_id,
                "content": f"{reply.value.lower()} {index}",
            }
            if reply is MessageType.HANDOFF:
                extra["target"] = f"role:{rng.choice(AGENTS)}"
            if reply not in (MessageType.STATUS, MessageType.HANDOFF):
                open_here.pop(0)
            messages.append(Message.model_validate({**base, **extra}))
        elif roll < 0.105 and len(open_here) < 2:
            correlation_id = f"k{seed}-{index}"
            messages.append(
                Message.model_validate(
                    {
                        **base,
                        "type": rng.choice([MessageType.QUERY, MessageType.COMMAND]),
                        "correlation_id": correlation_id,
                        "target": f"role:{rng.choice(AGENTS)}",
                        "content": f"do {index}",
                        "topic": rng.choice(["build", "release"]),
                    }
                )
            )
            open_here.append((base["id"], correlation_id))
        elif roll < 0.25:
            messages.append(
                Message.model_validate(
                    {
                        **base,
                        "type": MessageType.EVENT,
                        "actor_type": ActorType.SYSTEM,
                        "payload": {"n": index},
                    }
                )
            )
        else:
            messages.append(
                Message.model_validate({**base, "type": MessageType.STATUS, "content": f"s{index}"})
            )
    return messages


def expected_state(messages: Iterable[Message]) -> dict[str, Any]:
    """Both default projections folded over one channel's messages (log order)."""
    return worker_states(messages)


# --- bounded waiting ----------------------------------------------------------------------


async def eventually(
    check: Callable[[], Awaitable[Any]],
    timeout: float,
    interval: float = 1.0,
    what: str = "condition",
) -> Any:
    """Call `check` until it returns something truthy; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = await check()
            if last:
                return last
        except (httpx.HTTPError, OSError) as error:  # a worker restarting
            last = error
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met in {timeout:g}s; last: {str(last)[:500]}")
        await asyncio.sleep(interval)


# How soon a view of one role must answer while the other role is down.
ANSWER_SECONDS = 1.0


async def answering_within(
    base_url: str, paths: Sequence[str], headers: dict[str, str], seconds: float = ANSWER_SECONDS
) -> float:
    """Ask each of `paths` once; each must answer 200 within `seconds` (AssertionError
    naming the view otherwise). The slowest answer's time."""
    slowest = 0.0
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=10) as client:
        for path in paths:
            started = time.monotonic()
            answer = await client.get(path)
            took = time.monotonic() - started
            assert answer.status_code == 200, f"{path}: HTTP {answer.status_code} {answer.text}"
            assert took < seconds, f"{path} took {took:.2f} s"
            slowest = max(slowest, took)
    return slowest


def settings_from(env: dict[str, str]) -> dict[str, str]:
    """Settings keyword arguments from CHORUS_* variables."""
    return {k.removeprefix("CHORUS_").lower(): v for k, v in env.items()}


async def prepare_topics(settings: Settings, timeout: float = 60.0) -> None:
    """chorus's topics plus the worker's changelog topics, then wait until fresh metadata
    lists every partition of each.

    Faust creates changelog topics itself at start; when its consumer's metadata snapshot
    predates them, the table agents crash-loop on PartitionsMismatch (bug 5 in
    docs/reliability.md, test_broker_failover.test_worker_on_brand_new_topics_starts_cleanly).
    The fault tests create them up front so each test exercises its own fault, not that race.
    """
    from streams.ops.topics import create_topics
    from streams.registry import registered_projections
    from streams.topology import ROLES, role_changelogs, topic_specs

    projections = registered_projections(settings.projections, settings)
    changelogs = {  # both roles' tables; no I/O
        name for role in ROLES for name in role_changelogs(settings, role, projections)
    }
    await create_topics(settings, sorted(changelogs))
    wanted = {spec.name for spec in topic_specs(settings)} | changelogs

    async def visible() -> bool:
        kafka = consumer(settings, group_id=None)
        await kafka.start()
        try:
            metadata = await kafka._client.fetch_all_metadata()
            return all(
                len(metadata.partitions_for_topic(name) or ()) == settings.partitions
                for name in wanted
            )
        finally:
            await kafka.stop()

    await eventually(visible, timeout, 0.5, "topics visible in metadata")


# --- producing ----------------------------------------------------------------------------


@dataclass
class Acked:
    message: Message
    partition: int
    offset: int


@dataclass
class Producing:
    """Background producer: messages at a steady rate, every acknowledgement recorded."""

    settings: Settings
    messages: Sequence[Message]
    rate: float  # messages per second
    acked: list[Acked] = field(default_factory=list)
    failed: list[tuple[Message, str]] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0

    async def run(self, **producer_overrides: Any) -> None:
        kafka = producer(self.settings, **producer_overrides)
        await kafka.start()
        topic = self.settings.topic(MESSAGES)
        self.started = time.monotonic()
        chunk = max(1, int(self.rate / 20))
        try:
            pending: list[tuple[Message, asyncio.Future[Any]]] = []
            for start in range(0, len(self.messages), chunk):
                for message in self.messages[start : start + chunk]:
                    future = await kafka.send(
                        topic, key=message.channel.encode(), value=encode_message(message)
                    )
                    pending.append((message, future))
                await self._collect(pending, wait=False)
                target = self.started + (start + chunk) / self.rate
                await asyncio.sleep(max(0.0, target - time.monotonic()))
            await self._collect(pending, wait=True)
        finally:
            await kafka.stop()
            self.finished = time.monotonic()

    async def _collect(
        self, pending: list[tuple[Message, asyncio.Future[Any]]], wait: bool
    ) -> None:
        keep = []
        for message, future in pending:
            if not wait and not future.done():
                keep.append((message, future))
                continue
            try:
                metadata = await future
            except Exception as error:  # not acknowledged: may or may not be in the log
                self.failed.append((message, f"{type(error).__name__}: {error}"))
            else:
                self.acked.append(Acked(message, metadata.partition, metadata.offset))
        pending[:] = keep


# --- reading topics fast ------------------------------------------------------------------


async def read_all(
    settings: Settings, topic: str, timeout: float = 120.0
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of `topic` up to its current end: (partition, offset, key, value)."""
    kafka = consumer(
        settings, enable_auto_commit=False, group_id=None, max_partition_fetch_bytes=8 << 20
    )
    await kafka.start()
    try:
        name = settings.topic(topic)
        partitions = [TopicPartition(name, p) for p in sorted(await topic_partitions(kafka, name))]
        kafka.assign(partitions)
        await kafka.seek_to_beginning(*partitions)
        ends = await kafka.end_offsets(partitions)
        records: list[tuple[int, int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout

        async def done() -> bool:
            for tp, end in ends.items():
                if await kafka.position(tp) < end:
                    return False
            return True

        while not await done():
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}: not read to its end in {timeout:g}s")
            batches = await kafka.getmany(timeout_ms=1000, max_records=10000)
            for tp, batch in batches.items():
                records.extend((tp.partition, r.offset, r.key, r.value) for r in batch)
        return records
    finally:
        await kafka.stop()


@dataclass
class LogMessages:
    """The messages topic as read back: each channel's messages with their offsets."""

    by_channel: dict[str, list[tuple[int, Message]]]
    positions: dict[tuple[int, int], str]  # (partition, offset) -> message id

    def messages(self, channel: str) -> list[Message]:
        return [m for _, m in self.by_channel[channel]]


async def read_messages(settings: Settings) -> LogMessages:
    by_channel: dict[str, list[tuple[int, Message]]] = defaultdict(list)
    positions: dict[tuple[int, int], str] = {}
    for partition, offset, _, value in sorted(await read_all(settings, MESSAGES)):
        message = decode_message(value, settings.max_message_bytes)
        by_channel[message.channel].append((offset, message))
        positions[(partition, offset)] = message.id
    return LogMessages(dict(by_channel), positions)


def missing_driver_events(
    records: Iterable[tuple[int, int, bytes | None, bytes | None]], log: LogMessages
) -> tuple[list[tuple[str, int, str]], int, list[str]]:
    """Driver-event check: (missing (channel, offset, projection), events read, bad steps).

    A bad step is an event that says it applied the message but whose overview state does
    not count exactly the channel's messages up to it: a message applied twice or skipped.
    """
    seen: set[tuple[str, int]] = set()
    position = {
        (channel, offset): index
        for channel, items in log.by_channel.items()
        for index, (offset, _) in enumerate(items, start=1)
    }
    bad: list[str] = []
    count = 0
    for _, _, _, value in records:
        count += 1
        event = json.loads(value or b"{}")
        key = (event["channel"], event["offset"])
        seen.add(key)
        overview = event["projections"]["overview"]["live"]
        if event.get("applied") and overview is not None:
            want = position.get(key)
            if overview["message_count"] != want:
                bad.append(f"{key}: message_count {overview['message_count']} != {want}")
    wanted = {(channel, offset) for channel, items in log.by_channel.items() for offset, _ in items}
    return sorted(wanted - seen), count, bad


async def check_driver_events(settings: Settings, log: LogMessages, timeout: float) -> int:
    """Every message has its driver event (waits up to `timeout`)."""
    result: dict[str, Any] = {}

    async def covered() -> bool:
        missing, count, bad = missing_driver_events(await read_all(settings, DRIVER_EVENTS), log)
        result.update(missing=missing, count=count, bad=bad)
        return not missing

    try:
        await eventually(covered, timeout, 2.0, "every message has driver events")
    except AssertionError:
        missing = result.get("missing", [])
        raise AssertionError(
            f"{len(missing)} (channel, offset, projection) without a driver event, "
            f"e.g. {missing[:10]}"
        ) from None
    assert not result["bad"], result["bad"][:10]
    return int(result["count"])


# --- live state over HTTP -----------------------------------------------------------------


async def live_states(
    base_urls: Sequence[str], channels: Iterable[str], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """GET /channels/{c}/state for each channel (any worker routes to the owner)."""
    results: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=15, headers=headers) as client:
        semaphore = asyncio.Semaphore(8)

        async def one(index: int, channel: str) -> None:
            async with semaphore:
                url = f"{base_urls[index % len(base_urls)]}/channels/{channel}/state"
                response = await client.get(url)
                if response.status_code == 200:
                    body = response.json()
                    results[channel] = {
                        name: (item["offset"], item["state"])
                        for name, item in body["projections"].items()
                    }
                else:
                    results[channel] = f"HTTP {response.status_code}: {response.text[:200]}"

        await asyncio.gather(*(one(i, c) for i, c in enumerate(channels)))
    return results


async def check_live_states(
    base_urls: Sequence[str], log: LogMessages, timeout: float, stalled_after: float = 90.0
) -> None:
    """Every channel's live state equals the pure fold of its logged messages, and its
    offset is the channel's last offset (nothing skipped, nothing applied twice).

    Waits up to `timeout` while the worker catches up, but fails early once the differing
    states have not changed for `stalled_after` seconds: a skipped message never comes back.
    """
    expected = {
        channel: {
            name: (items[-1][0], state)
            for name, state in expected_state(m for _, m in items).items()
        }
        for channel, items in log.by_channel.items()
    }
    wrong: dict[str, Any] = {}
    stalled = {"since": time.monotonic(), "last": None}

    async def equal() -> bool:
        live = await live_states(base_urls, expected)
        wrong.clear()
        wrong.update({c: live[c] for c in expected if live[c] != expected[c]})
        snapshot = repr(sorted(wrong.items()))
        if snapshot != stalled["last"]:
            stalled.update(since=time.monotonic(), last=snapshot)
        elif wrong and time.monotonic() - stalled["since"] > stalled_after:
            raise AssertionError("stalled")
        return not wrong

    try:
        await eventually(equal, timeout, 2.0, "live states equal the replay")
    except AssertionError as error:
        channel = next(iter(wrong))
        got = wrong[channel]
        summary = (
            got
            if isinstance(got, str)
            else {n: (o, s.get("message_count")) for n, (o, s) in got.items()}
        )
        want = {n: (o, s.get("message_count")) for n, (o, s) in expected[channel].items()}
        how = f"unchanged for {stalled_after:g}s" if str(error) == "stalled" else "timed out"
        raise AssertionError(
            f"{len(wrong)} channel(s) differ from the replay ({how}); e.g. {channel}: live "
            f"{summary} (offset, message_count) vs replay {want}; "
            f"differing: {state_differences(got, expected[channel])}"
        ) from None


def state_differences(live: Any, replayed: dict[str, Any]) -> str:
    """Which fields of which projection differ, and for the commitments which ones: enough
    to tell a lost write from a stale one when a crash test fails."""
    if isinstance(live, str):
        return live
    found = []
    for name, (_, want) in replayed.items():
        _, got = live.get(name, (None, {}))
        for key in sorted(set(want) | set(got)):
            if want.get(key) == got.get(key):
                continue
            if key == "commitments" and isinstance(want.get(key), dict):
                mine, theirs = got.get(key) or {}, want[key]
                ids = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
                states = {
                    k: ((mine.get(k) or {}).get("state"), (theirs.get(k) or {}).get("state"))
                    for k in ids[:5]
                }
                found.append(f"{name}.commitments {len(ids)} differ (live, replay state): {states}")
            else:
                found.append(
                    f"{name}.{field}: live {got.get(field)!r:.120} vs {want.get(field)!r:.120}"
                )
    return "; ".join(found) or "none"


# --- figures --------------------------------------------------------------------------------

FIGURES: list[dict[str, Any]] = []


def report(fault: str, **figures: Any) -> None:
    """Record a result line for the terminal summary (and CHORUS_FAULT_REPORT, if set)."""
    entry = {"fault": fault, **figures}
    FIGURES.append(entry)
    path = os.environ.get("CHORUS_FAULT_REPORT")
    if path:
        with Path(path).open("a") as out:
            out.write(json.dumps(entry) + "\n")
