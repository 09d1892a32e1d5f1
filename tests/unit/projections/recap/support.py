"""Helpers the recap tests share: a clock, a status fold, messages of any type."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from projections.model import ActorType, Message, MessageType
from projections.recap import (
    RecapStatus,
    on_message,
)

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
DEBOUNCE = 3.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def msg(
    status: RecapStatus, offset: int, seconds: float, *, conversation: bool = True
) -> RecapStatus:
    return on_message(
        status,
        offset=offset,
        at=at(seconds),
        debounce=DEBOUNCE,
        changes_conversation=conversation,
    )


def make(
    type_: MessageType = MessageType.RESPONSE,
    *,
    sender: str = "planner",
    actor: ActorType = ActorType.AGENT,
    content: str | None = "hello",
    payload: dict[str, Any] | None = None,
) -> Message:
    extra: dict[str, Any] = {}
    if type_ in (MessageType.QUERY, MessageType.COMMAND, MessageType.PROPOSE):
        extra["correlation_id"] = "c1"
    if type_ in (
        MessageType.RESPONSE,
        MessageType.DONE,
        MessageType.DECLINE,
        MessageType.FAILURE,
        MessageType.HANDOFF,
    ):
        extra.update(correlation_id="c1", in_reply_to="m0")
    if type_ is MessageType.HANDOFF:
        extra["target"] = "role:reviewer"
    return Message(
        channel="team/alpha",
        sender=sender,
        type=type_,
        actor_type=actor,
        content=content,
        payload=payload,
        **extra,
    )
