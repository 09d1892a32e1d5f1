"""Real conversations for the demo, the bench and the tests: the one loader.

From ../shared/data (QMSum meetings with their human summaries, #ubuntu IRC logs) when it is
beside the repository (or at `CHORUS_SHARED_DATA`), else from the `chitchat-dataset`
package. Nothing is copied into the repository.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import orjson

from projections.model import ActorType, Message, MessageType

REPO = Path(__file__).resolve().parent.parent


class Turn(NamedTuple):
    speaker: str
    text: str


@dataclass(frozen=True)
class Conversation:
    name: str
    source: str
    turns: list[Turn]
    # The human summary of the whole conversation, where the data set has one (QMSum).
    reference: str | None = None


def shared_data_dir() -> Path | None:
    configured = os.environ.get("CHORUS_SHARED_DATA")
    candidate = Path(configured) if configured else REPO.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


_MARKUP = re.compile(r"\{\w+\}")


def _clean(text: str) -> str:
    """QMSum marks disfluencies and vocal sounds as {disfmarker}, {vocalsound}, ..."""
    return " ".join(_MARKUP.sub(" ", text).split())


def _slug(text: str) -> str:
    cleaned = "".join(ch if ch.isalnum() else "-" for ch in text.lower())
    return "-".join(part for part in cleaned.split("-") if part)[:80] or "conversation"


def qmsum_meetings(root: Path, split: str = "*", *, raw: bool = False) -> Iterator[Conversation]:
    """QMSum meetings of `split` (train, val; all by default). `raw` keeps the transcripts'
    {disfmarker}-style markup, as a stream of spoken turns would carry it. The reference is
    the answer to the meeting's general query ("Summarize the whole meeting." in most)."""
    for path in sorted((root / "qmsum").glob(f"{split}/*.json")):
        data = orjson.loads(path.read_bytes())
        turns = []
        for turn in data.get("meeting_transcripts", []):
            content = str(turn.get("content") or "")
            text = content.strip() if raw else _clean(content)
            if _clean(content):
                turns.append(Turn(_slug(str(turn.get("speaker") or "someone")), text))
        general = data.get("general_query_list") or [{}]
        reference = general[0].get("answer") or None
        source = f"QMSum {path.parent.name}/{path.name}"
        yield Conversation(path.stem, source, turns, reference)


_IRC_LINE = re.compile(r"^\[\d\d:\d\d\] <([^>]+)> (.+)$")


def ubuntu_irc_logs(root: Path) -> Iterator[Conversation]:
    """Days of #ubuntu IRC logs, one conversation each."""
    for path in sorted((root / "ubuntu-irc").glob("*/*.ascii.txt")):
        turns = []
        for line in path.read_text("utf-8", errors="replace").splitlines():
            match = _IRC_LINE.match(line)
            if match:
                turns.append(Turn(match.group(1), match.group(2).strip()))
        if turns:
            name = path.name.split(".")[0] + "-" + path.parent.name
            yield Conversation(f"irc-{name.lower()}", f"ubuntu-irc {path.name}", turns)


def chitchat_conversations() -> Iterator[Conversation]:
    import chitchat_dataset

    for key, convo in chitchat_dataset.Dataset().items():
        speakers: dict[str, str] = {}
        turns = []
        for group in convo["messages"]:
            for line in group:
                name = speakers.setdefault(line["sender"], f"person-{len(speakers) + 1}")
                turns.append(Turn(name, " ".join(line["text"].split())))
        yield Conversation(str(key)[:8], "chitchat-dataset", turns)


def conversations() -> Iterator[Conversation]:
    root = shared_data_dir()
    yield from qmsum_meetings(root) if root else chitchat_conversations()


def as_messages(
    conversation: Conversation, channel: str, start: datetime | None = None
) -> list[Message]:
    """Questions become QUERYs; the next speaker's turn answers them as a RESPONSE."""
    at = start or datetime(2026, 1, 1, 9, tzinfo=UTC)
    messages: list[Message] = []
    open_question: Message | None = None
    for index, turn in enumerate(conversation.turns):
        created = at + timedelta(seconds=5 * index)
        base = {
            "channel": channel,
            "sender": turn.speaker,
            "actor_type": ActorType.HUMAN,
            "content": turn.text,
            "created_at": created,
        }
        if open_question is not None and turn.speaker != open_question.sender:
            message = Message.model_validate(
                {
                    **base,
                    "type": MessageType.RESPONSE,
                    "in_reply_to": open_question.id,
                    "correlation_id": open_question.correlation_id,
                }
            )
            open_question = None
        elif turn.text.endswith("?"):
            message = Message.model_validate(
                {
                    **base,
                    "type": MessageType.QUERY,
                    "correlation_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{channel}/{index}")),
                }
            )
            open_question = message
        else:
            message = Message.model_validate({**base, "type": MessageType.STATUS})
        messages.append(message)
    return messages
