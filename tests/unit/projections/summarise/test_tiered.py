"""projections.summarise.tiered: choosing a tier by batch size, and falling back with a
reason; annotations survive a change of tier."""

from __future__ import annotations

import pytest

from projections.summarise import (
    FALLBACK_FROM,
    FALLBACK_REASON,
    FallbackSummariser,
    HeuristicMessageSummariser,
    LlmContentSummariser,
    LlmError,
    SummaryResult,
    TieredContentSummariser,
    VerbatimContentSummariser,
    render_message,
)
from tests.unit.projections.summarise.support import Failing, FakeChatClient, Recording, msg


async def test_tiered_boundaries_are_inclusive() -> None:
    small, medium, large = Recording("small"), Recording("medium"), Recording("large")
    tiered = TieredContentSummariser(small, medium, large, 3, 10)
    expected = {0: "small", 2: "small", 3: "small", 4: "medium", 10: "medium", 11: "large"}
    for size, name in expected.items():
        assert (await tiered.summarise(["x"] * size, None)).text == name


@pytest.mark.parametrize(("small_t", "medium_t"), [(0, 5), (-1, 5), (5, 3)])
def test_tiered_rejects_bad_thresholds(small_t: int, medium_t: int) -> None:
    with pytest.raises(ValueError):
        TieredContentSummariser(Recording("s"), Recording("m"), Recording("l"), small_t, medium_t)


async def test_tiered_passes_previous_through_unchanged() -> None:
    small = Recording("small")
    previous = SummaryResult("before", {"domain": "x"})
    await TieredContentSummariser(small, small, small, 1, 1).summarise(["a"], previous)
    assert small.calls[0][1] is previous


async def test_fallback_to_heuristic_with_reason() -> None:
    fallback = FallbackSummariser(
        Failing(LlmError("LLM unavailable")), HeuristicMessageSummariser()
    )
    previous = SummaryResult("before", {"domain": "medical"})
    result = await fallback.summarise([msg("alice"), msg("bob")], previous)
    assert result.annotations["tier"] == "grouped"
    assert result.annotations[FALLBACK_FROM] == "synthesised"
    assert result.annotations[FALLBACK_REASON] == "LLM unavailable"
    assert result.annotations["domain"] == "medical"
    assert result.text.startswith("before\n--- Update (2 messages) ---")


async def test_fallback_catches_any_exception_with_a_short_reason() -> None:
    fallback = FallbackSummariser(Failing(KeyError("x" * 500)), HeuristicMessageSummariser())
    result = await fallback.summarise([msg("alice")])
    assert result.annotations[FALLBACK_REASON].startswith("KeyError: ")
    assert len(result.annotations[FALLBACK_REASON]) <= 200


async def test_successful_primary_clears_stale_fallback_keys() -> None:
    fallback = FallbackSummariser(
        LlmContentSummariser(FakeChatClient(), render_message), HeuristicMessageSummariser()
    )
    previous = SummaryResult("x", {FALLBACK_FROM: "synthesised", FALLBACK_REASON: "down"})
    result = await fallback.summarise([msg("alice")], previous)
    assert result.annotations["tier"] == "synthesised"
    assert FALLBACK_FROM not in result.annotations
    assert FALLBACK_REASON not in result.annotations


async def test_annotations_survive_verbatim_heuristic_verbatim() -> None:
    verbatim = VerbatimContentSummariser(render_message)
    heuristic = HeuristicMessageSummariser()
    start = SummaryResult("", {"domain": "legal"})
    one = await verbatim.summarise([msg("alice")], start)
    two = await heuristic.summarise([msg("bob", topic="contracts")], one)
    three = await verbatim.summarise([msg("carol")], two)
    assert three.annotations == {
        "domain": "legal",
        "tier": "verbatim",
        "itemCount": "1",
        "participants": "bob",
        "topics": "contracts",
    }
