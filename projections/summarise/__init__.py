"""Summarisers: fold batches of channel messages into a running summary.

Pure apart from the LLM call; no Kafka or Faust here. See `result` for the annotation
contract every summariser keeps.
"""

from projections.summarise.batches import batch, summarise_batches
from projections.summarise.defaults import NO_LLM_REASON, default_summariser
from projections.summarise.heuristic import HeuristicMessageSummariser
from projections.summarise.llm import ChatClient, Completion, LlmError, estimate_tokens
from projections.summarise.render import render_message
from projections.summarise.result import ContentSummariser, SummaryResult
from projections.summarise.synthesised import (
    APPEND_SYSTEM_PROMPT,
    EDIT_SYSTEM_PROMPT,
    LlmContentSummariser,
    Prompt,
    SummaryMode,
    neutralise_delimiters,
)
from projections.summarise.tiered import (
    FALLBACK_FROM,
    FALLBACK_REASON,
    FallbackSummariser,
    FixedFallbackSummariser,
    TieredContentSummariser,
)
from projections.summarise.verbatim import VerbatimContentSummariser

__all__ = [
    "APPEND_SYSTEM_PROMPT",
    "EDIT_SYSTEM_PROMPT",
    "FALLBACK_FROM",
    "FALLBACK_REASON",
    "NO_LLM_REASON",
    "ChatClient",
    "Completion",
    "ContentSummariser",
    "FallbackSummariser",
    "FixedFallbackSummariser",
    "HeuristicMessageSummariser",
    "LlmContentSummariser",
    "LlmError",
    "Prompt",
    "SummaryMode",
    "SummaryResult",
    "TieredContentSummariser",
    "VerbatimContentSummariser",
    "batch",
    "default_summariser",
    "estimate_tokens",
    "neutralise_delimiters",
    "render_message",
    "summarise_batches",
]
