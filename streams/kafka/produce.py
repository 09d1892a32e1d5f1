"""Producing channel messages: validate first, key by channel, acks=all."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

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


@dataclass(frozen=True)
class Delivered:
    message: Message
    partition: int
    offset: int


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


async def send_messages(settings: Settings, messages: Sequence[Message]) -> list[Delivered]:
    """Send in order and wait for every acknowledgement."""
    kafka = producer(settings)
    await started(kafka, settings)
    try:
        await topic_partitions(kafka, settings.topic(MESSAGES))
        futures = [
            await kafka.send(
                settings.topic(MESSAGES),
                key=message.channel.encode(),
                value=encode_message(message, settings.max_message_bytes),
            )
            for message in messages
        ]
        delivered = []
        for message, future in zip(messages, futures, strict=True):
            metadata = await future
            delivered.append(Delivered(message, metadata.partition, metadata.offset))
        return delivered
    finally:
        await kafka.stop()
