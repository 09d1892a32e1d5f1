"""streams.replay.parallel: partitions shared out over processes, merged like one replay.
No Kafka."""

from __future__ import annotations

import pytest

from streams.records import key_partition
from streams.replay import Replayer
from tests.factories import conversation
from tests.unit.streams.replay.support import ALL, CHANNELS, records_of, replayed


def test_partitions_are_shared_out_evenly_and_deterministically() -> None:
    from streams.replay.log import Span
    from streams.replay.parallel import share_partitions

    spans = [Span(0, 0, 100), Span(1, 0, 10), Span(2, 0, 90), Span(3, 0, 0), Span(4, 5, 25)]
    shares = share_partitions(spans, 2)
    # Largest first into the smallest share: 100 | 90, +20 | 110, +10 → 110 | 110.
    assert shares == [[Span(0, 0, 100), Span(1, 0, 10)], [Span(2, 0, 90), Span(4, 5, 25)]]
    assert share_partitions(spans, 2) == shares
    # Never more shares than non-empty spans; an empty span is read by nobody.
    assert [len(s) for s in share_partitions(spans, 8)] == [1, 1, 1, 1]
    assert share_partitions([Span(3, 4, 4)], 2) == []
    assert share_partitions(spans, 1) == [[s for s in spans if s.size]]


def test_merged_shares_equal_one_replayer_over_every_partition() -> None:
    from streams.replay.parallel import _Part, merge_parts

    # Three channels, each in its own partition of four, with invalid records mixed in.
    by_partition = {
        key_partition(channel.encode(), 4): records_of(
            conversation([channel], 60, seed=index), junk_every=9
        )
        for index, channel in enumerate(CHANNELS)
    }
    assert sorted(by_partition) == [1, 2, 3]
    whole = Replayer(ALL, partitions=4)
    for partition, records in by_partition.items():
        whole.feed(partition, records)
    parts = []
    for share in ([1, 3], [2]):
        one = Replayer(ALL, partitions=4)
        for partition in share:
            one.feed(partition, by_partition[partition])
        parts.append(_Part(one.channels, one.stats, one.dirty))
    merged = Replayer(ALL, partitions=4)
    merge_parts(merged, parts)
    assert replayed(merged) == replayed(whole)
    assert merged.stats == whole.stats and merged.stats.invalid > 0
    assert merged.dirty == set(CHANNELS)


def test_fewer_collections_while_folding_and_the_thresholds_restored_after() -> None:
    import gc

    from streams.replay.parallel import fewer_collections

    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_collections(threshold=before[0] + 1234):
        assert gc.get_threshold() == (before[0] + 1234, *before[1:])
        raise RuntimeError("a failed replay")
    assert gc.get_threshold() == before
    with fewer_collections(threshold=1):  # never more often than before
        assert gc.get_threshold() == before
