"""Kafka connection options shared by every client chorus creates (aiokafka and Faust)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, KafkaError

from streams.errors import ChorusError
from streams.settings import Settings


class ProducerStopped(ChorusError):
    """An `OwnProducer` asked for after it stopped."""


class NoBrokerError(ChorusError):
    """No cluster is configured and no local broker is running."""


# The folder that holds the chorus source when chorus runs from a checkout (an editable
# install or the source tree); an installed copy has no pyproject.toml beside its packages.
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _in_checkout() -> bool:
    return (_SOURCE_ROOT / "pyproject.toml").is_file()


def local_run_dir(settings: Settings) -> Path:
    """The embedded broker's run folder: one per checkout, so two checkouts on a machine
    never share a broker's data (`.chorus/broker` in the checkout). With CHORUS_BROKER_HOME
    set, or for an installed chorus, `run` under the broker home (~/.cache/chorus)."""
    if "broker_home" not in settings.model_fields_set and _in_checkout():
        return _SOURCE_ROOT / ".chorus" / "broker"
    return settings.broker_home / "run"


def bootstrap_servers(settings: Settings) -> str:
    """The configured cluster, else the local broker started by `chorus broker start`."""
    if settings.bootstrap_servers:
        return settings.bootstrap_servers
    from streams.ops.broker import cluster_status

    run_dir = local_run_dir(settings)
    cluster = cluster_status(run_dir)
    if cluster is None:
        raise NoBrokerError(_no_broker(run_dir))
    return cluster.bootstrap_servers


def _no_broker(run_dir: Path) -> str:
    """What to do when no broker is configured and none runs from `run_dir`. A checkout
    runs its own broker; an installed chorus (an agent's project) is pointed at one that a
    checkout runs, which `chorus broker start` here would not be: it would start another."""
    if _in_checkout():
        return (
            f"no Kafka broker (none runs from {run_dir}): run `chorus broker start` "
            "(or `make broker`), or set CHORUS_BOOTSTRAP_SERVERS to an existing cluster"
        )
    return (
        "no Kafka broker configured: set CHORUS_BOOTSTRAP_SERVERS to the broker your worker "
        "uses (`chorus broker status` in the chorus checkout that runs it prints it, e.g. "
        f"127.0.0.1:9092); none runs from {run_dir}, where `chorus broker start` would start "
        "another"
    )


class MissingTopicError(ChorusError, LookupError):
    pass


class BrokerUnreachable(ChorusError):
    """The Kafka cluster chorus was pointed at does not answer."""


Client = TypeVar("Client", AIOKafkaConsumer, AIOKafkaProducer, AIOKafkaAdminClient)
T = TypeVar("T")

log = logging.getLogger(__name__)


class _LastErrors(logging.Handler):
    """The last few errors aiokafka logged while a client started: its connection error
    says only "unable to bootstrap", the log says why (authentication failed, certificate
    verify failed, an unsupported SASL mechanism)."""

    def __init__(self, kept: int = 3) -> None:
        super().__init__(logging.WARNING)
        self.kept = kept
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = " ".join(record.getMessage().split())
        if message and message not in self.messages:
            self.messages = [*self.messages, message][-self.kept :]


async def started(client: Client, settings: Settings) -> Client:
    """`client` started; when the cluster does not answer, the client is stopped again (a
    client left open is reported as it is collected) and BrokerUnreachable says in one line
    where chorus looked, which setting names the cluster, and why the connection failed
    when aiokafka logged it."""
    errors = _LastErrors()
    aiokafka_log = logging.getLogger("aiokafka")
    aiokafka_log.addHandler(errors)
    try:
        await client.start()
    except KafkaConnectionError as error:
        await (client.close() if isinstance(client, AIOKafkaAdminClient) else client.stop())
        why = f" ({'; '.join(errors.messages)})" if errors.messages else ""
        raise BrokerUnreachable(unreachable(settings, error) + why) from None
    finally:
        aiokafka_log.removeHandler(errors)
    return client


def unreachable(settings: Settings, error: BaseException) -> str:
    """Why no client could connect: the address and where it came from."""
    if settings.bootstrap_servers:
        where = f"{settings.bootstrap_servers} (CHORUS_BOOTSTRAP_SERVERS)"
    else:
        where = (
            f"{bootstrap_servers(settings)} (the local broker of `chorus broker start`; "
            "set CHORUS_BOOTSTRAP_SERVERS for another cluster)"
        )
    return f"cannot reach Kafka at {where}: {error}"


async def topic_partitions(client: AIOKafkaProducer | AIOKafkaConsumer, topic: str) -> set[int]:
    """The topic's partitions; a clear error instead of waiting for a topic that is not there."""
    # The producer exposes its network client as `client`, the consumer as `_client`.
    network = client.client if isinstance(client, AIOKafkaProducer) else client._client
    cluster = await network.fetch_all_metadata()
    partitions = cluster.partitions_for_topic(topic)
    if not partitions:
        raise MissingTopicError(
            f"topic {topic!r} does not exist; run `chorus topics create` (or start a worker)"
        )
    return set(partitions)


def client_options(settings: Settings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers(settings),
        "security_protocol": settings.security_protocol,
    }
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        options["ssl_context"] = ssl.create_default_context(
            cafile=str(settings.ssl_cafile) if settings.ssl_cafile else None
        )
    if settings.sasl_mechanism:
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = (
            settings.sasl_password.get_secret_value() if settings.sasl_password else None
        )
    return options


def producer(settings: Settings, **overrides: Any) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        **{
            **client_options(settings),
            "acks": "all",
            "enable_idempotence": True,
            "max_request_size": settings.topic_max_message_bytes,
            **overrides,
        }
    )


class OwnProducer:
    """An aiokafka producer of one writer's own (`make()`), started on first use by
    whichever caller comes first, stopped once (`stop`); asked for after it stopped, it
    raises `ProducerStopped`.

    Why a writer gets one: aiokafka sends one request at a time to a broker, so whatever
    another writer queues meanwhile waits for that request's acknowledgement. The checkpoints'
    changelog writes have one of their own, so an agent's wake signal never waits for a
    checkpoint (the Java client pipelines up to five requests per connection instead)."""

    def __init__(self, make: Callable[[], AIOKafkaProducer], settings: Settings) -> None:
        self.make = make
        self.settings = settings
        self._producer: AIOKafkaProducer | None = None
        self._stopped = False
        self._lock = asyncio.Lock()

    async def __call__(self) -> AIOKafkaProducer:
        async with self._lock:
            if self._stopped:
                raise ProducerStopped("the producer was stopped (the process is stopping)")
            if self._producer is None:
                self._producer = await started(self.make(), self.settings)
            return self._producer

    async def stop(self) -> None:
        async with self._lock:
            self._stopped = True
            if self._producer is not None:
                await self._producer.stop()
                self._producer = None


def consumer(settings: Settings, *topics: str, **overrides: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(*topics, **{**client_options(settings), **overrides})


def drop_fetched_ahead(kafka: AIOKafkaConsumer) -> None:
    """Free what a consumer fetched and has not returned, before a seek, an assign or
    a stop drops it (docs/reliability.md, bug 25).

    aiokafka keeps each partition's fetched bytes (up to `max_partition_fetch_bytes`, 1 MiB)
    in a `PartitionRecords` whose record generator refers back to it: a reference cycle that
    only reading the records to the end breaks. Dropped unread, only the cyclic collector
    frees those bytes, and in a worker role it never does: the role freezes what is alive
    after each batch (`streams.worker.collector`), and its leak check counts Python's small
    blocks, not these buffers. Closing each generator breaks its cycle, so what is dropped
    is freed at once. Reads aiokafka 0.14's fetcher (`_fetcher._records`: partition ->
    `FetchResult` or `FetchError`, from its start); the test of `RangeReader` fails if
    that changes."""
    if kafka._fetcher is None:
        return
    fetched = kafka._fetcher._records
    for result in fetched.values():
        records = getattr(result, "_partition_records", None)
        if records is not None and records._records_iterator is not None:
            records._records_iterator.close()
    fetched.clear()


def admin(settings: Settings) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(**client_options(settings))


async def with_retries(
    call: Callable[[], Awaitable[T]], attempts: int = 10, delay: float = 2.0
) -> T:
    """Retry Kafka's transient start-up errors, e.g. a group coordinator that a fresh
    cluster has not elected yet."""
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except KafkaError as error:
            if not error.retriable or attempt == attempts:
                raise
            log.warning("%s; retrying in %.0fs (%d/%d)", error, delay, attempt, attempts)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")
