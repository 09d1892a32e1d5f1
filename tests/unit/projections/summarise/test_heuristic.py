"""projections.summarise.heuristic: grouping a batch without a model."""

from __future__ import annotations

from projections.model import MessageType
from projections.summarise import (
    HeuristicMessageSummariser,
    SummaryResult,
)
from tests.unit.projections.summarise.support import msg


async def test_heuristic_groups_a_batch() -> None:
    batch_ = [
        msg("alice", topic="architecture", at=0),
        msg("bob", topic="testing", at=60),
        msg("alice", topic="architecture", at=120),
    ]
    result = await HeuristicMessageSummariser().summarise(batch_, None)
    assert result.text == (
        "--- Update (3 messages) ---\n"
        "Participants: alice, bob\n"
        "Period: 2025-03-01T09:00:00Z — 2025-03-01T09:02:00Z\n"
        "Topics: architecture, testing"
    )
    assert result.annotations == {
        "tier": "grouped",
        "itemCount": "3",
        "participants": "alice,bob",
        "topics": "architecture,testing",
    }


async def test_heuristic_accumulates_across_runs() -> None:
    heuristic = HeuristicMessageSummariser()
    first = await heuristic.summarise([msg("alice", topic="caching")], None)
    second = await heuristic.summarise([msg("bob", topic="indexing")], first)
    assert second.text.startswith(first.text + "\n--- Update")
    assert second.annotations["participants"] == "alice,bob"
    assert second.annotations["topics"] == "caching,indexing"
    assert second.annotations["itemCount"] == "1"


async def test_heuristic_keeps_domain_keys() -> None:
    previous = SummaryResult("", {"domain": "medical", "urgency": "high"})
    result = await HeuristicMessageSummariser().summarise([msg("alice")], previous)
    assert result.annotations["domain"] == "medical"
    assert result.annotations["urgency"] == "high"
    assert result.text.startswith("--- Update (1 messages) ---")  # blank previous: no gap


async def test_heuristic_empty_batch_returns_previous_itself() -> None:
    heuristic = HeuristicMessageSummariser()
    previous = SummaryResult("kept", {"k": "v"})
    assert await heuristic.summarise([], previous) is previous
    assert await heuristic.summarise([], None) == SummaryResult("")


async def test_heuristic_period_by_list_position_and_merge_without_spaces() -> None:
    previous = SummaryResult("old", {"participants": "carol, dave", "topics": "ops"})
    batch_ = [msg("dave", at=300, topic="ops"), msg("erin", at=0, topic="  ")]
    result = await HeuristicMessageSummariser().summarise(batch_, previous)
    assert "Period: 2025-03-01T09:05:00Z — 2025-03-01T09:00:00Z" in result.text
    assert result.annotations["participants"] == "carol,dave,erin"
    assert result.annotations["topics"] == "ops,general"  # a blank topic reads "general"


async def test_heuristic_says_nothing_of_commitments() -> None:
    batch_ = [
        msg("alice", "review PR 7", type=MessageType.COMMAND, id="m1", correlation_id="c-1"),
        msg("bob", "done", type=MessageType.DONE, id="m3", correlation_id="c-1"),
    ]
    text = (await HeuristicMessageSummariser().summarise(batch_, None)).text
    assert "c-1" not in text and "Opened" not in text and "Closed" not in text
    assert "Participants: alice, bob" in text
