"""streams.replay.log: reading spans of the log, against a fake consumer. No Kafka."""

from __future__ import annotations

from typing import Any

from streams.replay import Rec


class FakeConsumer:
    """Partitions of records; `getmany` hands out at most `step` records per partition."""

    def __init__(
        self, partitions: dict[int, list[Rec]], ends: dict[int, int], step: int = 4
    ) -> None:
        self.partitions = partitions
        self.ends = ends
        self.step = step
        self.positions: dict[int, int] = {}
        self.paused: set[int] = set()
        self.calls = 0

    def assign(self, tps: list[Any]) -> None:
        self.assigned = {tp.partition for tp in tps}

    def seek(self, tp: Any, offset: int) -> None:
        self.positions[tp.partition] = offset

    def pause(self, tp: Any) -> None:
        self.paused.add(tp.partition)

    async def position(self, tp: Any) -> int:
        return self.positions[tp.partition]

    async def getmany(self, *tps: Any, timeout_ms: int, max_records: int) -> dict[Any, list[Rec]]:
        self.calls += 1
        out = {}
        for tp in tps:
            if tp.partition in self.paused:
                continue
            start = self.positions[tp.partition]
            records = [r for r in self.partitions[tp.partition] if r.offset >= start][: self.step]
            if records:
                out[tp] = records
                self.positions[tp.partition] = records[-1].offset + 1
            else:  # only a gap is left: the position moves to the end offset
                self.positions[tp.partition] = self.ends[tp.partition]
        return out


def test_read_spans_stops_each_partition_at_its_span() -> None:
    import asyncio

    from streams.replay.log import Span, read_spans

    log = {
        0: [Rec(i, b"k", b"v") for i in range(10)],
        1: [Rec(i, b"k", b"v") for i in [0, 1, 2, 5, 6]],  # compacted: gaps
        2: [Rec(i, b"k", b"v") for i in range(3)],
        3: [Rec(i, b"k", b"v") for i in [0, 1]],  # offsets 2 and 3 compacted away
    }
    kafka = FakeConsumer(log, ends={0: 10, 1: 7, 2: 3, 3: 4})
    seen: dict[int, list[int]] = {}
    progress: dict[int, int] = {}

    def on_batch(partition: int, records: list[Any]) -> None:
        seen.setdefault(partition, []).extend(r.offset for r in records)

    def on_progress(partition: int, count: int) -> None:
        progress[partition] = progress.get(partition, 0) + count

    spans = [Span(0, 2, 7), Span(1, 0, 4), Span(2, 3, 3), Span(3, 0, 4)]
    total = asyncio.run(read_spans(kafka, "t", spans, on_batch, on_progress))
    assert seen == {0: [2, 3, 4, 5, 6], 1: [0, 1, 2], 3: [0, 1]}
    assert total == 10 and progress == {0: 5, 1: 3, 3: 2}
    assert kafka.paused == {0, 1, 3}
