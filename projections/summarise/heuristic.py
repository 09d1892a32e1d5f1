"""The grouped tier: structure extracted from the messages, at no model cost."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import ClassVar

from projections.model import Message, MessageType
from projections.summarise.result import SummaryResult, base_annotations, previous_text

OPENING_TYPES = frozenset({MessageType.QUERY, MessageType.COMMAND, MessageType.PROPOSE})
CLOSING_TYPES = frozenset(
    {
        MessageType.RESPONSE,
        MessageType.DONE,
        MessageType.DECLINE,
        MessageType.FAILURE,
        MessageType.HANDOFF,
    }
)


def iso_instant(value: datetime) -> str:
    """An ISO-8601 UTC instant ending in `Z`, like Java's `Instant.toString()`."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def distinct(values: Iterable[str]) -> list[str]:
    """Non-blank values, stripped, de-duplicated, in first-seen order."""
    seen: dict[str, None] = {}
    for value in values:
        value = value.strip()
        if value:
            seen.setdefault(value, None)
    return list(seen)


def merge_list_annotation(previous: str | None, new: Iterable[str]) -> str:
    """The previous comma-separated value merged with new names, in order, no spaces."""
    old = previous.split(",") if previous else []
    return ",".join(distinct([*old, *new]))


class HeuristicMessageSummariser:
    """Participants, period, topics and commitment changes for a batch of messages.

    Text (each line left out when it would be empty; trailing whitespace stripped):

        <previous text>

        --- Update (N messages) ---
        Participants: alice, bob
        Period: 2025-01-01T10:00:00Z — 2025-01-01T10:05:00Z
        Topics: caching, deployment
        Opened: <correlation_id> by <sender> (<message id>)
        Closed: <correlation_id> <TYPE> by <sender> (<message id>)

    `Opened`/`Closed` are a batch-local view: QUERY, COMMAND and PROPOSE open a commitment;
    RESPONSE, DONE, DECLINE, FAILURE and HANDOFF close (or hand off) one. At most
    `max_commitment_lines` of each are listed, then `Opened: … and N more`.

    An empty batch returns `previous` itself, or an empty summary.

    Annotations: previous ones, plus `tier=grouped`, `itemCount` (this batch), and the
    accumulated `participants` and `topics` (comma-separated, no spaces, each only when
    non-empty).
    """

    tier: ClassVar[str] = "grouped"

    def __init__(self, max_commitment_lines: int = 10) -> None:
        if max_commitment_lines < 0:
            raise ValueError("max_commitment_lines must be >= 0")
        self._max_commitment_lines = max_commitment_lines

    async def summarise(
        self, items: list[Message], previous: SummaryResult | None = None
    ) -> SummaryResult:
        if not items:
            return previous if previous is not None else SummaryResult("")

        participants = distinct(m.sender for m in items)
        topics = distinct(m.topic for m in items)

        lines = [f"--- Update ({len(items)} messages) ---"]
        if participants:
            lines.append(f"Participants: {', '.join(participants)}")
        first, last = items[0].created_at, items[-1].created_at
        lines.append(f"Period: {iso_instant(first)} — {iso_instant(last)}")
        if topics:
            lines.append(f"Topics: {', '.join(topics)}")
        lines.extend(self._commitment_lines(items))

        before = previous_text(previous)
        text = (before + "\n\n" if before else "") + "\n".join(lines)

        annotations = base_annotations(previous)
        annotations["tier"] = self.tier
        annotations["itemCount"] = str(len(items))
        merged_participants = merge_list_annotation(annotations.get("participants"), participants)
        if merged_participants:
            annotations["participants"] = merged_participants
        merged_topics = merge_list_annotation(annotations.get("topics"), topics)
        if merged_topics:
            annotations["topics"] = merged_topics
        return SummaryResult(text.rstrip(), annotations)

    def _commitment_lines(self, items: list[Message]) -> list[str]:
        opened: list[str] = []
        closed: list[str] = []
        for m in items:
            if not m.correlation_id:
                continue
            if m.type in OPENING_TYPES:
                opened.append(f"Opened: {m.correlation_id} by {m.sender} ({m.id})")
            elif m.type in CLOSING_TYPES:
                closed.append(f"Closed: {m.correlation_id} {m.type.value} by {m.sender} ({m.id})")
        return [*self._capped(opened, "Opened"), *self._capped(closed, "Closed")]

    def _capped(self, lines: list[str], label: str) -> list[str]:
        limit = self._max_commitment_lines
        if len(lines) <= limit:
            return lines
        return [*lines[:limit], f"{label}: … and {len(lines) - limit} more"]
