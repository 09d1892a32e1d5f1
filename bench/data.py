"""Benchmark messages built from real conversations (never copied into the repository).

Sources, in order: ../shared/data (QMSum meetings and #ubuntu IRC logs) when it is there,
else the `chitchat-dataset` package. Consecutive turns of one conversation are merged into one
message until its encoded size reaches a target drawn between 0.5 and 2 KB, so every message
carries real text. A turn that ends with a question opens a commitment (QUERY with a
correlation id) that the next message, from someone else, answers (RESPONSE), so the
commitments projection does real work too.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import orjson

from projections.model import Message, encode_message
from streams.conversations import (
    Conversation,
    chitchat_conversations,
    qmsum_meetings,
    shared_data_dir,
    ubuntu_irc_logs,
)

MIN_BYTES = 512
MAX_BYTES = 2048
# The JSON envelope (id, channel, sender, type, timestamps...) around the content.


def load_conversations() -> tuple[str, list[Conversation]]:
    """(source description, conversations), from the project's one loader."""
    root = shared_data_dir()
    if root is not None:
        found = [*qmsum_meetings(root), *ubuntu_irc_logs(root)]
        if found:
            return "../shared/data (qmsum meetings + ubuntu-irc)", found
    return "chitchat-dataset (PyPI)", list(chitchat_conversations())


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


class ChannelStream:
    """An endless sequence of messages for one channel, from one conversation (wrapping)."""

    def __init__(self, channel: str, conversation: Conversation, rng: random.Random) -> None:
        self.channel = channel
        self.conversation = conversation
        self.rng = rng
        self.position = rng.randrange(len(conversation.turns))
        self.sequence = 0
        self.open_query: tuple[str, str, str] | None = None  # (id, correlation, sender)

    def _turn(self) -> tuple[str, str]:
        turn = self.conversation.turns[self.position]
        self.position = (self.position + 1) % len(self.conversation.turns)
        return turn

    def next(self, at: datetime, index: int) -> Message:
        target = self.rng.randint(MIN_BYTES, MAX_BYTES - 64)
        speaker, text = self._turn()
        lines = [f"{speaker}: {text}"]
        envelope = 330  # bytes of JSON around the content, measured on real messages
        while envelope + sum(len(x) + 1 for x in lines) < target:
            other, more = self._turn()
            lines.append(f"{other}: {more}")
        content = "\n".join(lines)
        if len(content) + envelope > MAX_BYTES - 16:
            content = content[: MAX_BYTES - 16 - envelope]
        sender = _slug(speaker)[:40]
        record: dict[str, object] = {
            "id": f"b{index:09d}",
            "channel": self.channel,
            "sender": sender,
            "actor_type": "HUMAN",
            "content": content,
            "topic": self.conversation.name,
            "created_at": at,
        }
        if self.open_query is not None and self.open_query[2] != sender:
            query_id, correlation, _ = self.open_query
            record.update(type="RESPONSE", in_reply_to=query_id, correlation_id=correlation)
            self.open_query = None
        elif content.rstrip().endswith("?"):
            record.update(type="QUERY", correlation_id=f"q{index:09d}")
            self.open_query = (str(record["id"]), f"q{index:09d}", sender)
        else:
            record["type"] = "STATUS"
        self.sequence += 1
        message = Message.model_validate(record)
        size = len(encode_message(message))
        while size < MIN_BYTES:  # the envelope was smaller than estimated: one more turn
            other, more = self._turn()
            content = f"{content}\n{other}: {more}"
            message = message.model_copy(update={"content": content})
            size = len(encode_message(message))
        if size > MAX_BYTES:
            message = message.model_copy(update={"content": content[: -(size - MAX_BYTES + 8)]})
        return message


def channel_names(count: int, tag: str = "bench") -> list[str]:
    return [f"{tag}/c{i:06d}" for i in range(count)]


def message_stream(
    conversations: list[Conversation], channels: int, seed: int = 7, tag: str = "bench"
) -> Iterator[Message]:
    """Endless messages spread at random over `channels` channels, each a real conversation."""
    rng = random.Random(seed)
    streams = [
        ChannelStream(name, conversations[i % len(conversations)], random.Random(seed * 7919 + i))
        for i, name in enumerate(channel_names(channels, tag))
    ]
    start = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    index = 0
    while True:
        stream = streams[rng.randrange(len(streams))]
        yield stream.next(start + timedelta(milliseconds=index * 50), index)
        index += 1


def encoded_messages(
    conversations: list[Conversation], count: int, channels: int, seed: int = 7, tag: str = "bench"
) -> list[tuple[bytes, bytes]]:
    """`count` (key, value) records, keyed by channel as producers must."""
    out = []
    for message in message_stream(conversations, channels, seed, tag):
        out.append((message.channel.encode(), encode_message(message)))
        if len(out) >= count:
            break
    return out


def size_stats(records: list[tuple[bytes, bytes]]) -> dict[str, float]:
    sizes = sorted(len(value) for _, value in records)
    return {
        "min": sizes[0],
        "p50": sizes[len(sizes) // 2],
        "max": sizes[-1],
        "mean": sum(sizes) / len(sizes),
    }


if __name__ == "__main__":  # a quick look at the generated messages
    source, convs = load_conversations()
    records = encoded_messages(convs, 2000, 50)
    print(source, len(convs), "conversations", size_stats(records))
    print(orjson.loads(records[0][1]))
