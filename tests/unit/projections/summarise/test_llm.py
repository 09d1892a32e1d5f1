"""The LLM tier's interface: the token estimate, and the one signal for a bad answer."""

from __future__ import annotations

from projections.errors import ChorusError
from projections.summarise.llm import LlmError, UnusableAnswer, estimate_tokens


def test_tokens_are_about_four_characters_rounded_up() -> None:
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_an_unusable_answer_is_an_llm_failure_a_caller_falls_back_on() -> None:
    error = UnusableAnswer("recap is empty after cleaning")
    assert isinstance(error, LlmError) and isinstance(error, ChorusError)
    assert not isinstance(error, ValueError)  # a bug's ValueError is never mistaken for it
