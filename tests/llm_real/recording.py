"""What the summary stage did with a real model, batch by batch (for test_real_meeting).

`RecordingClient` wraps the chat client and keeps every call; `RecordingSummariser` wraps
the stage's summariser and keeps every batch's summary with the calls it made;
`degenerate` names each published summary that must not be one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bench.summary_quality import meetings
from projections.model import Message
from projections.summarise import (
    FALLBACK_REASON,
    ChatClient,
    Completion,
    ContentSummariser,
    LlmContentSummariser,
    LlmError,
    SummaryResult,
    estimate_tokens,
)
from projections.summarise.synthesised import PROMPT_MARKERS


@dataclass(frozen=True)
class Call:
    """One LLM call as the summariser saw it: the completion, or why there was none."""

    latency_ms: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    answer: str | None = None
    error: str | None = None


class RecordingClient:
    """The `ChatClient` the summariser gets: passes each call on and keeps what came back."""

    def __init__(self, inner: ChatClient) -> None:
        self.inner = inner
        self.calls: list[Call] = []

    @property
    def model(self) -> str:
        return self.inner.model

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        started = time.monotonic()
        try:
            completion = await self.inner.complete(system, user, max_tokens)
        except LlmError as error:
            self.calls.append(Call(int((time.monotonic() - started) * 1000), error=str(error)))
            raise
        self.calls.append(
            Call(
                completion.latency_ms,
                completion.prompt_tokens,
                completion.completion_tokens,
                answer=completion.text,
            )
        )
        return completion


@dataclass(frozen=True)
class BatchOutcome:
    """One batch: its size, the LLM calls it made and the summary the stage would publish."""

    items: int
    calls: list[Call]
    result: SummaryResult

    @property
    def accepted(self) -> bool:
        """The model's answer is the summary (the large tier did not fall back)."""
        return bool(self.calls) and self.result.annotations.get("tier") == LlmContentSummariser.tier

    @property
    def fallback_reason(self) -> str | None:
        if not self.calls or self.accepted:
            return None
        return self.result.annotations.get(FALLBACK_REASON, "unknown")


@dataclass
class RecordingSummariser:
    """Wraps the stage's summariser: keeps every batch's summary and the calls it made."""

    inner: ContentSummariser[Message]
    client: RecordingClient
    batches: list[BatchOutcome] = field(default_factory=list)

    async def summarise(
        self, items: list[Message], previous: SummaryResult | None = None
    ) -> SummaryResult:
        before = len(self.client.calls)
        result = await self.inner.summarise(items, previous)
        self.batches.append(BatchOutcome(len(items), self.client.calls[before:], result))
        return result


Meeting = tuple[str, list[tuple[str, str]], str]


def selected(split: str, count: int, shortest: bool = False) -> list[Meeting]:
    """The first `count` meetings of the split by name, or with `shortest` the `count` with
    the fewest turns (then by name): the fewest LLM calls."""
    if not shortest:
        return meetings(split, count)
    return sorted(meetings(split), key=lambda m: (len(m[1]), m[0]))[:count]


def degenerate(batches: list[BatchOutcome], budget_tokens: int) -> list[str]:
    """Why each published summary that must not be one is wrong (empty: none is)."""
    problems: list[str] = []
    for index, batch in enumerate(batches):
        text = batch.result.text
        size = estimate_tokens(text)
        if size > budget_tokens:
            problems.append(f"batch {index}: over budget ({size} > {budget_tokens} tokens)")
        lowered = text.lower()
        problems += [
            f"batch {index}: carries the prompt marker {marker!r}"
            for marker in PROMPT_MARKERS
            if marker.lower() in lowered
        ]
        if batch.fallback_reason and any(
            call.answer is not None and call.answer.strip() == text.strip() for call in batch.calls
        ):
            problems.append(f"batch {index}: is the answer the tier rejected")
    return problems
