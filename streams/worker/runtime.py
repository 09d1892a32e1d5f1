"""What the worker's stages share: the Faust app, its topics and tables, the staged table
writes, the channel configs and the meter. It imports no stage; `streams.worker.compose`
wires the stages onto it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import OrderedDict
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import faust
from aiokafka.errors import (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)
from faust.types import TP as TopicPartition

from projections.channel import ChannelStanding, standing
from projections.projection import ChannelProjection, Folded
from streams.errors import ChorusError
from streams.fold_store import is_split, whole_fold
from streams.kafka.clients import bootstrap_servers
from streams.llm.metering import CostMeter
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
    parts_table_name,
)
from streams.worker.configs import ChannelConfigs
from streams.worker.staging import RefusedWrite, Staging

log = logging.getLogger(__name__)

RAW = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}

# A record ready to produce: (key, value, partition); a partition of None leaves the choice
# to the key.
Record = tuple[bytes | None, bytes | None, int | None]


class PublishFailed(ChorusError):
    """Records of a batch the broker did not acknowledge (or that could not be queued)."""


# What no retry can make the broker accept: a record (or batch) too large for the topic.
REFUSED_FOR_GOOD = (MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError)


# Channels whose standing (`Runtime.standing`) is kept between views.
STANDINGS_KEPT = 10_000

# The worker's two roles, each a Faust app with its own consumer group (`streams.worker.
# compose`): "fold" validates, folds and serves the public HTTP API on CHORUS_WEB_PORT;
# "context" writes summaries and recaps and serves its readiness, costs and metrics on
# `Settings.context_web_port`. They share data through Kafka topics only.
Role = Literal["fold", "context"]
ROLES: tuple[Role, ...] = ("fold", "context")


def role_app_id(settings: Settings, role: Role) -> str:
    """The role's Faust app id (its consumer group, the prefix of its changelogs): the fold
    role keeps CHORUS_APP_ID, so the fold tables' changelogs of earlier versions stay valid."""
    return settings.app_id if role == "fold" else f"{settings.app_id}-context"


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


def _refused_for_good(error: BaseException) -> bool:
    """Faust's producer wraps what aiokafka raises at queue time (`ProducerSendError`)."""
    return isinstance(error, REFUSED_FOR_GOOD) or isinstance(error.__cause__, REFUSED_FOR_GOOD)


@dataclass(frozen=True)
class Refused:
    """A record of a published batch the broker refused for good: its index in the batch."""

    index: int
    error: BaseException


def _credentials(settings: Settings) -> Any:
    context = None
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(
            cafile=str(settings.ssl_cafile) if settings.ssl_cafile else None
        )
    if settings.sasl_mechanism:
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_password.get_secret_value() if settings.sasl_password else None,
            mechanism=settings.sasl_mechanism,
            ssl_context=context,
        )
    return faust.SSLCredentials(context) if context else None


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
        self.app = faust.App(
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
            table_standby_replicas=settings.standby_replicas,
            broker_session_timeout=settings.session_timeout_seconds,
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

        # The fold tables live in the fold role only (the context role reads no fold), so
        # `folded` and `standing` find nothing there.
        folding = role == "fold"
        self.folds = {p.name: self.table(fold_table_name(p)) for p in self.projections if folding}
        self._standings: OrderedDict[str, tuple[Any, Any, ChannelStanding]] = OrderedDict()
        # The second tables of split folds (`streams.fold_store`: commitments one record
        # each, the overview's participants in buckets): read a fold through `folded`, never
        # from `folds` directly.
        self.parts = {
            p.name: self.table(parts_table_name(p))
            for p in self.projections
            if folding and is_split(p)
        }
        self.channel_config = self.table("channel-config")
        self.configs = ChannelConfigs(self.channel_config)
        # Next offset to fold (or, in the context role, to follow) per messages partition:
        # neither role applies a message past a gap.
        self.positions = self.table("fold-positions" if folding else "context-positions")
        self.meter = CostMeter()
        # Table writes of the stages, applied once per key per fold batch; a value that
        # would not fit a changelog record is refused and reported, never sent.
        self.staging = Staging(record_limit=settings.max_message_bytes, on_refused=self._refused)

        @self.app.on_partitions_revoked.connect
        async def forget_on_revoke(app: Any, revoked: Any, **_: Any) -> None:
            self.forget_cached()

        @self.app.on_partitions_assigned.connect
        async def forget_on_assign(app: Any, assigned: Any, **_: Any) -> None:
            self.forget_cached()

        @self.app.on_rebalance_complete.connect
        async def forget_after_recovery(app: Any, **_: Any) -> None:
            self.forget_cached()

    def folded(self, channel: str, name: str) -> Folded | None:
        """The whole fold of `channel` by projection `name` as the tables hold it (None when
        there is none): the one way the views, timers and checks read a fold, since a split
        fold's commitments live in a table of their own."""
        table = self.folds.get(name)
        record = table.get(channel) if table is not None else None
        if record is None:
            return None
        parts = self.parts.get(name)
        return whole_fold(record, parts.get if parts is not None else None, channel)

    def table(self, name: str) -> Any:
        """A changelog-backed table whose changelog accepts what the chorus topics accept
        (the broker's default, 1 MiB, is smaller than a table value may be)."""
        return self.app.Table(
            name,
            partitions=self.settings.partitions,
            extra_topic_configs=changelog_config(self.settings),
        )

    async def publish(self, topic: Any, records: Sequence[Record]) -> list[Refused]:
        """Produce `records` to `topic` through the app's producer, bypassing Faust's
        per-send path (future message, callbacks, sensors), and return once the broker has
        acknowledged every one of them (acks=all), or refused it for good.

        Guarantee: when this returns, every record is durable or in the returned list, so a
        caller that acknowledges its source records after it (the fold agent: the batch is
        acknowledged once `wake` returns) keeps at-least-once and reports the refused ones.
        Refused for good means too large for the topic (`REFUSED_FOR_GOOD`; an operator may
        set a topic's `max.message.bytes` below what chorus sends); since the broker judges a
        whole batch of records at once, each such record is sent again on its own before it
        counts as refused. Any other failure (no leader, timeouts, no metadata) is logged and
        raises `PublishFailed` once every queued record has settled; the records already
        acknowledged stay, and sending the batch again duplicates them (consumers dedupe
        driver events by (channel, offset)).
        """
        if not records:
            return []
        name = topic.get_topic_name()
        producer = await self.app.maybe_start_producer()
        pending: list[tuple[int, Awaitable[Any]]] = []
        too_large: list[int] = []
        errors: list[BaseException] = []
        for index, (key, value, partition) in enumerate(records):
            try:
                pending.append(
                    (index, await producer.send(name, key, value, partition, None, None))
                )
            except Exception as error:  # too large to queue, or e.g. no metadata in time
                if not _refused_for_good(error):
                    errors.append(error)
                    break
                too_large.append(index)
        outcomes = await asyncio.gather(*(sent for _, sent in pending), return_exceptions=True)
        for (index, _), outcome in zip(pending, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                continue
            if _refused_for_good(outcome):
                too_large.append(index)
            else:
                errors.append(outcome)
        if errors:
            acknowledged = sum(not isinstance(outcome, BaseException) for outcome in outcomes)
            missing = len(records) - acknowledged - len(too_large)
            reason = (
                f"{missing} of {len(records)} records to {name} not acknowledged: "
                f"{type(errors[0]).__name__}: {errors[0]}"
            )
            log.error("%s", reason)
            raise PublishFailed(reason) from errors[0]
        refused: list[Refused] = []
        for index in sorted(too_large):
            refused += await self._alone(producer, name, index, records[index])
        return refused

    async def _alone(self, producer: Any, name: str, index: int, record: Record) -> list[Refused]:
        """`record` sent in a produce request of its own: [] once acknowledged, [Refused]
        when the broker still refuses it for good."""
        key, value, partition = record
        try:
            await (await producer.send(name, key, value, partition, None, None))
        except Exception as error:
            if not _refused_for_good(error):
                log.error("a record to %s not acknowledged: %r", name, error)
                raise PublishFailed(f"a record to {name} not acknowledged: {error!r}") from error
            log.error("%s refused a record of %s bytes: %r", name, len(value or b""), error)
            return [Refused(index, error)]
        return []

    async def acknowledged(self) -> None:
        """Wait until the broker has acknowledged the records produced so far, the tables'
        changelog writes included (Faust's producer buffer, then aiokafka's batches). A
        producer that is not running (Faust's test harness) has nothing in flight."""
        producer = self.app.producer
        if producer.buffer.state == "running":
            await producer.flush()

    def changelog_topics(self) -> list[str]:
        """Every table's changelog topic (to create them before Faust's clients start)."""
        return sorted(table.changelog_topic.get_topic_name() for table in self.app.tables.values())

    def _refused(self, refused: RefusedWrite) -> None:
        log.error("%s (source %s@%s)", refused.reason, refused.partition, refused.offset)
        self.meter.refused_writes.labels(refused.table).inc()

    def forget_cached(self) -> None:
        """Partitions moved: recovery and standbys write the tables behind the caches."""
        self.staging.forget()
        self.configs.forget()

    def standing(self, channel: str) -> ChannelStanding | None:
        """Where the channel stands by its folds and its termination conditions (None: no
        fold of it here). Kept for the last STANDINGS_KEPT channels asked, while their fold
        offsets and conditions are the same: views that list every channel ask often."""
        records = {name: table.get(channel) for name, table in self.folds.items()}
        if all(record is None for record in records.values()):
            return None
        conditions = self.configs.conditions(channel)
        offsets = tuple(record.get("offset") if record else None for record in records.values())
        key = (offsets, id(conditions))
        cached = self._standings.get(channel)
        if cached is not None and cached[0] == key and cached[1] is conditions:
            self._standings.move_to_end(channel)
            return cached[2]
        stored = {name: self.folded(channel, name) for name in self.folds}
        found = standing(self.projections, stored, conditions)
        self._standings[channel] = (key, conditions, found)
        while len(self._standings) > STANDINGS_KEPT:
            self._standings.popitem(last=False)
        return found

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
            actives = self.app.assignor.assigned_actives()
            partition = self.app.producer.key_partition(topic, channel.encode()).partition
        except Exception:  # not started or not assigned yet
            return None
        return int(partition) if TopicPartition(topic, partition) in actives else None
