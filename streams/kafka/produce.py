"""Producing channel messages: validate first, key by channel, acks=all."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

import orjson
from aiokafka import AIOKafkaProducer

from projections.model import Message, MessageError, encode_message, message_from_record
from projections.model import with_generated_correlation_id as _with_correlation_id
from streams.kafka.clients import producer, started, topic_partitions
from streams.settings import Settings
from streams.topology import MESSAGES


@dataclass(frozen=True)
class LineError:
    line_number: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line_number}: {self.reason}"


E = TypeVar("E", bound=StrEnum)


@dataclass(frozen=True)
class SentMessage:
    """A message the broker has acknowledged, and where it landed."""

    message: Message
    partition: int
    offset: int

    @property
    def id(self) -> str:
        return self.message.id

    @property
    def channel(self) -> str:
        return self.message.channel

    @property
    def correlation_id(self) -> str | None:
        return self.message.correlation_id


def enum_member(enum: type[E], field: str, value: E | str) -> E:
    """`value` as a member of `enum`, its name in any case accepted; a `MessageError` naming
    the field and the allowed names otherwise."""
    try:
        return enum(value.upper())
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        raise MessageError(f"{field}: must be one of {allowed} (any case), not {value!r}") from None


def prepare(record: Any) -> Message:
    """A producer's record to a valid Message (a missing request correlation_id is generated)."""
    if isinstance(record, dict):
        record = _with_correlation_id(record)
    return message_from_record(record)


def parse_json_lines(lines: Iterable[str]) -> tuple[list[Message], list[LineError]]:
    """Valid messages and one error per bad line; blank lines are skipped."""
    messages: list[Message] = []
    errors: list[LineError] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            messages.append(prepare(orjson.loads(line)))
        except orjson.JSONDecodeError as error:
            errors.append(LineError(number, f"not valid JSON: {error}"))
        except MessageError as error:
            errors.append(LineError(number, error.reason))
    return messages, errors


async def started_producer(settings: Settings) -> AIOKafkaProducer:
    """A started producer for `chorus.messages`; a clear error when the topic is missing."""
    kafka = producer(settings)
    await started(kafka, settings)
    try:
        await topic_partitions(kafka, settings.topic(MESSAGES))
    except BaseException:
        await kafka.stop()
        raise
    return kafka


def encoded(settings: Settings, messages: Sequence[Message]) -> list[tuple[Message, bytes]]:
    """Each message with its record value; `MessageError` for one over the size limit, so
    nothing is sent when one of them could not be."""
    return [(message, encode_message(message, settings.max_message_bytes)) for message in messages]


async def deliver(
    kafka: AIOKafkaProducer, settings: Settings, records: Sequence[tuple[Message, bytes]]
) -> list[SentMessage]:
    """Send `encoded` messages in order and wait for every acknowledgement."""
    futures = [
        await kafka.send(settings.topic(MESSAGES), key=message.channel.encode(), value=value)
        for message, value in records
    ]
    sent = []
    for (message, _), future in zip(records, futures, strict=True):
        metadata = await future
        sent.append(SentMessage(message, metadata.partition, metadata.offset))
    return sent


async def send_messages(settings: Settings, messages: Sequence[Message]) -> list[SentMessage]:
    """Send in order with a producer of their own and wait for every acknowledgement."""
    records = encoded(settings, messages)
    kafka = await started_producer(settings)
    try:
        return await deliver(kafka, settings, records)
    finally:
        await kafka.stop()
