"""streams.worker.runtime: what a role does as its partitions move."""

from __future__ import annotations

from faust.types import TP

from tests.unit.streams.worker.offline import offline_worker


async def test_partitions_moving_have_the_next_checkpoint_collect_what_was_dropped() -> None:
    chorus = offline_worker().runtime
    assert not chorus.collector.moved
    await chorus.app.on_partitions_assigned.send({TP(chorus.messages.get_topic_name(), 0)})
    assert chorus.collector.moved  # `Collector.after_moved`: bug 25
