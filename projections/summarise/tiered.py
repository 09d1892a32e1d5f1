"""Composition: choose a tier by batch size, and fall back when a tier fails."""

from __future__ import annotations

import logging
from typing import Generic, TypeVar

from projections.summarise.llm import LlmError
from projections.summarise.result import ContentSummariser, SummaryResult
from projections.text.lines import cut

T = TypeVar("T")

log = logging.getLogger(__name__)

FALLBACK_FROM = "fallbackFrom"
FALLBACK_REASON = "fallbackReason"
MAX_REASON_CHARS = 200


def tier_of(summariser: object) -> str:
    """A summariser's `tier` attribute, or its class name."""
    tier = getattr(summariser, "tier", None)
    return tier if isinstance(tier, str) and tier else type(summariser).__name__


class TieredContentSummariser(Generic[T]):
    """Size ≤ small_threshold → small; ≤ medium_threshold → medium; otherwise large.

    Bounds are inclusive and an empty batch goes to small. `previous` is passed through as
    given.
    """

    def __init__(
        self,
        small: ContentSummariser[T],
        medium: ContentSummariser[T],
        large: ContentSummariser[T],
        small_threshold: int,
        medium_threshold: int,
    ) -> None:
        if small_threshold < 1:
            raise ValueError(f"small_threshold must be >= 1, got {small_threshold}")
        if medium_threshold < small_threshold:
            raise ValueError(
                f"medium_threshold ({medium_threshold}) must be >= small_threshold "
                f"({small_threshold})"
            )
        self.small = small
        self.medium = medium
        self.large = large
        self.small_threshold = small_threshold
        self.medium_threshold = medium_threshold

    def select(self, size: int) -> ContentSummariser[T]:
        if size <= self.small_threshold:
            return self.small
        if size <= self.medium_threshold:
            return self.medium
        return self.large

    async def summarise(
        self, items: list[T], previous: SummaryResult | None = None
    ) -> SummaryResult:
        return await self.select(len(items)).summarise(items, previous)


def short_reason(error: BaseException) -> str:
    """A one-line reason for an annotation: the LlmError text, or `Type: message`."""
    text = str(error) if isinstance(error, LlmError) else f"{type(error).__name__}: {error}"
    text = " ".join(text.split()) or type(error).__name__
    return cut(text, MAX_REASON_CHARS)


class FallbackSummariser(Generic[T]):
    """Runs `primary`; if it raises, runs `fallback` on the same batch and previous summary.

    A fallback result gets `fallbackFrom=<primary tier>` and `fallbackReason=<short reason>`
    on top of the fallback's own annotations. Those two keys belong to this wrapper, so a
    later successful primary run removes them; every other key survives as usual.
    Cancellation is not caught.
    """

    def __init__(self, primary: ContentSummariser[T], fallback: ContentSummariser[T]) -> None:
        self.primary = primary
        self.fallback = fallback
        self.tier = tier_of(primary)

    async def summarise(
        self, items: list[T], previous: SummaryResult | None = None
    ) -> SummaryResult:
        try:
            result = await self.primary.summarise(items, previous)
        except Exception as error:
            reason = short_reason(error)
            log.warning(
                "summariser %s failed (%s); falling back to %s",
                self.tier,
                reason,
                tier_of(self.fallback),
            )
            result = await self.fallback.summarise(items, previous)
            return annotate(result, {FALLBACK_FROM: self.tier, FALLBACK_REASON: reason})
        if FALLBACK_FROM in result.annotations or FALLBACK_REASON in result.annotations:
            kept = {
                k: v
                for k, v in result.annotations.items()
                if k not in (FALLBACK_FROM, FALLBACK_REASON)
            }
            return SummaryResult(result.text, kept)
        return result


class FixedFallbackSummariser(Generic[T]):
    """Always the fallback, annotated as if `tier` had failed for `reason`.

    Used when the preferred tier is not configured (no LLM), so the summary says why it
    was not synthesised.
    """

    def __init__(self, fallback: ContentSummariser[T], tier: str, reason: str) -> None:
        self.fallback = fallback
        self.tier = tier
        self.reason = reason

    async def summarise(
        self, items: list[T], previous: SummaryResult | None = None
    ) -> SummaryResult:
        result = await self.fallback.summarise(items, previous)
        if result is previous:  # nothing happened (an empty batch): leave it alone
            return result
        return annotate(result, {FALLBACK_FROM: self.tier, FALLBACK_REASON: self.reason})


def annotate(result: SummaryResult, extra: dict[str, str]) -> SummaryResult:
    return SummaryResult(result.text, {**result.annotations, **extra})
