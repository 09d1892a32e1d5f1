"""The reference wiring for channel messages."""

from __future__ import annotations

from projections.model import Message
from projections.summarise.heuristic import HeuristicMessageSummariser
from projections.summarise.llm import ChatClient
from projections.summarise.render import render_message
from projections.summarise.result import ContentSummariser
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
) -> ContentSummariser[Message]:
    """≤ small: verbatim `[sender] content`; ≤ medium: heuristic; above: the LLM.

    The LLM tier falls back to the heuristic one when the model fails, so a summary is never
    lost because the LLM is down. With no client the large tier is the heuristic one,
    annotated `fallbackFrom=synthesised`, `fallbackReason=no LLM configured`.
    """
    verbatim = VerbatimContentSummariser(render_message)
    heuristic = HeuristicMessageSummariser()
    large: ContentSummariser[Message]
    if client is None:
        large = FixedFallbackSummariser(heuristic, LlmContentSummariser.tier, NO_LLM_REASON)
    else:
        llm = LlmContentSummariser(
            client,
            render_message,
            mode=mode,
            preamble=preamble,
            context_tokens=context_tokens,
            max_tokens=max_tokens,
        )
        large = FallbackSummariser(llm, heuristic)
    return TieredContentSummariser(verbatim, heuristic, large, small_threshold, medium_threshold)
