"""The context a role's stages are handed (both roles): its settings, Faust app and topics,
and the parts each job is owned by, built once from the settings (no globals, so tests
build their own). It owns no job itself:

  app          the role's Faust app (`streams.worker.app`)
  checkpoint   state in memory, written once per checkpoint (`streams.worker.checkpoint`)
  ownership    which partitions this worker owns, and what follows when they move
               (`streams.worker.ownership`)
  gate         validation and dead letters (`streams.worker.gate`)
  positions    the next offset to apply per partition: the gap guard (`in_order`)
  intake       the records of chorus.messages, from the consumer to the role's one stage on
               them (`take_messages`, `streams.worker.intake`)
  deadlines    the role's time-ordered index of what falls due (`streams.worker.deadlines`)
  memory       the role's memory budget (CHORUS_MEMORY_MB) and its caches
  collector    Python's garbage collector kept off the long-lived state
               (`streams.worker.collector`)
  folds        (fold role) the fold tables and their one cache (`streams.worker.folds`)
  channel_state (context role) the per-channel state its stages share, one record each

It imports no stage; `streams.worker.compose` wires the stages onto it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any

from faust.exceptions import NotReady
from faust.types import TP as TopicPartition
from faust.types import Message

from projections.channel import ChannelStanding
from projections.projection import ChannelProjection, Folded
from streams.kafka.batches import Outbox, Published, Record, publish
from streams.kafka.clients import OwnProducer, bootstrap_servers, producer
from streams.kafka.consume import RangeReader
from streams.llm.metering import CostMeter
from streams.memory import MIB, ByteCache, MemoryBudget
from streams.registry import registered_projections
from streams.settings import Settings
from streams.topology import (
    CHANNEL_CONFIG,
    CHANNEL_STATE_TABLE,
    CONFIG_TABLE,
    DEAD_LETTERS,
    DEADLINES_TABLE,
    DRIVER_EVENTS,
    MESSAGES,
    POSITIONS_TABLE,
    RECAPS,
    SUMMARIES,
    Role,
    changelog_config,
    fold_table_name,
)
from streams.worker.app import (
    ChorusApp,
    SharedRocksDB,
    build_app,
    record_batch_bytes,
    share_rocksdb_budget,
)
from streams.worker.checkpoint import Checkpoint, Columns
from streams.worker.collector import BLOCKS_PER_MIB, Collector
from streams.worker.configs import ChannelConfigs
from streams.worker.folds import FoldTables
from streams.worker.gate import Gate
from streams.worker.intake import Intake
from streams.worker.ownership import Ownership

log = logging.getLogger(__name__)

RAW = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}

# How long a summary or recap waits for others before they are produced together
# (`streams.kafka.batches.Outbox`): each lot is one produce request and wakes each reader
# of the topic once, instead of once per record; nothing waits on a summary this long.
OUTBOX_LINGER_SECONDS = 0.2

# How each role's memory budget (CHORUS_MEMORY_MB) is shared: RocksDB (the block cache and
# memtables of every table and partition), the caches of clean table values, the message
# bodies kept for the views or the text stages, and the small caches (configs, titles, the
# latest summaries and recaps read back).
MEMORY_SHARES: dict[Role, dict[str, float]] = {
    "fold": {"rocksdb": 0.30, "folds": 0.40, "recent": 0.15, "latest": 0.10, "small": 0.05},
    "context": {"rocksdb": 0.30, "channel-state": 0.25, "bodies": 0.35, "small": 0.10},
}


class Lots:
    """The lots a stage writes beside its stream (summaries, recaps), each a task: counted
    (`len`, at most the stage's own bound on what is in flight), and all cancelled as the
    role stops (`Runtime._stopping`: after the last checkpoint, before Faust stops its
    producer; Faust itself never cancels them), so that none reads or publishes after, and
    none starts after (`stopped`). What a cancelled lot was writing stays due in its
    stage's index: the next start writes it."""

    def __init__(self) -> None:
        self.running: set[asyncio.Task[None]] = set()
        self.stopped = False

    def __len__(self) -> int:
        return len(self.running)

    def start(self, lot: Coroutine[Any, Any, None]) -> None:
        """Write `lot` in a task of its own (once stopped, it is closed unstarted)."""
        if self.stopped:
            lot.close()
            return
        task = asyncio.ensure_future(lot)
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def stop(self) -> None:
        self.stopped = True
        for task in self.running:
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)


class Runtime:
    """Everything a role's stages share (see the module)."""

    def __init__(
        self,
        settings: Settings,
        projections: list[ChannelProjection[Any]] | None = None,
        *,
        broker: str | None = None,
        role: Role = "fold",
    ) -> None:
        self.settings = settings
        self.role = role
        self.projections = (
            projections
            if projections is not None
            else registered_projections(settings.projections, settings)
        )
        self.servers = broker or bootstrap_servers(settings)
        self.app: ChorusApp = build_app(settings, role, self.servers)
        self.messages = self.app.topic(settings.topic(MESSAGES), **RAW)
        self.driver_events = self.app.topic(settings.topic(DRIVER_EVENTS), **RAW)
        self.dead_letters = self.app.topic(settings.topic(DEAD_LETTERS), **RAW)
        self.channel_config_topic = self.app.topic(settings.topic(CHANNEL_CONFIG), **RAW)
        self.summaries = self.app.topic(settings.topic(SUMMARIES), **RAW)
        self.recaps = self.app.topic(settings.topic(RECAPS), **RAW)

        self.meter = CostMeter()
        self.memory = MemoryBudget(settings.memory_mb * MIB, MEMORY_SHARES[role])
        self.rocksdb = SharedRocksDB(self.memory.share("rocksdb"))
        self.meter.rocksdb_bytes.labels("budget").set(self.memory.share("rocksdb"))
        self.meter.rocksdb_bytes.labels("cache").set_function(self.rocksdb.cache.get_usage)
        self.meter.rocksdb_bytes.labels("memtables").set_function(
            self.rocksdb.write_buffers.get_usage
        )
        self.caches: list[ByteCache[Any, Any]] = []
        self.ownership = Ownership(self.app, self.messages.get_topic_name(), settings)
        self.gate = Gate(
            settings,
            self.messages.get_topic_name(),
            self.dead_letters,
            self.ownership.messages_partitions,
            self.meter,
            lambda channel, partition: self.configs.get(channel, partition),  # its `writers`
        )
        # The changelogs are written with a producer of their own (`OwnProducer`): a wake
        # signal sent meanwhile waited for a checkpoint's request on the app's producer
        # (280 ms at 100,000 channels).
        self.changelog_producer = OwnProducer(
            lambda: producer(
                settings,
                bootstrap_servers=self.servers,
                linger_ms=settings.producer_linger_ms,
                max_batch_size=record_batch_bytes(settings),
            ),
            settings,
        )
        # What the role stops itself, in order, as Faust stops the app (`_stopping`).
        self._lots: list[Lots] = []
        self._readers: list[RangeReader] = []
        self.app.on_before_shutdown.connect(self._stopping)
        # Each role's state: read through memory, each changed key written to its table
        # and changelog once per checkpoint (`streams.worker.checkpoint`); a value that would
        # not fit a changelog record is refused and reported, never sent.
        self.checkpoint = Checkpoint(
            self.app,
            self.messages.get_topic_name(),
            interval=settings.checkpoint_ms / 1000,
            max_keys=settings.checkpoint_max_keys,
            max_held=settings.checkpoint_max_held,
            record_limit=settings.max_message_bytes,
            on_refused=self.gate.refused_in_checkpoint,
            producer=self.changelog_producer,
            took=self._checkpointed,
        )
        self.collector = Collector(self.meter, settings.memory_mb * BLOCKS_PER_MIB)
        self.app.checkpoint = self.checkpoint
        self.folds: FoldTables | None = None
        # The role's one stage on chorus.messages takes its records here (`take_messages`).
        self.intake: Intake | None = None
        if role == "fold":
            tables = {p.name: self.table(fold_table_name(p)) for p in self.projections}
            self.folds = FoldTables(
                self.checkpoint, tables, self.projections, self.cache("folds", "folds")
            )
        self.channel_config = self.table(CONFIG_TABLE)
        self.configs = ChannelConfigs(
            self.channel_config, settings, self.cache("configs", "small", 0.4), self.ownership
        )
        self.ownership.on_moved(self.configs.moved)
        # Next offset to fold (or, in the context role, to follow) per messages partition:
        # neither role applies a message past a gap.
        self.positions = self.checkpoint.table(self.table(POSITIONS_TABLE[role]))
        # Per messages partition, the timestamp (ms) of the latest record applied: how far in
        # time this role has read the log (`read_through`). One entry per partition owned,
        # forgotten as it moves: taken over, it is read again from its last checkpoint.
        self.read_ms: dict[int, int] = {}
        # What falls due when, per channel (`streams.worker.deadlines`): scanned, not cached.
        self.deadlines = self.checkpoint.table(
            self.table(DEADLINES_TABLE, time_index=True), ordered=True
        )
        self.ownership.on_moved(self._moved)

    async def _stopping(self, *_: Any, **__: Any) -> None:
        """Faust stops the app: its consumer, and with it the last checkpoint, stopped
        already; its producer not yet. The stages' lots first (`Lots`), so that none reads
        or publishes after, then the readers and the checkpoints' changelog producer (one
        receiver: Faust runs a signal's receivers in no fixed order)."""
        for lots in self._lots:
            await lots.stop()
        for reader in self._readers:
            await reader.stop()
        await self.changelog_producer.stop()

    def _checkpointed(self, seconds: float) -> None:
        self.meter.checkpoint_seconds.observe(seconds)
        self.collector.after_checkpoint()

    def _moved(self, gone: frozenset[int], taken: frozenset[int], _: frozenset[int]) -> None:
        self.checkpoint.moved(gone, taken)
        for partition in {*gone, *taken}:
            self.read_ms.pop(partition, None)
        for cache in self.caches:
            cache.forget_partitions({*gone, *taken})
        self.collector.after_moved()

    def cache(self, name: str, share: str, fraction: float = 1.0) -> ByteCache[Any, Any]:
        """A cache of `fraction` of the memory share `share`, forgotten per partition as
        partitions move, its evictions and bytes on /metrics."""
        budget = int(self.memory.share(share) * fraction)
        evictions = self.meter.cache_evictions.labels(name)
        made: ByteCache[Any, Any] = ByteCache(name, budget, lambda *_: evictions.inc())
        self.meter.cache_bytes.labels(name, "budget").set(budget)
        self.meter.cache_bytes.labels(name, "held").set_function(lambda: made.bytes)
        self.caches.append(made)
        return made

    @functools.cached_property
    def channel_state(self) -> Columns:
        """The context role's per-channel state, one record per channel for all its stages
        (the summaries' pending batch, the recap status): one changelog record per changed
        channel per checkpoint. Made when the first stage asks (before the app starts)."""
        if self.role != "context":
            raise RuntimeError("the channel state is the context role's")
        table = self.table(CHANNEL_STATE_TABLE)
        return Columns(self.checkpoint, table, self.cache("channel-state", "channel-state"))

    def table(self, name: str, *, time_index: bool = False) -> Any:
        """A changelog-backed table whose changelog accepts what the chorus topics accept
        (the broker's default, 1 MiB, is smaller than a table value may be), its RocksDB
        databases in the role's shared budget (with a time index's options when
        `time_index`: `SharedRocksDB.for_a_time_index`)."""
        table = self.app.Table(
            name,
            partitions=self.settings.partitions,
            extra_topic_configs=changelog_config(self.settings),
        )
        rocksdb = self.rocksdb.for_a_time_index() if time_index else self.rocksdb
        share_rocksdb_budget(table, rocksdb)
        return table

    def folds_of(self, channel: str) -> dict[str, Folded | None]:
        """Every projection's fold of `channel` as this process holds it (fold role; empty
        in the context role, which folds nothing)."""
        if self.folds is None:
            return {}
        return self.folds.folds_of(channel, self.ownership.partition_of(channel))

    def standing(self, channel: str) -> ChannelStanding | None:
        """Where the channel stands by its folds and its termination conditions (None: no
        fold of it here)."""
        if self.folds is None:
            return None
        partition = self.ownership.partition_of(channel)
        return self.folds.standing(channel, partition, self.configs.conditions(channel, partition))

    def take_messages(
        self, name: str, on_batch: Callable[[Sequence[Message]], Awaitable[None]]
    ) -> Intake:
        """The role's one stage on chorus.messages, `name`: `on_batch` is handed what
        arrives, in batches of at most CHORUS_BATCH_MAX records or CHORUS_BATCH_WAIT_MS,
        between two checkpoints (`Checkpoint.between_batches`), taken past Faust's
        per-record path (`streams.worker.intake`). The batch's records stay held until a
        checkpoint holds what they changed (at once when the memory bound is met). A batch
        the stage fails on (not a record: the stages dead-letter those) crashes the role,
        its records released unacknowledged: they are taken again after the restart. What
        the batch changed before it failed may still be checkpointed as the role stops (the
        records held before it are acknowledged then); the stages apply a record once by
        its offset, so taking it again changes nothing twice."""
        settings, checkpoint, app = self.settings, self.checkpoint, self.app

        async def take(batch: Sequence[Message]) -> None:
            async with checkpoint.between_batches():
                taken = intake.fresh(batch)
                if not taken:
                    return
                for message in taken:
                    checkpoint.hold(message)
                try:
                    await on_batch(taken)
                except Exception as error:
                    log.exception("%s failed on a batch of %d records", name, len(taken))
                    checkpoint.release(taken)
                    await app.crash(error)
                    raise
            self.collector.after_batch()
            if checkpoint.over_bound():
                await checkpoint.checkpoint()

        intake = Intake(app, name, settings.batch_max, settings.batch_wait_ms / 1000, take)
        app.topics.add(self.messages)  # subscribed, assigned and acknowledged as Faust's
        app.lot_takers[self.messages.get_topic_name()] = intake.put
        app.task(intake.run)
        self.intake = intake
        return intake

    def reader(self, topic: str) -> RangeReader:
        """A reader of offset ranges of `topic` (`streams.kafka.consume.RangeReader`: one
        consumer of its own, started on first use), stopped with the app."""
        reader = RangeReader(self.settings, topic, self.servers)
        self._readers.append(reader)
        return reader

    async def publish(self, topic: Any, records: Sequence[Record]) -> Published:
        """Produce `records` to `topic` in record batches and return once the broker has
        acknowledged every one of them, or refused it for good (`streams.kafka.batches`:
        the guarantee and what `PublishFailed` means)."""
        producer = await self.app.maybe_start_producer()
        return await publish(producer._ensure_producer(), topic.get_topic_name(), records)

    def lots(self) -> Lots:
        """Tasks a stage writes its lots in, stopped before the app's producer (`Lots`)."""
        lots = Lots()
        self._lots.append(lots)
        return lots

    def outbox(self, topic: Any) -> Outbox:
        """Records that concurrent tasks produce to `topic` one at a time, sent in lots
        (`streams.kafka.batches.Outbox`, OUTBOX_LINGER_SECONDS)."""
        return Outbox(lambda records: self.publish(topic, records), OUTBOX_LINGER_SECONDS)

    def next_offset(self, partition: int) -> int | None:
        """The next offset of `partition` of chorus.messages to apply (None: none applied)."""
        found = self.positions.get(str(partition), partition)
        return int(found) if found is not None else None

    def unread(self, partition: int) -> int:
        """How many records of `partition` of chorus.messages are in the log past the next
        one to apply, as of the consumer's last fetch; 0 when that is not known (nothing
        applied or fetched yet, the partition not assigned, the consumer not started)."""
        applied = self.next_offset(partition)
        if applied is None:
            return 0
        tp = TopicPartition(self.messages.get_topic_name(), partition)
        try:
            highwater = self.app.consumer.highwater(tp)
        except (AssertionError, NotReady):  # aiokafka asserts the partition is assigned
            return 0
        return max(highwater - applied, 0) if highwater is not None else 0

    def read_through(self, partition: int, at: datetime) -> bool:
        """Whether this role has read `partition` of chorus.messages up to `at`: it applied a
        record stamped at or after it, or nothing is left unread (`unread`). Behind a
        backlog it has not, and messages stamped before `at` may still come."""
        if self.read_ms.get(partition, 0) >= int(at.timestamp() * 1000):  # stamped in ms
            return True
        return self.unread(partition) == 0

    async def in_order(self, partition: int, offset: int, timestamp_ms: int = 0) -> bool:
        """Whether a stage may apply the record at `partition`@`offset` of chorus.messages:
        the next one (the partition's position moves past it, whatever the stage makes of
        it) or one applied before (redelivered; the stages are idempotent by offset). A
        record past the next one means the consumer skipped records (chorus.messages is never
        compacted nor transactional, so its offsets are contiguous; seen after restarts):
        applying it would make the offset guards drop the skipped ones for good, so the
        consumer is sought back to the next one instead."""
        expected = self.next_offset(partition)
        if expected is not None and offset > expected:
            log.error("partition %s jumped from %s to %s; seek back", partition, expected, offset)
            topic = self.messages.get_topic_name()
            await self.app.consumer.seek(TopicPartition(topic, partition), expected)
            return False
        if expected is None or offset == expected:
            self.positions.set(str(partition), offset + 1, partition, offset)
            if timestamp_ms > self.read_ms.get(partition, 0):
                self.read_ms[partition] = timestamp_ms
        return True
