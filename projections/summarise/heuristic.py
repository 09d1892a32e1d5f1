"""The grouped tier: structure extracted from the messages, at no model cost."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import ClassVar

from projections.model import Message
from projections.summarise.result import SummaryResult, base_annotations, previous_text


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
    """Participants, period and topics of a batch of messages.

    Text (each line left out when it would be empty; trailing whitespace stripped):

        <previous text>
        --- Update (N messages) ---
        Participants: alice, bob
        Period: 2025-01-01T10:00:00Z — 2025-01-01T10:05:00Z
        Topics: caching, deployment

    It says nothing of commitments: what is open or ended is the commitments projection's
    to say (the summaries stage renders it from that state).

    An empty batch returns `previous` itself, or an empty summary.

    Annotations: previous ones, plus `tier=grouped`, `itemCount` (this batch), and the
    accumulated `participants` and `topics` (comma-separated, no spaces, each only when
    non-empty).
    """

    tier: ClassVar[str] = "grouped"

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

        before = previous_text(previous)
        text = (before.rstrip() + "\n" if before else "") + "\n".join(lines)

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
