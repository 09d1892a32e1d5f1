"""projections.summarise.defaults: the reference wiring of the tiers."""

from __future__ import annotations

import re

import pytest

from projections.context import narrative_lines
from projections.model import Message, MessageType
from projections.summarise import (
    FALLBACK_FROM,
    FALLBACK_REASON,
    SummaryResult,
    default_summariser,
)
from projections.summarise.pending import as_narrated
from tests.unit.projections.summarise.support import FakeChatClient, conversation, msg


async def test_default_summariser_tiers() -> None:
    summariser = default_summariser(FakeChatClient(reply="Synthesised summary."))
    two = await summariser.summarise([msg("alice", "Let's use Redis"), msg("bob", "Agreed")], None)
    assert two.annotations["tier"] == "verbatim"
    assert "[alice] Let's use Redis" in two.text

    five = await summariser.summarise(conversation(5), None)
    assert five.annotations["tier"] == "digest"
    assert len(five.annotations["participants"].split(",")) == 4
    assert len(five.annotations["topics"].split(",")) == 3
    assert "Participants: alice, bob, carol, dave" in five.text

    twenty = await summariser.summarise(conversation(20), None)
    assert twenty.annotations["tier"] == "synthesised"
    assert twenty.text == "Synthesised summary."


async def test_default_summariser_falls_back_to_the_digest_when_the_llm_is_down() -> None:
    summariser = default_summariser(FakeChatClient(error=RuntimeError("LLM unavailable")))
    items = [*conversation(19), msg("bob", "Deployed the cache fix to staging")]
    result = await summariser.summarise(items, SummaryResult("old", {"domain": "d"}))
    assert result.annotations["tier"] == "digest"
    assert result.annotations[FALLBACK_FROM] == "synthesised"
    assert "LLM unavailable" in result.annotations[FALLBACK_REASON]
    assert result.annotations["domain"] == "d"
    assert "[bob] Deployed the cache fix to staging" in result.text


async def test_default_summariser_without_client() -> None:
    summariser = default_summariser(None, small_threshold=2, medium_threshold=4)
    large = await summariser.summarise(conversation(5), None)
    assert large.annotations["tier"] == "digest"
    assert large.annotations[FALLBACK_REASON] == "no LLM configured"
    medium = await summariser.summarise(conversation(4), None)
    assert FALLBACK_REASON not in medium.annotations


async def test_default_summariser_accumulates_across_tiers() -> None:
    summariser = default_summariser(FakeChatClient())
    senders = ["alice", "bob", "alice", "bob"]
    caching = [
        msg(s, f"the cache layer needs eviction rule number {i}", topic="caching", at=i)
        for i, s in enumerate(senders)
    ]
    first = await summariser.summarise(caching, SummaryResult("", {"domain": "infra"}))
    assert first.annotations["participants"] == "alice,bob"

    second = await summariser.summarise([msg("carol", "hi", topic="caching")], first)
    assert second.annotations["tier"] == "verbatim"
    assert second.annotations["participants"] == "alice,bob"
    assert second.text.startswith(first.text)

    deploy = [
        msg(s, f"we ship the release candidate to staging on day {i}", topic="deployment")
        for i, s in enumerate(["alice", "bob", "carol", "dave"])
    ]
    third = await summariser.summarise(deploy, second)
    assert third.annotations["tier"] == "digest"
    assert third.annotations["participants"] == "alice,bob,carol,dave"
    assert {"caching", "deployment"} <= set(third.annotations["topics"].split(","))
    assert "eviction rule" in third.text and "release candidate" in third.text
    assert third.annotations["domain"] == "infra"


def _requests_and_replies(rounds: int) -> list[Message]:
    """Rounds of a request and its bare acknowledgement, with chatter between them."""
    out: list[Message] = []
    for n in range(rounds):
        ask = Message(
            channel="team/dev",
            sender="planner",
            type=MessageType.COMMAND,
            content=f"Collect the merged pull requests of sprint {n}. Then list them.",
            correlation_id=f"c{n}",
            target="role:worker-a",
        )
        ack = Message(
            channel="team/dev",
            sender="worker-a",
            type=MessageType.STATUS,
            correlation_id=f"c{n}",
            in_reply_to=ask.id,
        )
        chat = Message(
            channel="team/dev",
            sender="reviewer",
            type=MessageType.STATUS,
            content=f"The grammar tables for sprint {n} look stable.",
        )
        out += [ask, ack, chat]
    return out


@pytest.mark.parametrize("batch", [1, 3, 6, 15])
async def test_a_narrative_with_requests_names_what_was_asked_in_lines_that_say_something(
    batch: int,
) -> None:
    # As the summaries stage passes them: each message narrated (`as_narrated`), in batches
    # the verbatim tier (1, 3) or the digest (6, 15) summarises.
    summariser = default_summariser(None)
    messages = [as_narrated(m) for m in _requests_and_replies(6)]
    result: SummaryResult | None = None
    for start in range(0, len(messages), batch):
        result = await summariser.summarise(messages[start : start + batch], result)
    assert result is not None
    # The summariser separates batches with a blank line (its contract); the narrative a view
    # shows is read line by line.
    assert "\n\n\n" not in result.text, result.text
    lines = narrative_lines(result.text).splitlines()
    assert lines, result.text
    bare = [line for line in lines if re.fullmatch(r"- \[[^\]]+\] [A-Z]+", line)]
    assert bare == [], result.text
    assert re.search(
        r"\[planner\] [Aa]sked worker-a: Collect the merged pull requests", result.text
    )
