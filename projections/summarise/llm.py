"""The chat-completion client interface the LLM tier talks to.

Implemented over HTTP by `streams.llm.client.OpenAIChatClient`; tests use in-process fakes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from projections.errors import ChorusError


class LlmError(ChorusError):
    """The model could not produce a completion. Messages never contain credentials."""


class UnusableAnswer(LlmError):
    """The model answered, but its answer cannot be used (empty, over budget, echoing the
    prompt, copying the input): summaries fall back to the digest, recaps retry. The one
    signal for it, so a bug elsewhere (a ValueError) is never mistaken for a bad answer."""


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: int


class ChatClient(Protocol):
    """One system + user prompt in, one completion out. Failures raise `LlmError`."""

    @property
    def model(self) -> str: ...

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion: ...


def estimate_tokens(text: str) -> int:
    """A rough token count, about four characters a token, rounded up."""
    return (len(text) + 3) // 4
