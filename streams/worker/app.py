"""A role's Faust app (both roles): built from the settings, with the role's consumer group,
web port and data directory, its RocksDB databases sharing one memory budget, and the
wait Faust makes before handing partitions over that checkpoints what it waits for.

The worker's two roles, each a Faust app with its own consumer group (`streams.worker.
compose`): "fold" validates, folds and serves the public HTTP API on CHORUS_WEB_PORT;
"context" writes summaries and recaps and serves its readiness, costs and metrics on
`Settings.context_web_port`. They share data through Kafka topics only.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faust
import rocksdict
from faust.stores.rocksdb import RocksDBOptions

from streams.kafka.clients import bootstrap_servers, client_options
from streams.kafka.groups import group_instance_id
from streams.settings import Settings
from streams.topology import Role, role_app_id
from streams.worker.consumer import ChorusTransport, LotTaker
from streams.worker.restore import restore_before_joining

if TYPE_CHECKING:
    from streams.worker.checkpoint import Checkpoint

log = logging.getLogger(__name__)

# While Faust waits for every delivered message to be acknowledged, how often what is held
# is checkpointed.
WAIT_EMPTY_CHECKPOINT_SECONDS = 0.05
# Of the role's RocksDB budget, what its memtables may take (the rest is the block cache
# they are charged to): every database of the role writes into the same budget.
ROCKSDB_WRITE_BUFFER_SHARE = 0.5
# A memtable's size: small, so that the shared budget flushes often rather than holding
# many large ones (Faust's default is 64 MiB per database, three of them).
ROCKSDB_WRITE_BUFFER_BYTES = 8 * 1024 * 1024
# A time index deletes an entry as each fires, and a scan for what is due next steps over
# every deletion RocksDB has not compacted away: in 8 MiB memtables, 100,000s of them (the
# 64 newest due past 300,000 deleted: 49–60 ms; a recap tick held the loop 517 ms at
# 1,000,000 channels). Its databases flush small memtables and compact a file as soon as a
# window of DELETION_WINDOW entries in it holds DELETIONS_IN_WINDOW deletions (RocksDB's
# CompactOnDeletionCollector): the same scan took 1–11 ms.
INDEX_WRITE_BUFFER_BYTES = 1024 * 1024
DELETION_WINDOW, DELETIONS_IN_WINDOW = 128, 64


def role_web_port(settings: Settings, role: Role) -> int:
    """Where the role's web server listens: the public API for the fold role."""
    return settings.context_web_port if role == "context" else settings.web_port


def role_url(settings: Settings, role: Role) -> str:
    """The web server of `role` on this host (for readiness probes)."""
    host = "127.0.0.1" if settings.web_host in ("0.0.0.0", "::", "") else settings.web_host
    return f"http://{host}:{role_web_port(settings, role)}"


def record_batch_bytes(settings: Settings) -> int:
    """The largest record batch a role's producers build. The broker checks a whole batch
    against the topic's max.message.bytes (max_message_bytes + 64 KiB on chorus's topics):
    two large dead letters in one batch were refused when the batch could outgrow it."""
    return min(settings.producer_batch_bytes, settings.max_message_bytes)


def role_data_dir(settings: Settings, role: Role) -> str:
    """The role's local table stores; two processes must not share a RocksDB directory."""
    return str(settings.data_dir if role == "fold" else Path(settings.data_dir) / "context")


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


class SharedRocksDB(RocksDBOptions):
    """Faust's RocksDB options, but every database opened with them shares one block cache
    and one write-buffer manager charged to it: the role's RocksDB memory is `budget` bytes
    however many tables and partitions (and standbys) it opens (Kafka Streams'
    `RocksDBConfigSetter` with a shared cache and `WriteBufferManager`)."""

    def __init__(self, budget: int) -> None:
        super().__init__(write_buffer_size=ROCKSDB_WRITE_BUFFER_BYTES, max_write_buffer_number=2)
        self.cache = rocksdict.Cache(budget)
        self.write_buffers = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            int(budget * ROCKSDB_WRITE_BUFFER_SHARE), False, self.cache
        )
        self.compacts_deletions = False

    def for_a_time_index(self) -> SharedRocksDB:
        """These options for a time index's databases, in the same budget: small memtables,
        files dense with deletions compacted at once (INDEX_WRITE_BUFFER_BYTES)."""
        index = copy.copy(self)
        index.write_buffer_size = INDEX_WRITE_BUFFER_BYTES
        index.compacts_deletions = True
        return index

    def as_options(self) -> Any:
        options = super().as_options()
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(self.bloom_filter_size, True)
        table.set_block_cache(self.cache)
        table.set_cache_index_and_filter_blocks(True)
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        options.set_block_based_table_factory(table)
        options.set_write_buffer_manager(self.write_buffers)
        if self.compacts_deletions:
            options.add_compact_on_deletion_collector_factory(
                DELETION_WINDOW, DELETIONS_IN_WINDOW, 0.0
            )
        return options


def share_rocksdb_budget(table: Any, options: SharedRocksDB) -> None:
    """Open `table`'s RocksDB databases with `options` (before any is opened: Faust opens
    them lazily, when partitions are assigned). A table on another store is left as it is."""
    store = table.data
    if hasattr(store, "rocksdb_options") and getattr(store, "use_rocksdict", False):
        store.rocksdb_options = options


class ChorusApp(faust.App):
    """Faust's app, whose stage records are acknowledged only by checkpoints.

    Faust waits until every delivered message is acknowledged before it hands partitions
    over (a rebalance) or stops its consumer (`App._consumer_wait_empty`). A message held by
    a checkpoint (`Checkpoint.hold`) is acknowledged once a checkpoint writes what it
    changed, so checkpoints go on meanwhile: the checkpoint timer stops with the app, and a
    batch already taken from the intake (`streams.worker.intake`) may still be folded while
    Faust waits."""

    checkpoint: Checkpoint | None = None
    # Set by `build_app`: its tables' stores are restored before the consumer joins.
    settings: Settings | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # topic -> where its records go a lot at a time, past Faust's conductor and streams
        # (`streams.worker.consumer`, `streams.worker.intake`).
        self.lot_takers: dict[str, LotTaker] = {}

    def _new_transport(self) -> Any:
        # Faust's aiokafka transport, its consumer delivering a lot of records per task
        # (`streams.worker.consumer`).
        return ChorusTransport(self.conf.broker_consumer, self)

    async def on_start(self) -> None:
        await super().on_start()
        if self.settings is None:
            return
        try:
            restored = await restore_before_joining(self, self.settings, list(self.tables.values()))
        except Exception as error:  # the stores keep what was written: Faust goes on
            log.warning("the restore before joining stopped: %r", error)
            return
        if restored.skipped:
            log.info("no restore before joining: %s", restored.skipped)
        else:
            log.info(
                "restored %d changelog records of %d partitions in %.1f s before joining",
                restored.records,
                restored.partitions,
                restored.seconds,
            )

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


def build_app(settings: Settings, role: Role, servers: str | None = None) -> ChorusApp:
    """The role's Faust app on `servers` (the settings' bootstrap servers unless given)."""
    servers = servers or bootstrap_servers(settings)
    app = ChorusApp(
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
        producer_max_batch_size=record_batch_bytes(settings),
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
    app.settings = settings
    return app
