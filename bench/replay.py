"""Replay: `chorus replay --benchmark` over N real messages, as a user runs it.

The command reads the messages topic raw (first and last, the better counts), decodes and
validates it alone, then folds it through every projection in one process and in one per
CPU (the better is `replay_messages_per_s`); the bench produces the messages and reports
the command's JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from bench.data import encoded_messages
from bench.kafka import produce
from bench.systems import Broker, chorus, chorus_worker
from streams.conversations import Conversation


async def measure(
    broker: Broker, work: Path, conversations: list[Conversation], messages: int
) -> dict[str, Any]:
    system = chorus_worker(broker, work, "replay")  # its topics; the worker is not started
    records = encoded_messages(conversations, messages, 200)
    await produce(broker.settings, system.topic("messages"), records)
    answer = chorus(["replay", "--benchmark"], system.process.env)
    result: dict[str, Any] = orjson.loads(answer.splitlines()[-1])
    return result
