"""The summariser and recap LLM tiers against a real model (opt-in: make test-llm).

A 270M base model writes whatever it likes, so these tests check structure (tiers,
annotations, token counts, one-line recaps), never wording.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from projections.model import ActorType, Message, MessageType
from projections.readable import CommitmentView
from projections.summarise import (
    FALLBACK_FROM,
    FALLBACK_REASON,
    LlmContentSummariser,
    SummaryResult,
    default_summariser,
    estimate_tokens,
    render_message,
)
from projections.summarise.result import SUMMARY_MAX_TOKENS
from streams.llm.client import OpenAIChatClient
from streams.worker.stages.recaps import write_recap
from tests.llm_real.server import N_CTX, LlmServer

pytestmark = pytest.mark.llm_real

MAX_TOKENS = 96
CHANNEL = "release/v2-4"
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

H, A, T = ActorType.HUMAN, ActorType.AGENT, ActorType.TOOL
Q, C, R, S = MessageType.QUERY, MessageType.COMMAND, MessageType.RESPONSE, MessageType.STATUS
D, P = MessageType.DONE, MessageType.PROPOSE

# sender, actor, type, content, correlation_id, in_reply_to (index), target
_SCRIPT: list[tuple[str, ActorType, MessageType, str, str | None, int | None, str | None]] = [
    ("maria", H, C, "Cut the 2.4 release branch today and run the full regression suite.",
     "c-branch", None, "role:planner"),
    ("planner", A, S, "Acknowledged. Splitting the work: branch, regression run, changelog.",
     "c-branch", 0, None),
    ("planner", A, C, "Create branch release/2.4 from main at the last green build.",
     "c-cut", None, "role:coder"),
    ("coder", A, D, "Branch release/2.4 created from build 1187.", "c-cut", 2, None),
    ("planner", A, C, "Run the regression suite on release/2.4.", "c-regress", None, "role:tester"),
    ("tester", A, S, "Regression suite started, 412 tests queued.", "c-regress", 4, None),
    ("ci-bot", T, S, "Build 1188 passed in 14 minutes.", None, None, None),
    ("tester", A, S, "Three failures in the payment export tests; investigating.",
     "c-regress", 4, None),
    ("reviewer", A, Q, "Are the export failures a regression or the known flaky timezone test?",
     "c-flaky", None, "role:tester"),
    ("tester", A, R, "Two are the flaky timezone test; one is a real regression in CSV escaping.",
     "c-flaky", 8, None),
    ("planner", A, C, "Fix the CSV escaping regression on release/2.4 and backport to main.",
     "c-csv", None, "role:coder"),
    ("coder", A, S, "Found it: quotes inside fields are not doubled since the exporter refactor.",
     "c-csv", 10, None),
    ("maria", H, Q, "Will this push the release past Thursday?", "c-date", None, "role:planner"),
    ("planner", A, R, "No, the fix is small; Thursday holds if review is done by Wednesday noon.",
     "c-date", 12, None),
    ("coder", A, P, "Proposal: add a property test for CSV quoting so this cannot regress again.",
     "c-prop", None, None),
    ("reviewer", A, R, "Agreed on the property test; include it in the same pull request.",
     "c-prop", 14, None),
    ("coder", A, D, "Fix and property test merged to release/2.4 and main.", "c-csv", 10, None),
    ("tester", A, D, "Regression suite green on build 1191 apart from the known flaky test.",
     "c-regress", 4, None),
    ("planner", A, C, "Draft the 2.4 changelog from the merged pull requests.",
     "c-log", None, "role:coder"),
    ("maria", H, S, "Thanks all. I will sign off the release once the changelog is up.",
     None, None, None),
]  # fmt: skip


def conversation() -> list[Message]:
    """Twenty messages of a release conversation, with requests opened and closed."""
    return [
        Message(
            id=f"m{index:02d}",
            channel=CHANNEL,
            sender=sender,
            actor_type=actor,
            type=kind,
            content=content,
            correlation_id=correlation_id,
            in_reply_to=None if reply_to is None else f"m{reply_to:02d}",
            target=target,
            topic="release",
            created_at=START + timedelta(minutes=7 * index),
        )
        for index, (sender, actor, kind, content, correlation_id, reply_to, target) in enumerate(
            _SCRIPT
        )
    ]


@pytest.fixture(scope="module")
def messages() -> list[Message]:
    return conversation()


def assert_synthesised(result: SummaryResult, item_count: int, model: str) -> None:
    annotations = result.annotations
    assert isinstance(result, SummaryResult)
    assert result.text.strip(), "the model's summary is empty"
    assert result.text == result.text.strip()
    assert annotations["tier"] == "synthesised"
    assert annotations["itemCount"] == str(item_count)
    assert annotations["itemsOmitted"] == "0"
    assert annotations["model"] == model
    for key in ("promptTokens", "completionTokens", "latencyMs"):
        assert annotations[key].isdigit(), f"{key}={annotations[key]!r}"
    assert int(annotations["promptTokens"]) > 0
    assert 0 < int(annotations["completionTokens"]) <= MAX_TOKENS
    assert int(annotations["latencyMs"]) > 0
    assert FALLBACK_FROM not in annotations
    assert FALLBACK_REASON not in annotations


def test_the_messages_are_valid(messages: list[Message]) -> None:
    assert len(messages) == 20
    assert len({m.sender for m in messages}) >= 5


async def test_complete_returns_text_usage_and_model(
    llm_client: OpenAIChatClient, llm_server: LlmServer
) -> None:
    started = time.monotonic()
    completion = await llm_client.complete(
        "You are a helpful assistant. Answer in one short sentence.",
        "What does a release branch in a software project contain?",
        max_tokens=48,
    )
    elapsed_ms = (time.monotonic() - started) * 1000

    assert completion.text.strip()
    assert completion.model == llm_server.model
    assert completion.prompt_tokens > 0
    assert 0 < completion.completion_tokens <= 48
    assert 0 < completion.latency_ms <= elapsed_ms + 1


async def test_llm_summariser_folds_a_real_batch(
    llm_client: OpenAIChatClient, llm_server: LlmServer, messages: list[Message]
) -> None:
    summariser = LlmContentSummariser(
        llm_client, render_message, context_tokens=N_CTX, max_tokens=MAX_TOKENS
    )
    previous = SummaryResult("The team is preparing release 2.4.", {"domain": "release"})

    result = await summariser.summarise(messages, previous)

    assert_synthesised(result, len(messages), llm_server.model)
    assert result.annotations["domain"] == "release"  # other keys survive


async def test_default_summariser_uses_the_model_for_a_large_batch(
    llm_client: OpenAIChatClient, llm_server: LlmServer, messages: list[Message]
) -> None:
    summariser = default_summariser(llm_client, context_tokens=N_CTX, max_tokens=MAX_TOKENS)

    result = await summariser.summarise(messages, None)

    # A small model may echo the prompt or copy the items: then the digest answers, saying why.
    if result.annotations["tier"] == "synthesised":
        assert_synthesised(result, len(messages), llm_server.model)
    else:
        assert result.annotations["tier"] == "digest"
        assert result.annotations[FALLBACK_FROM] == "synthesised"
        assert "rejected" in result.annotations[FALLBACK_REASON]
    assert "Current summary:" not in result.text and "New items (" not in result.text
    assert estimate_tokens(result.text) <= SUMMARY_MAX_TOKENS


async def test_write_recap_gives_one_short_line(
    llm_client: OpenAIChatClient, llm_server: LlmServer, messages: list[Message]
) -> None:
    text, fields = await write_recap(
        llm_client,
        messages,
        "Release 2.4 is branched; a CSV escaping regression was fixed; changelog pending.",
        [
            CommitmentView(
                correlation_id="c-log",
                kind="COMMAND",
                state="OPEN",
                requester="planner",
                obligor="role:coder",
                asked="Draft the 2.4 changelog from the merged pull requests.",
                since=messages[18].created_at,
            )
        ],
    )

    assert text.strip()
    assert "\n" not in text and "\r" not in text
    assert len(text.split()) <= 80
    assert fields["tier"] == "synthesised"
    assert fields["model"] == llm_server.model
    assert fields["tokens_in"] > 0
    assert fields["tokens_out"] > 0
    assert fields["latency_ms"] > 0
