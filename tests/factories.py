"""Valid multi-party conversations with commitment lifecycles, for tests."""

from __future__ import annotations

import random
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from projections.channel import step
from projections.commitments import CommitmentProjection
from projections.model import ActorType, Message, MessageType
from projections.overview import ChannelOverviewProjection
from projections.projection import Folded

AGENTS = ["planner", "coder", "reviewer", "tester"]


def worker_states(messages: Iterable[Message]) -> dict[str, Any]:
    """The built-in projections' states after one channel's messages (log order), as the
    worker's shared step leaves them (the overview's open count joined in)."""
    projections: list[Any] = [CommitmentProjection(), ChannelOverviewProjection()]
    stored: dict[str, Folded | None] = {}
    for offset, message in enumerate(messages):
        steps = step(projections, stored, message, offset)
        stored = {done.projection.name: done.folded for done in steps}
    return {name: folded.state for name, folded in stored.items() if folded is not None}


def conversation(channels: list[str], count: int, seed: int = 7) -> list[Message]:
    """`count` messages spread over `channels`, in log order per channel.

    Requests open commitments that later get acknowledged, fulfilled, declined, failed or
    handed off, so every commitment rule is exercised.
    """
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    open_requests: dict[str, list[tuple[str, str, MessageType]]] = {c: [] for c in channels}
    messages: list[Message] = []
    for index in range(count):
        channel = rng.choice(channels)
        sender = rng.choice(AGENTS)
        at = start + timedelta(seconds=index * 3)
        pending = open_requests[channel]
        roll = rng.random()
        base = {"id": f"m{index:05d}", "channel": channel, "sender": sender, "created_at": at}
        if pending and roll < 0.5:
            request_id, correlation_id, kind = pending.pop(rng.randrange(len(pending)))
            reply = rng.choice(
                [
                    MessageType.STATUS,
                    MessageType.DONE,
                    MessageType.RESPONSE,
                    MessageType.DECLINE,
                    MessageType.FAILURE,
                    MessageType.HANDOFF,
                ]
            )
            extra: dict[str, object] = {
                "type": reply,
                "in_reply_to": request_id,
                "correlation_id": correlation_id,
                "content": f"{reply.value.lower()} on {correlation_id}",
            }
            if reply is MessageType.HANDOFF:
                extra["target"] = f"role:{rng.choice(AGENTS)}"
            if reply in (MessageType.STATUS, MessageType.HANDOFF):
                pending.append((request_id, correlation_id, kind))
            messages.append(Message.model_validate({**base, **extra}))
        elif roll < 0.8:
            kind = rng.choice([MessageType.QUERY, MessageType.COMMAND])
            correlation_id = f"c{index:05d}"
            messages.append(
                Message.model_validate(
                    {
                        **base,
                        "type": kind,
                        "correlation_id": correlation_id,
                        "target": f"role:{rng.choice(AGENTS)}",
                        "content": f"please handle {index}",
                        "topic": rng.choice(["design", "build", "release"]),
                    }
                )
            )
            pending.append((f"m{index:05d}", correlation_id, kind))
        elif roll < 0.9:
            messages.append(
                Message.model_validate(
                    {
                        **base,
                        "type": MessageType.EVENT,
                        "actor_type": ActorType.SYSTEM,
                        "payload": {"kind": "typing"},
                    }
                )
            )
        else:
            messages.append(
                Message.model_validate(
                    {
                        **base,
                        "type": MessageType.STATUS,
                        "actor_type": ActorType.HUMAN,
                        "content": f"note {index}",
                    }
                )
            )
    return messages


def numbered(
    n: int,
    kind: MessageType = MessageType.STATUS,
    *,
    start: datetime,
    every: timedelta,
    **fields: object,
) -> Message:
    """Message n of channel team/plan, sent n × `every` after `start`: the planner saying
    "note n" unless `fields` say otherwise."""
    return Message(
        id=f"m{n}",
        channel="team/plan",
        sender=str(fields.pop("sender", "planner")),
        type=kind,
        content=str(fields.pop("content", f"note {n}")),
        created_at=start + n * every,
        **fields,  # type: ignore[arg-type]
    )
