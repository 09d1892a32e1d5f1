"""The reference wiring for channel messages."""

from __future__ import annotations

from projections.model import Message
from projections.summarise.compacting import CompactingSummariser
from projections.summarise.digest import DigestSummariser
from projections.summarise.llm import ChatClient
from projections.summarise.render import render_message
from projections.summarise.result import SUMMARY_MAX_TOKENS, ContentSummariser
from projections.summarise.synthesised import LlmContentSummariser, SummaryMode
from projections.summarise.tiered import (
    FallbackSummariser,
    FixedFallbackSummariser,
    TieredContentSummariser,
)
from projections.summarise.verbatim import VerbatimContentSummariser

NO_LLM_REASON = "no LLM configured"


def default_summariser(
    client: ChatClient | None,
    small_threshold: int = 3,
    medium_threshold: int = 15,
    *,
    mode: SummaryMode = SummaryMode.EDIT,
    preamble: str | None = None,
    context_tokens: int = 8192,
    max_tokens: int = 512,
    summary_max_tokens: int = SUMMARY_MAX_TOKENS,
) -> ContentSummariser[Message]:
    """≤ small: verbatim `[sender] content`; ≤ medium: the digest; above: the LLM.

    The LLM tier falls back to the digest when the model fails or its answer is unusable
    (see `LlmContentSummariser.summary_max_tokens`), so a summary is never lost because the
    LLM is down. With no client the large tier is the digest, annotated
    `fallbackFrom=synthesised`, `fallbackReason=no LLM configured`. Whatever a tier returns
    is kept within `summary_max_tokens`: a longer text is rewritten by the digest.
    """
    verbatim = VerbatimContentSummariser(render_message)
    digest = DigestSummariser(summary_max_tokens)
    large: ContentSummariser[Message]
    if client is None:
        large = FixedFallbackSummariser(digest, LlmContentSummariser.tier, NO_LLM_REASON)
    else:
        llm = LlmContentSummariser(
            client,
            render_message,
            mode=mode,
            preamble=preamble,
            context_tokens=context_tokens,
            max_tokens=max_tokens,
            summary_max_tokens=summary_max_tokens if mode is SummaryMode.EDIT else None,
        )
        large = FallbackSummariser(llm, digest)
    tiered = TieredContentSummariser(verbatim, digest, large, small_threshold, medium_threshold)
    return CompactingSummariser(tiered, digest)
