"""bench.text_cost: the text work per message, measured in process on bench messages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bench import text_cost
from projections.model import Message, MessageType


def messages(channels: int, each: int) -> dict[str, list[Message]]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    said = "The invoice queue needs sharding by region. Um, the the cache is cold again. Okay."
    return {
        f"c{c}": [
            Message(
                channel=f"c{c}",
                sender=f"s{i % 3}",
                type=MessageType.STATUS,
                content=f"{said} Item {i}.",
                created_at=start + timedelta(seconds=i),
            )
            for i in range(each)
        ]
        for c in range(channels)
    }


def test_the_figures_cover_the_digest_and_the_recap_and_read_as_a_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(text_cost, "bench_messages", lambda count, channels: messages(2, 45))
    result = text_cost.measure(count=90, channels=2, repeat=1)
    digest, recap = result["digest"], result["recap"]
    assert digest["messages"] == 90 and digest["summaries"] == 6  # batches of 20, then 5
    for figure in ("per_message_us", "summarised_us_per_message", "batch_ms"):
        assert digest[figure] > 0
    for figure in ("with_message_us", "title_when_due_us", "keyphrases_when_due_us"):
        assert recap[figure] > 0
    table = text_cost.markdown(result)
    assert "| digest, per message (read) |" in table and "| title when due" in table
