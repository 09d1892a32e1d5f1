"""Benchmark messages built from real conversations (never copied into the repository).

Sources, in order: ../shared/data (QMSum meetings and #ubuntu IRC logs) when it is there,
else the `chitchat-dataset` package. Each channel replays one conversation from a random
turn. A message is one turn (`merged=False`: what the wake-latency client sends), or
consecutive turns merged until its encoded size reaches a target drawn between 0.5 and
2 KB (the throughput data set). About one message in five is a request or its reply: a
turn opens a QUERY (a question) or a COMMAND with a correlation id now and then, and a
later turn by someone else answers it (RESPONSE or DONE), so the commitments projection
does real work too.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from projections.model import Message, MessageType, encode_message
from streams.conversations import (
    Conversation,
    chitchat_conversations,
    qmsum_meetings,
    shared_data_dir,
    ubuntu_irc_logs,
)

MIN_BYTES = 512
MAX_BYTES = 2048
# Bytes of JSON around the content (id, channel, sender, type, timestamps...), measured.
ENVELOPE_BYTES = 330
# A single turn longer than this is cut: a few QMSum monologues run to pages.
MAX_TURN_CHARS = 4000
# With no request open, the chance a turn opens one; with one open, the chance that a turn
# by another speaker answers it. Together about one message in five is one or the other.
REQUEST_CHANCE = 0.13
REPLY_CHANCE = 0.5


def load_conversations(meetings_only: bool = False) -> tuple[str, list[Conversation]]:
    """(source description, conversations), from the project's one loader."""
    root = shared_data_dir()
    if root is not None:
        meetings = list(qmsum_meetings(root))
        if meetings and meetings_only:
            return "../shared/data (qmsum meetings)", meetings
        found = [*meetings, *ubuntu_irc_logs(root)]
        if found:
            return "../shared/data (qmsum meetings + ubuntu-irc)", found
    return "chitchat-dataset (PyPI)", list(chitchat_conversations())


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


@dataclass(frozen=True)
class OpenRequest:
    message_id: str
    correlation_id: str
    sender: str
    kind: MessageType


class ChannelStream:
    """An endless sequence of messages for one channel, from one conversation (wrapping)."""

    def __init__(
        self, channel: str, conversation: Conversation, rng: random.Random, merged: bool
    ) -> None:
        self.channel = channel
        self.conversation = conversation
        self.rng = rng
        self.merged = merged
        self.position = rng.randrange(len(conversation.turns))
        self.open: OpenRequest | None = None

    def _turn(self) -> tuple[str, str]:
        speaker, text = self.conversation.turns[self.position]
        self.position = (self.position + 1) % len(self.conversation.turns)
        return speaker, text[:MAX_TURN_CHARS]

    def _content(self) -> tuple[str, str]:
        """(speaker, content): one turn, or turns merged up to a drawn size."""
        speaker, text = self._turn()
        if not self.merged:
            return speaker, text
        target = self.rng.randint(MIN_BYTES, MAX_BYTES - 64)
        lines = [f"{speaker}: {text}"]
        while ENVELOPE_BYTES + sum(len(line) + 1 for line in lines) < target:
            other, more = self._turn()
            lines.append(f"{other}: {more}")
        return speaker, "\n".join(lines)[: MAX_BYTES - 16 - ENVELOPE_BYTES]

    def _kind(self, message_id: str, sender: str, content: str) -> dict[str, Any]:
        """The message's type and request links: a reply, a new request, or a status."""
        opened = self.open
        if opened is not None and opened.sender != sender and self.rng.random() < REPLY_CHANCE:
            self.open = None
            reply = MessageType.RESPONSE if opened.kind is MessageType.QUERY else MessageType.DONE
            return {
                "type": reply,
                "in_reply_to": opened.message_id,
                "correlation_id": opened.correlation_id,
            }
        if opened is None and self.rng.random() < REQUEST_CHANCE:
            kind = MessageType.QUERY if content.rstrip().endswith("?") else MessageType.COMMAND
            self.open = OpenRequest(message_id, f"r-{message_id}", sender, kind)
            return {"type": kind, "correlation_id": self.open.correlation_id}
        return {"type": MessageType.STATUS}

    def next(self, at: datetime, message_id: str) -> Message:
        speaker, content = self._content()
        sender = _slug(speaker)[:40]
        message = Message.model_validate(
            {
                "id": message_id,
                "channel": self.channel,
                "sender": sender,
                "actor_type": "HUMAN",
                "content": content,
                "topic": self.conversation.name,
                "created_at": at,
                **self._kind(message_id, sender, content),
            }
        )
        if not self.merged:
            return message
        size = len(encode_message(message))
        while size < MIN_BYTES:  # the envelope was smaller than estimated: one more turn
            other, more = self._turn()
            message = message.model_copy(update={"content": f"{message.content}\n{other}: {more}"})
            size = len(encode_message(message))
        if size > MAX_BYTES:
            cut = str(message.content)[: -(size - MAX_BYTES + 8)]
            message = message.model_copy(update={"content": cut})
        return message


def message_stream(
    conversations: list[Conversation],
    channels: int,
    seed: int = 7,
    tag: str = "bench",
    merged: bool = True,
) -> Iterator[Message]:
    """Endless messages spread at random over `channels` channels (`<tag>/c000000`...),
    each channel a real conversation."""
    rng = random.Random(seed)
    streams = [
        ChannelStream(
            f"{tag}/c{i:06d}",
            conversations[i % len(conversations)],
            random.Random(seed * 7919 + i),
            merged,
        )
        for i in range(channels)
    ]
    start = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    index = 0
    while True:
        stream = streams[rng.randrange(len(streams))]
        yield stream.next(start + timedelta(milliseconds=index * 50), f"{tag}-{index:09d}")
        index += 1


def encoded_messages(
    conversations: list[Conversation],
    count: int,
    channels: int,
    seed: int = 7,
    tag: str = "bench",
    merged: bool = True,
) -> list[tuple[bytes, bytes]]:
    """`count` (key, value) records, keyed by channel as producers must."""
    out = []
    for message in message_stream(conversations, channels, seed, tag, merged):
        out.append((message.channel.encode(), encode_message(message)))
        if len(out) >= count:
            break
    return out


def size_stats(records: list[tuple[bytes, bytes]]) -> dict[str, float]:
    sizes = sorted(len(value) for _, value in records)
    return {"min": sizes[0], "p50": sizes[len(sizes) // 2], "max": sizes[-1]}
