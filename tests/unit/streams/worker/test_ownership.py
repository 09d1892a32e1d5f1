"""streams.worker.ownership: the stages are told, at each assignment, which messages
partitions are gone and which were taken over."""

from __future__ import annotations

from faust.types import TP

from tests.unit.streams.worker.offline import offline_worker


async def test_each_assignment_tells_what_moved_since_the_last() -> None:
    chorus = offline_worker().runtime
    told: list[tuple[frozenset[int], frozenset[int], frozenset[int]]] = []
    chorus.ownership.on_moved(lambda gone, taken, owned: told.append((gone, taken, owned)))
    messages = chorus.messages.get_topic_name()
    app = chorus.app
    await app.on_partitions_assigned.send({TP(messages, 0), TP(messages, 2), TP("x", 1)})
    await app.on_partitions_assigned.send({TP(messages, 2), TP(messages, 3)})
    await app.on_partitions_assigned.send(set())
    assert told == [
        (frozenset(), frozenset({0, 2}), frozenset({0, 2})),
        (frozenset({0}), frozenset({3}), frozenset({2, 3})),
        (frozenset({2, 3}), frozenset(), frozenset()),
    ]


def test_a_channels_partition_is_kafkas_default_partitioners() -> None:
    from streams.records import key_partition

    chorus = offline_worker().runtime
    assert chorus.ownership.partition_of("team/a") == key_partition(b"team/a", 4)
    assert chorus.ownership.messages_partition("team/a") is None  # nothing owned yet


async def test_listeners_are_told_whether_it_is_an_assignment_or_the_recovery_after_it() -> None:
    chorus = offline_worker().runtime
    ownership = chorus.ownership
    told: list[tuple[bool, frozenset[int]]] = []
    ownership.on_moved(lambda _, taken, __: told.append((ownership.recovering, taken)))
    messages = chorus.messages.get_topic_name()
    await chorus.app.on_partitions_assigned.send({TP(messages, 1)})
    await chorus.app.on_rebalance_complete.send()
    assert told == [(True, frozenset({1})), (False, frozenset({1}))]
