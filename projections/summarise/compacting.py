"""The budget guard around the tiers: a summary over the budget is rewritten by the digest."""

from __future__ import annotations

from projections.model import Message
from projections.summarise.digest import DigestSummariser
from projections.summarise.llm import estimate_tokens
from projections.summarise.result import ContentSummariser, SummaryResult

# Set when the digest rewrote a tier's text that was over the budget: that tier's name.
COMPACTED_FROM = "compactedFrom"


class CompactingSummariser:
    """Runs `inner`; a text over the digest's budget is rewritten by the digest instead.

    The digest runs on the same batch and previous summary, so what the longer text said is
    not lost: the previous text's foreign lines join its pool. The result is annotated
    `compactedFrom=<inner result's tier>`; a result within budget clears that key.
    """

    def __init__(self, inner: ContentSummariser[Message], digest: DigestSummariser) -> None:
        self.inner = inner
        self.digest = digest

    async def summarise(
        self, items: list[Message], previous: SummaryResult | None = None
    ) -> SummaryResult:
        result = await self.inner.summarise(items, previous)
        if estimate_tokens(result.text) <= self.digest.max_tokens:
            if COMPACTED_FROM not in result.annotations:
                return result
            kept = {k: v for k, v in result.annotations.items() if k != COMPACTED_FROM}
            return SummaryResult(result.text, kept)
        tier = result.annotations.get("tier", "unknown")
        compacted = self.digest.digest(items, previous)
        return SummaryResult(compacted.text, {**compacted.annotations, COMPACTED_FROM: tier})
