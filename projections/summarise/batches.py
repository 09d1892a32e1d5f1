"""Running a summariser over a stream of batches (replay, backfill)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from itertools import islice
from typing import TypeVar

from projections.summarise.result import ContentSummariser, SummaryResult

T = TypeVar("T")


async def summarise_batches(
    summariser: ContentSummariser[T],
    batches: AsyncIterable[list[T]] | Iterable[list[T]],
    previous: SummaryResult | None = None,
) -> AsyncIterator[SummaryResult]:
    """Fold each batch into the running summary, yielding the summary after every batch.

    Each call receives the previous call's result, exactly as the live path does. Empty
    batches are passed on too (the summariser decides what they mean).
    """
    current = previous
    if isinstance(batches, AsyncIterable):
        async for items in batches:
            current = await summariser.summarise(list(items), current)
            yield current
    else:
        for items in batches:
            current = await summariser.summarise(list(items), current)
            yield current


def batch(messages: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of `size` items (the last may be shorter); size must be >= 1."""
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")
    iterator = iter(messages)
    while chunk := list(islice(iterator, size)):
        yield chunk
