"""What the worker's stages share: the Faust app, its topics and tables, the checkpoint
that writes them, the channel configs and the meter. It imports no stage; `streams.worker.compose`
wires the stages onto it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, Literal

import faust
from faust.types import TP as TopicPartition
from faust.types import EventT

from projections.channel import ChannelStanding, standing
from projections.model import LogPosition, Message
from projections.projection import ChannelProjection, Folded
from streams.dead_letters import send_dead_letter
from streams.fold_store import stored_folded
from streams.kafka.batches import Outbox, Published, Record, publish
from streams.kafka.clients import bootstrap_servers, client_options
from streams.kafka.consume import RangeReader
from streams.kafka.groups import group_instance_id
from streams.llm.metering import CostMeter
from streams.records import validate_record
from streams.registry import registered_projections
from streams.settings import Settings
from streams.topology import (
    CHANNEL_CONFIG,
    DEAD_LETTERS,
    DRIVER_EVENTS,
    MESSAGES,
    RECAPS,
    SUMMARIES,
    changelog_config,
    fold_table_name,
)
from streams.worker.checkpoint import CACHED_KEYS, Checkpoint, Codec, Columns, RefusedWrite
from streams.worker.configs import ChannelConfigs

log = logging.getLogger(__name__)

RAW = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}

# The fold tables hold `Folded`s in memory and their records in the store.
FOLDED = Codec(encode=Folded.as_record, decode=stored_folded)

# While Faust waits for every delivered message to be acknowledged, how often what is held
# is checkpointed.
WAIT_EMPTY_CHECKPOINT_SECONDS = 0.05

# How long a summary or recap waits for others before they are produced together
# (`streams.kafka.batches.Outbox`): each lot is one produce request and wakes each reader
# of the topic once, instead of once per record; nothing waits on a summary this long.
OUTBOX_LINGER_SECONDS = 0.2

# Channels whose standing (`Runtime.standing`) is kept between views.
STANDINGS_KEPT = 10_000

# The worker's two roles, each a Faust app with its own consumer group (`streams.worker.
# compose`): "fold" validates, folds and serves the public HTTP API on CHORUS_WEB_PORT;
# "context" writes summaries and recaps and serves its readiness, costs and metrics on
# `Settings.context_web_port`. They share data through Kafka topics only.
Role = Literal["fold", "context"]
ROLES: tuple[Role, ...] = ("fold", "context")


# The context role's group, versioned by the form of its stored state: a new version is a
# new group, which reads the log and its own outputs afresh (docs/operators.md, "Upgrading").
CONTEXT_GROUP = "context-v2"


def role_app_id(settings: Settings, role: Role) -> str:
    """The role's Faust app id (its consumer group, the prefix of its changelogs): the fold
    role keeps CHORUS_APP_ID, so the fold tables' changelogs of earlier versions stay valid."""
    return settings.app_id if role == "fold" else f"{settings.app_id}-{CONTEXT_GROUP}"


def role_web_port(settings: Settings, role: Role) -> int:
    """Where the role's web server listens: the public API for the fold role."""
    return settings.context_web_port if role == "context" else settings.web_port


def role_url(settings: Settings, role: Role) -> str:
    """The web server of `role` on this host (for readiness probes)."""
    host = "127.0.0.1" if settings.web_host in ("0.0.0.0", "::", "") else settings.web_host
    return f"http://{host}:{role_web_port(settings, role)}"


def role_data_dir(settings: Settings, role: Role) -> str:
    """The role's local table stores; two processes must not share a RocksDB directory."""
    return str(settings.data_dir if role == "fold" else settings.data_dir / "context")


def _credentials(settings: Settings) -> Any:
    """Faust's form of the TLS and SASL options every chorus client uses."""
    options = client_options(settings)
    context = options.get("ssl_context")
    if settings.sasl_mechanism:
        return faust.SASLCredentials(
            username=options["sasl_plain_username"],
            password=options["sasl_plain_password"],
            mechanism=settings.sasl_mechanism,
            ssl_context=context,
        )
    return faust.SSLCredentials(context) if context else None


class ChorusApp(faust.App):
    """Faust's app, whose stage records are acknowledged only by checkpoints.

    Faust waits until every delivered message is acknowledged before it hands partitions
    over (a rebalance) or stops its consumer (`App._consumer_wait_empty`). A message held by
    a checkpoint (`Checkpoint.hold`) is acknowledged once a checkpoint writes what it
    changed, so checkpoints go on meanwhile: the checkpoint timer stops with the app, and a
    batch already taken from the stream may still be folded while Faust waits."""

    checkpoint: Checkpoint | None = None

    async def _consumer_wait_empty(self, consumer: Any, logger: Any) -> None:
        checkpoint = self.checkpoint
        if checkpoint is None:
            await super()._consumer_wait_empty(consumer, logger)
            return
        waited = asyncio.Event()

        async def checkpoint_what_is_held() -> None:
            while not waited.is_set():
                if checkpoint.held:
                    await checkpoint.checkpoint()
                await asyncio.sleep(WAIT_EMPTY_CHECKPOINT_SECONDS)

        checkpoints = asyncio.ensure_future(checkpoint_what_is_held())
        try:
            await super()._consumer_wait_empty(consumer, logger)
        finally:
            waited.set()
            await checkpoints


class Runtime:
    """Everything the worker runs, built from settings (no globals, so tests build their own)."""

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
        servers = broker or bootstrap_servers(settings)
        self.servers = servers
        self.app = ChorusApp(
            role_app_id(settings, role),
            broker=[f"kafka://{server}" for server in servers.split(",")],
            broker_credentials=_credentials(settings),
            store=settings.store,
            datadir=role_data_dir(settings, role),
            topic_partitions=settings.partitions,
            topic_replication_factor=settings.replication_factor,
            topic_allow_declare=True,
            web_bind=settings.web_host,
            web_host=settings.web_host,
            web_port=role_web_port(settings, role),
            # Faust's own /table views would serve table data without the bearer token.
            web_tables_enabled=False,
            producer_acks=-1,
            producer_linger=settings.producer_linger_ms / 1000,
            # The broker checks a whole record batch against the topic's max.message.bytes
            # (max_message_bytes + 64 KiB on chorus's topics): two large dead letters in one
            # batch were refused when the batch could outgrow it.
            producer_max_batch_size=min(settings.producer_batch_bytes, settings.max_message_bytes),
            producer_max_request_size=settings.topic_max_message_bytes,
            consumer_auto_offset_reset="earliest",
            consumer_max_fetch_size=settings.consumer_fetch_bytes,
            table_standby_replicas=settings.standby_replicas,
            broker_session_timeout=settings.session_timeout_seconds,
            consumer_group_instance_id=group_instance_id(settings),
            broker_heartbeat_interval=min(3.0, settings.session_timeout_seconds / 3),
            key_serializer="raw",
            value_serializer="raw",
        )
        self.messages = self.app.topic(settings.topic(MESSAGES), **RAW)
        self.driver_events = self.app.topic(settings.topic(DRIVER_EVENTS), **RAW)
        self.dead_letters = self.app.topic(settings.topic(DEAD_LETTERS), **RAW)
        self.channel_config_topic = self.app.topic(settings.topic(CHANNEL_CONFIG), **RAW)
        self.summaries = self.app.topic(settings.topic(SUMMARIES), **RAW)
        self.recaps = self.app.topic(settings.topic(RECAPS), **RAW)

        self.meter = CostMeter()
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
            on_refused=self._refused_in_checkpoint,
        )
        self.app.checkpoint = self.checkpoint
        # The fold tables live in the fold role only (the context role reads no fold), so
        # `folded` and `standing` find nothing there.
        # They are not guarded: the fold step bounds every state (max_state_bytes).
        folding = role == "fold"
        self.folds = {
            p.name: self.checkpoint.table(
                self.table(fold_table_name(p)), cache=CACHED_KEYS, codec=FOLDED, guard=False
            )
            for p in self.projections
            if folding
        }
        self._standings: OrderedDict[str, tuple[Any, Any, ChannelStanding]] = OrderedDict()

        self.channel_config = self.table("channel-config")
        self.configs = ChannelConfigs(self.channel_config, settings)
        # Next offset to fold (or, in the context role, to follow) per messages partition:
        # neither role applies a message past a gap.
        self.positions = self.checkpoint.table(
            self.table("fold-positions" if folding else "context-positions"), cache=CACHED_KEYS
        )

        async def forget(*_: Any, **__: Any) -> None:
            self.forget_cached()

        app = self.app
        for moved in (app.on_partitions_revoked, app.on_partitions_assigned):
            moved.connect(forget)
        app.on_rebalance_complete.connect(forget)  # after the tables' recovery

    @functools.cached_property
    def channel_state(self) -> Columns:
        """The context role's per-channel state, one record per channel for all its stages
        (the summaries' pending batch, the recap status): one changelog record per changed
        channel per checkpoint. Made when the first stage asks (before the app starts)."""
        return Columns(self.checkpoint, self.table("channel-state"))

    def folds_of(self, channel: str) -> dict[str, Folded | None]:
        """Every projection's fold of `channel` as this process holds it, checkpointed or not
        (None for a projection with none): the one way the views, timers and checks read
        a fold."""
        return {name: table.get(channel) for name, table in self.folds.items()}

    def table(self, name: str) -> Any:
        """A changelog-backed table whose changelog accepts what the chorus topics accept
        (the broker's default, 1 MiB, is smaller than a table value may be)."""
        return self.app.Table(
            name,
            partitions=self.settings.partitions,
            extra_topic_configs=changelog_config(self.settings),
        )

    def take_messages(
        self, name: str, on_batch: Callable[[Sequence[EventT]], Awaitable[None]]
    ) -> None:
        """The role's agent `name` on chorus.messages: `on_batch` is handed what arrives, in
        batches of at most CHORUS_FOLD_BATCH_MAX records or CHORUS_FOLD_BATCH_WAIT_MS,
        between two checkpoints (`Checkpoint.between_batches`). The batch's records stay
        held until a checkpoint holds what they changed (at once when the memory bound is
        met)."""

        @self.app.agent(self.messages, name=name)
        async def take(stream: Any) -> None:
            settings, checkpoint = self.settings, self.checkpoint
            wait = settings.fold_batch_wait_ms / 1000
            async for batch in stream.take_events(settings.fold_batch_max, wait):
                async with checkpoint.between_batches():
                    for event in batch:
                        checkpoint.hold(event)
                    await on_batch(batch)
                if checkpoint.over_bound():
                    await checkpoint.checkpoint()

    def on_messages_assigned(self, moved: Callable[[frozenset[int]], None]) -> None:
        """`moved(owned)` with the chorus.messages partitions this worker owns, each time
        the group assigns them (Faust's `on_partitions_assigned`)."""
        topic = self.messages.get_topic_name()

        async def assigned(_: Any, tps: Collection[TopicPartition], **__: Any) -> None:
            moved(frozenset(tp.partition for tp in tps if tp.topic == topic))

        self.app.on_partitions_assigned.connect(assigned)

    def reader(self, topic: str) -> RangeReader:
        """A reader of offset ranges of `topic` (`streams.kafka.consume.RangeReader`: one
        consumer of its own, started on first use), stopped with the app."""
        reader = RangeReader(self.settings, topic, self.servers)

        async def stop(*_: Any, **__: Any) -> None:
            await reader.stop()

        self.app.on_before_shutdown.connect(stop)
        return reader

    def validate(
        self, key: bytes | None, value: bytes | None, partition: int, offset: int, at_ms: int = 0
    ) -> Message:
        """The record at `partition`@`offset` of chorus.messages as a message, through the
        fold's gate (`streams.records.validate_record`: MessageError with the reason when it
        refuses it), which every stage that reads the log passes its records through."""
        return validate_record(
            key,
            value,
            self.settings.max_message_bytes,
            LogPosition(partition, offset, at_ms),
            partition=partition,
            partitions=self.messages_partitions(),
        )

    async def publish(self, topic: Any, records: Sequence[Record]) -> Published:
        """Produce `records` to `topic` in record batches and return once the broker has
        acknowledged every one of them, or refused it for good (`streams.kafka.batches`:
        the guarantee and what `PublishFailed` means)."""
        producer = await self.app.maybe_start_producer()
        return await publish(producer._ensure_producer(), topic.get_topic_name(), records)

    def outbox(self, topic: Any) -> Outbox:
        """Records that concurrent tasks produce to `topic` one at a time, sent in lots
        (`streams.kafka.batches.Outbox`, OUTBOX_LINGER_SECONDS)."""
        return Outbox(lambda records: self.publish(topic, records), OUTBOX_LINGER_SECONDS)

    def changelog_topics(self) -> list[str]:
        """Every table's changelog topic (to create them before Faust's clients start)."""
        return sorted(table.changelog_topic.get_topic_name() for table in self.app.tables.values())

    async def _refused_in_checkpoint(self, refused: RefusedWrite) -> None:
        """A checkpoint's write too large for its changelog: logged, counted and sent to
        the dead letters with the position of the message that made it."""
        log.error("%s (source %s@%s)", refused.reason, refused.partition, refused.offset)
        self.meter.refused_writes.labels(refused.table).inc()
        await self.dead_letter(
            refused.reason,
            "table-write",
            refused.key.encode(),
            None,
            -1 if refused.partition is None else refused.partition,
            -1 if refused.offset is None else refused.offset,
            topic=refused.topic,
        )

    async def dead_letter(
        self,
        reason: str,
        stage: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        *,
        topic: str | None = None,
        level: int = logging.WARNING,
    ) -> None:
        """Log `reason` and dead-letter the record at `partition`@`offset` of `topic`
        (chorus.messages unless named; a partition of -1, unknown, leaves the dead letter's
        partition to the key): `streams.dead_letters.send_dead_letter`, which never raises."""
        await send_dead_letter(
            self.dead_letters,
            topic or self.messages.get_topic_name(),
            reason,
            stage,
            key,
            value,
            partition,
            offset,
            level,
        )

    def next_offset(self, partition: int) -> int | None:
        """The next offset of `partition` of chorus.messages to apply (None: none applied)."""
        found = self.positions.get(str(partition))
        return int(found) if found is not None else None

    async def in_order(self, partition: int, offset: int) -> bool:
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
        return True

    def forget_cached(self) -> None:
        """Partitions moved: recovery and standbys write the tables behind the caches."""
        self.checkpoint.forget()
        self.configs.forget()

    def standing(self, channel: str) -> ChannelStanding | None:
        """Where the channel stands by its folds and its termination conditions (None: no
        fold of it here). Kept for the last STANDINGS_KEPT channels asked, while their fold
        offsets and conditions are the same: views that list every channel ask often."""
        stored = self.folds_of(channel)
        if all(folded is None for folded in stored.values()):
            return None
        conditions = self.configs.conditions(channel)
        offsets = tuple(folded.offset if folded else None for folded in stored.values())
        key = (offsets, id(conditions))
        cached = self._standings.get(channel)
        if cached is not None and cached[0] == key and cached[1] is conditions:
            self._standings.move_to_end(channel)
            return cached[2]
        found = standing(self.projections, stored, conditions)
        self._standings[channel] = (key, conditions, found)
        while len(self._standings) > STANDINGS_KEPT:
            self._standings.popitem(last=False)
        return found

    def owned_partitions(self) -> frozenset[int]:
        """The messages partitions this worker actively owns (none before the group assigned
        any, or while it rebalances)."""
        topic = self.messages.get_topic_name()
        try:
            actives = self.app.assignor.assigned_actives()
        except Exception:  # not started yet
            return frozenset()
        return frozenset(tp.partition for tp in actives if tp.topic == topic)

    def messages_partitions(self) -> int:
        """chorus.messages' partition count: the consumer's metadata once it has it, else
        the settings' (Faust refuses a source topic whose count differs from its tables')."""
        known = self.app.consumer.topic_partitions(self.messages.get_topic_name())
        return int(known) if known else self.settings.partitions

    def messages_partition(self, channel: str) -> int | None:
        """The channel's partition when this worker actively owns it, else None.

        Timers use it to act only on their own channels: local stores also hold standby
        copies of partitions another worker owns.
        """
        topic = self.messages.get_topic_name()
        try:
            partition = self.app.producer.key_partition(topic, channel.encode()).partition
        except Exception:  # not started yet
            return None
        return int(partition) if partition in self.owned_partitions() else None
