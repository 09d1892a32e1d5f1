"""projections.summarise.batches: folding a stream of batches like the live path."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from projections.summarise import (
    SummaryResult,
    VerbatimContentSummariser,
    batch,
    default_summariser,
    summarise_batches,
)
from tests.unit.projections.summarise.support import conversation, identity


async def test_summarise_batches_over_an_iterable() -> None:
    verbatim = VerbatimContentSummariser(identity)
    results = [r async for r in summarise_batches(verbatim, [["a", "b"], ["c"]])]
    assert [r.text for r in results] == ["- a\n- b", "- a\n- b\n\n- c"]
    assert results[-1].annotations["itemCount"] == "1"


async def test_summarise_batches_over_an_async_iterable_with_previous() -> None:
    async def source() -> AsyncIterator[list[str]]:
        for chunk in batch(["a", "b", "c"], 2):
            yield chunk

    previous = SummaryResult("start", {"domain": "x"})
    results = [
        r async for r in summarise_batches(VerbatimContentSummariser(identity), source(), previous)
    ]
    assert results[-1].text == "start\n\n- a\n- b\n\n- c"
    assert results[-1].annotations["domain"] == "x"


async def test_replay_equals_live_folding() -> None:
    messages = conversation(40)
    summariser = default_summariser(None)
    live: SummaryResult | None = None
    for chunk in batch(messages, 7):
        live = await summariser.summarise(chunk, live)
    replayed = [r async for r in summarise_batches(summariser, batch(messages, 7))]
    assert replayed[-1] == live
    assert len(replayed) == 6


def test_batch_helper() -> None:
    assert list(batch(range(7), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batch([], 3)) == []
    with pytest.raises(ValueError):
        list(batch([1], 0))
