"""Producing records a record batch at a time: one future per batch, not per record.

aiokafka's `send` makes a future per record and lingers for more; the worker's outputs
(driver events, checkpoints' changelog records) are already gathered, so each partition's
records are appended to closed `BatchBuilder`s (`create_batch`, `send_batch`) that go out
at once, and the broker's acknowledgement of a batch gives every record's offset (the
batch's base offset plus its place in the batch). A record batch is appended to a
partition's log whole or not at all.

`Outbox` gathers records that concurrent tasks send one at a time (summaries, recaps) into
one `publish` per `linger`: a produce request per lot, not per record, and as few fetches
woken in each reader of the topic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)

from streams.errors import ChorusError

log = logging.getLogger(__name__)

# A record to produce: (key, value, partition).
Record = tuple[bytes | None, bytes | None, int]

# What no retry can make the broker accept: a record (or batch) too large for the topic.
REFUSED_FOR_GOOD = (MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError)


class PublishFailed(ChorusError):
    """Records the broker did not acknowledge (or that could not be queued)."""


@dataclass(frozen=True)
class Refused:
    """A record the broker refused for good: its index in what was published."""

    index: int
    error: BaseException


@dataclass(frozen=True)
class Published:
    """Each record's offset in its partition (None for a refused one), and the refused."""

    offsets: list[int | None]
    refused: list[Refused]


def refused_for_good(error: BaseException) -> bool:
    """Faust's producer wraps what aiokafka raises at queue time (`ProducerSendError`)."""
    return isinstance(error, REFUSED_FOR_GOOD) or isinstance(error.__cause__, REFUSED_FOR_GOOD)


async def publish(producer: Any, topic: str, records: Sequence[Record]) -> Published:
    """Produce `records` to `topic` (an `AIOKafkaProducer`, acks as it is configured) in
    record batches, in order within each partition, and return once the broker has
    acknowledged every one of them or refused it for good.

    Guarantee: when this returns, every record is durable or in `refused`. Refused for good
    means too large for the topic (`REFUSED_FOR_GOOD`); since the broker judges a whole
    batch at once, the records of a refused batch are sent again one per batch before one
    counts as refused. Any other failure (no leader, timeouts, no metadata) is logged and
    raises `PublishFailed` once every queued batch has settled: the batches acknowledged
    stay, so publishing again duplicates them (readers dedupe: driver events by (channel,
    offset); a changelog applies the same value twice)."""
    if not records:
        return Published([], [])
    by_partition: dict[int, list[int]] = {}
    for index, (_, _, partition) in enumerate(records):
        by_partition.setdefault(partition, []).append(index)
    sent: list[tuple[list[int], asyncio.Future[Any]]] = []
    errors: list[BaseException] = []
    too_large: list[int] = []
    try:
        for partition, indices in by_partition.items():
            for batch, members in _batches(producer, records, indices):
                sent.append((members, await producer.send_batch(batch, topic, partition=partition)))
    except Exception as error:  # e.g. no metadata in time: what was queued still settles
        errors.append(error)
    outcomes = await asyncio.gather(*(future for _, future in sent), return_exceptions=True)
    offsets: list[int | None] = [None] * len(records)
    for (members, _), outcome in zip(sent, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            if refused_for_good(outcome):
                too_large += members
            else:
                errors.append(outcome)
            continue
        for place, index in enumerate(members):
            offsets[index] = outcome.offset + place
    if errors:
        missing = sum(offset is None for offset in offsets) - len(too_large)
        reason = (
            f"{missing} of {len(records)} records to {topic} not acknowledged: "
            f"{type(errors[0]).__name__}: {errors[0]}"
        )
        log.error("%s", reason)
        raise PublishFailed(reason) from errors[0]
    refused: list[Refused] = []
    for index in sorted(too_large):
        offset, refusal = await _alone(producer, topic, records[index])
        if refusal is None:
            offsets[index] = offset
        else:
            refused.append(Refused(index, refusal))
    return Published(offsets, refused)


def _batches(
    producer: Any, records: Sequence[Record], indices: list[int]
) -> list[tuple[Any, list[int]]]:
    """The records at `indices` (one partition's) in closed batches as large as the
    producer's batch size allows (a batch always takes its first record)."""
    batches: list[tuple[Any, list[int]]] = []
    batch, members = producer.create_batch(), list[int]()
    for index in indices:
        key, value, _ = records[index]
        if batch.append(key=key, value=value, timestamp=None) is None:
            batch.close()
            batches.append((batch, members))
            batch, members = producer.create_batch(), list[int]()
            batch.append(key=key, value=value, timestamp=None)
        members.append(index)
    batch.close()
    batches.append((batch, members))
    return batches


async def _alone(
    producer: Any, topic: str, record: Record
) -> tuple[int | None, BaseException | None]:
    """`record` in a batch of its own: (its offset, None) once acknowledged, (None, the
    error) when the broker still refuses it for good; `PublishFailed` otherwise."""
    key, value, partition = record
    batch = producer.create_batch()
    batch.append(key=key, value=value, timestamp=None)
    batch.close()
    try:
        metadata = await (await producer.send_batch(batch, topic, partition=partition))
    except Exception as error:
        if not refused_for_good(error):
            log.error("a record to %s not acknowledged: %r", topic, error)
            raise PublishFailed(f"a record to {topic} not acknowledged: {error!r}") from error
        log.error("%s refused a record of %s bytes: %r", topic, len(value or b""), error)
        return None, error
    return int(metadata.offset), None


async def until_acknowledged(
    publish_once: Callable[[], Awaitable[Published]],
    delays: tuple[float, float],
    again: str,
) -> Published:
    """`publish_once()` until it returns (every record acknowledged or refused for good):
    while it raises `PublishFailed`, it is tried again after a wait doubling from the first
    of `delays` to the last, then the last; each wait is logged as `again` with the seconds
    (a %g placeholder). For writes that must not be given up (driver events, checkpoints):
    their sources stay unacknowledged meanwhile."""
    delay, longest = delays
    while True:
        try:
            return await publish_once()
        except PublishFailed:
            log.warning(again, delay)
            await asyncio.sleep(delay)
            delay = min(2 * delay, longest)


# The most records an `Outbox` lot holds: one at that size goes out at once.
OUTBOX_MAX_RECORDS = 500


class Outbox:
    """Records sent one at a time by concurrent tasks, produced together: the first record
    of a lot waits `linger` seconds for others, then the lot goes out in one `publish`, and
    each `send` returns its record's offset once the lot is acknowledged, or raises what
    publishing raised (`PublishFailed`), or the broker's error for a record it refused for
    good. Bounded: a lot that reaches `max_records` goes out at once, without waiting."""

    def __init__(
        self,
        publish: Callable[[Sequence[Record]], Awaitable[Published]],
        linger: float,
        max_records: int = OUTBOX_MAX_RECORDS,
    ) -> None:
        self._publish = publish
        self.linger = linger
        self.max_records = max_records
        self._lot: list[tuple[Record, asyncio.Future[int | None]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def send(self, record: Record) -> int | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int | None] = loop.create_future()
        self._lot.append((record, future))
        if len(self._lot) >= self.max_records:
            self._start_lot()
        elif len(self._lot) == 1:
            loop.call_later(self.linger, self._start_lot)
        return await future

    def _start_lot(self) -> None:
        """Send the lot gathered so far (the linger's timer may then find an empty one)."""
        if not self._lot:
            return
        task = asyncio.ensure_future(self._send_lot(self._lot))
        self._lot = []
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_lot(self, lot: list[tuple[Record, asyncio.Future[int | None]]]) -> None:
        try:
            published = await self._publish([record for record, _ in lot])
        except Exception as error:
            for _, future in lot:
                if not future.done():
                    future.set_exception(error)
            return
        refused = {one.index: one.error for one in published.refused}
        for index, (_, future) in enumerate(lot):
            if future.done():  # its sender was cancelled
                continue
            if index in refused:
                future.set_exception(refused[index])
            else:
                future.set_result(published.offsets[index])
