"""The verbatim tier: list each item. Cheap and detailed, for small batches."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Generic, TypeVar

from projections.summarise.result import SummaryResult, base_annotations, previous_text

T = TypeVar("T")


class VerbatimContentSummariser(Generic[T]):
    """Previous text, a blank line, then one `- <rendered>` line per item (the summariser
    contract of blocks' VerbatimContentSummariser; a view renders the narrative line by line,
    `projections.context.narrative_lines`).

    Annotations: previous ones, plus `tier=verbatim` and `itemCount` (this batch).
    """

    tier: ClassVar[str] = "verbatim"

    def __init__(self, render: Callable[[T], str]) -> None:
        self._render = render

    async def summarise(
        self, items: list[T], previous: SummaryResult | None = None
    ) -> SummaryResult:
        parts: list[str] = []
        before = previous_text(previous)
        if before:
            parts.append(before.rstrip() + "\n\n")
        parts.append("\n".join(f"- {self._render(item)}" for item in items))
        annotations = base_annotations(previous)
        annotations["tier"] = self.tier
        annotations["itemCount"] = str(len(items))
        return SummaryResult("".join(parts).rstrip(), annotations)
