"""Which partitions of `chorus.messages` a role's worker owns, and what follows when they
move (both roles).

Every table and every topic a stage reads is co-partitioned with `chorus.messages` by the
channel key, so "the channel's partition" is one number everywhere. Faust assigns
partitions (its consumer group); this module reads its assignment, and tells the stages
once per assignment which partitions are gone and which were taken over (`on_moved`), so
each forgets only theirs: partitions it keeps stay warm (Quix Streams revokes state per
partition the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from faust.types import TP as TopicPartition

from streams.records import key_partition
from streams.settings import Settings

# Told of each assignment: (the partitions gone since the last one, those taken over, all
# now owned).
Moved = Callable[[frozenset[int], frozenset[int], frozenset[int]], None]


class Ownership:
    """The messages partitions this worker owns, from Faust's assignor."""

    def __init__(self, app: Any, messages_topic: str, settings: Settings) -> None:
        self.app = app
        self.topic = messages_topic
        self.settings = settings
        self.listeners: list[Moved] = []
        self.owned: frozenset[int] = frozenset()
        # The partitions the last assignment took over: their stores are recovered from
        # the changelogs after it, so what was read of them meanwhile is forgotten again.
        self.taken: frozenset[int] = frozenset()
        # From an assignment until the tables have recovered from it: what listeners are
        # told is the assignment (True) or the recovery after it (False).
        self.recovering = False

        async def assigned(_: Any, tps: Collection[TopicPartition], **__: Any) -> None:
            self.assigned(frozenset(tp.partition for tp in tps if tp.topic == self.topic))

        async def recovered(*_: Any, **__: Any) -> None:
            self.recovering = False
            for moved in self.listeners:
                moved(frozenset(), self.taken, self.owned)

        app.on_partitions_assigned.connect(assigned)
        app.on_rebalance_complete.connect(recovered)  # after the tables' recovery

    def on_moved(self, moved: Moved) -> None:
        """`moved(gone, taken, owned)` at each assignment, in the order registered, and
        again once the tables have recovered (nothing gone, the same taken)."""
        self.listeners.append(moved)

    def assigned(self, owned: frozenset[int]) -> None:
        gone, taken = self.owned - owned, owned - self.owned
        self.owned, self.taken = owned, taken
        self.recovering = True
        for moved in self.listeners:
            moved(gone, taken, owned)

    def owned_partitions(self) -> frozenset[int]:
        """The messages partitions this worker actively owns (none before the group
        assigned any, or while it rebalances)."""
        try:
            actives = self.app.assignor.assigned_actives()
        except Exception:  # not started yet
            return frozenset()
        return frozenset(tp.partition for tp in actives if tp.topic == self.topic)

    def messages_partitions(self) -> int:
        """chorus.messages' partition count: the consumer's metadata once it has it, else
        the settings' (Faust refuses a source topic whose count differs from its tables')."""
        try:
            known = self.app.consumer.topic_partitions(self.topic)
        except Exception:  # no consumer yet
            known = None
        return int(known) if known else self.settings.partitions

    def partition_of(self, channel: str) -> int:
        """The channel's partition of every chorus topic and table (Kafka's default
        partitioner over the key), owned here or not."""
        return key_partition(channel.encode(), self.messages_partitions())

    def messages_partition(self, channel: str) -> int | None:
        """The channel's partition when this worker actively owns it, else None.

        Timers and views use it to act only on their own channels: local stores also hold
        standby copies of partitions another worker owns.
        """
        partition = self.partition_of(channel)
        return partition if partition in self.owned_partitions() else None
