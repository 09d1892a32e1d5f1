"""What the summariser tests share: messages, fake and failing chat clients."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from projections.model import Message, MessageType
from projections.summarise import (
    Completion,
    SummaryResult,
)

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def msg(
    sender: str,
    content: str | None = "hello",
    *,
    topic: str = "general",
    type: MessageType = MessageType.STATUS,
    at: int = 0,
    id: str | None = None,
    correlation_id: str | None = None,
    payload: dict[str, Any] | None = None,
) -> Message:
    fields: dict[str, Any] = {
        "channel": "team/dev",
        "sender": sender,
        "type": type,
        "content": content,
        "topic": topic,
        "created_at": T0 + timedelta(seconds=at),
        "correlation_id": correlation_id,
        "payload": payload,
    }
    if id is not None:
        fields["id"] = id
    if type in {
        MessageType.RESPONSE,
        MessageType.DONE,
        MessageType.DECLINE,
        MessageType.FAILURE,
        MessageType.HANDOFF,
    }:
        fields["in_reply_to"] = "m-request"
    if type is MessageType.HANDOFF:
        fields["target"] = "role:reviewer"
    return Message(**fields)


class FakeChatClient:
    def __init__(self, reply: str = "Updated.", error: Exception | None = None) -> None:
        self.model = "fake-model"
        self.reply = reply
        self.error = error
        self.calls: list[tuple[str, str, int]] = []

    @property
    def last_system(self) -> str:
        return self.calls[-1][0]

    @property
    def last_user(self) -> str:
        return self.calls[-1][1]

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        self.calls.append((system, user, max_tokens))
        if self.error is not None:
            raise self.error
        return Completion(self.reply, "fake-model-v1", 120, 7, 42)


class Recording:
    """A stub tier that records what it was given and names itself in the text."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tier = name
        self.calls: list[tuple[list[str], SummaryResult | None]] = []

    async def summarise(
        self, items: list[str], previous: SummaryResult | None = None
    ) -> SummaryResult:
        self.calls.append((items, previous))
        return SummaryResult(self.name, {"tier": self.name})


class Failing:
    tier = "synthesised"

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def summarise(
        self, items: list[Message], previous: SummaryResult | None = None
    ) -> SummaryResult:
        raise self.error


def identity(item: str) -> str:
    return item


def conversation(count: int, start: int = 0) -> list[Message]:
    senders = ["alice", "bob", "carol", "dave"]
    topics = ["caching", "deployment", "testing"]
    return [
        msg(senders[i % 4], f"message {i}", topic=topics[i % 3], at=start + i) for i in range(count)
    ]
