"""Kafka clients: where the embedded broker of this chorus runs (one per checkout by
default), and a cluster that does not answer is one clear error."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    GroupCoordinatorNotAvailableError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
)

from streams.kafka import clients
from streams.kafka.clients import (
    BrokerUnreachable,
    NoBrokerError,
    OwnProducer,
    ProducerStopped,
    admin,
    bootstrap_servers,
    consumer,
    local_run_dir,
    producer,
    started,
    with_retries,
)
from streams.ops.broker import free_port
from streams.settings import Settings


def checkout(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "pyproject.toml").write_text('[project]\nname = "chorus"\n')
    return path


@pytest.fixture
def no_broker_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHORUS_BROKER_HOME", raising=False)
    monkeypatch.chdir(Path(__file__).parent)  # no .env file here


def test_each_checkout_has_its_own_run_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_broker_home: None
) -> None:
    found = []
    for name in ("one", "two"):
        root = checkout(tmp_path / name)
        monkeypatch.setattr(clients, "_SOURCE_ROOT", root)
        found.append(local_run_dir(Settings()))
    assert found == [tmp_path / "one/.chorus/broker", tmp_path / "two/.chorus/broker"]


def test_this_checkout_runs_its_broker_under_its_own_chorus_folder(no_broker_home: None) -> None:
    repo = Path(__file__).resolve().parents[4]
    assert local_run_dir(Settings()) == repo / ".chorus" / "broker"


def test_an_installed_chorus_uses_the_broker_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_broker_home: None
) -> None:
    monkeypatch.setattr(clients, "_SOURCE_ROOT", tmp_path / "site-packages")
    assert local_run_dir(Settings()) == Path.home() / ".cache" / "chorus" / "run"


def test_broker_home_set_shares_its_run_dir_whatever_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(clients, "_SOURCE_ROOT", checkout(tmp_path / "one"))
    monkeypatch.setenv("CHORUS_BROKER_HOME", str(tmp_path / "shared"))
    assert local_run_dir(Settings()) == tmp_path / "shared" / "run"


def test_without_a_broker_the_error_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_broker_home: None
) -> None:
    monkeypatch.setattr(clients, "_SOURCE_ROOT", checkout(tmp_path / "one"))
    monkeypatch.delenv("CHORUS_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(NoBrokerError, match=r"none runs from .*one/\.chorus/broker"):
        bootstrap_servers(Settings())


def test_an_installed_client_without_a_broker_is_told_to_name_one_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_broker_home: None
) -> None:
    # Only CHORUS_BROKER_PORT set, as an agent's project might: the checkout's broker runs
    # elsewhere, and starting one here would make a second broker.
    monkeypatch.setattr(clients, "_SOURCE_ROOT", tmp_path / "site-packages")
    monkeypatch.delenv("CHORUS_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("CHORUS_BROKER_PORT", "9192")
    with pytest.raises(NoBrokerError) as raised:
        bootstrap_servers(Settings())
    message = str(raised.value)
    assert message.startswith("no Kafka broker configured: set CHORUS_BOOTSTRAP_SERVERS")
    assert message.index("CHORUS_BOOTSTRAP_SERVERS") < message.index("chorus broker start")
    assert "\n" not in message


@pytest.mark.parametrize("make", [consumer, producer, admin])
async def test_a_client_that_cannot_reach_its_cluster_is_stopped_and_says_where(
    make: object,
) -> None:
    closed = f"127.0.0.1:{free_port()}"
    settings = Settings(bootstrap_servers=closed)
    client = make(settings)  # type: ignore[operator]
    with pytest.raises(BrokerUnreachable) as raised:
        await started(client, settings)
    message = str(raised.value)
    assert closed in message and "CHORUS_BOOTSTRAP_SERVERS" in message
    assert "\n" not in message
    # stopped again: nothing left open to be reported as the client is collected
    assert client._closed  # type: ignore[attr-defined]


async def test_why_a_client_could_not_connect_comes_from_aiokafka_s_log() -> None:
    """aiokafka's connection error says only "unable to bootstrap"; what it logged while
    connecting (here an authentication failure) says why, and goes into the one line."""

    class Refused(AIOKafkaProducer):
        def __init__(self) -> None:
            self.stopped = False

        async def start(self) -> None:
            logging.getLogger("aiokafka.conn").error(
                "Authentication failed for user chorus:\n  bad credentials"
            )
            raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9)]")

        async def stop(self) -> None:
            self.stopped = True

    client = Refused()
    with pytest.raises(BrokerUnreachable) as raised:
        await started(client, Settings(bootstrap_servers="127.0.0.1:9"))
    message = str(raised.value)
    assert message.endswith(
        "Unable to bootstrap from [('127.0.0.1', 9)] "
        "(Authentication failed for user chorus: bad credentials)"
    )
    assert client.stopped and "\n" not in message
    assert not any(
        type(h).__name__ == "_LastErrors" for h in logging.getLogger("aiokafka").handlers
    )


class FakeProducer:
    """What `OwnProducer` needs of an aiokafka producer: start and stop, counted."""

    def __init__(self) -> None:
        self.starts = self.stops = 0

    async def start(self) -> None:
        await asyncio.sleep(0)  # another caller comes meanwhile
        self.starts += 1

    async def stop(self) -> None:
        self.stops += 1


async def test_an_own_producer_starts_once_on_first_use_and_refuses_after_it_stopped() -> None:
    made: list[FakeProducer] = []

    def make() -> Any:
        made.append(FakeProducer())
        return made[-1]

    own = OwnProducer(make, Settings(bootstrap_servers="127.0.0.1:1"))
    assert made == []  # nothing until it is asked for
    first, second = await asyncio.gather(own(), own())
    assert first is second is made[0] and len(made) == 1 and made[0].starts == 1
    await own.stop()
    assert made[0].stops == 1
    with pytest.raises(ProducerStopped):
        await own()
    await own.stop()  # stopping again does nothing
    assert made[0].stops == 1 and len(made) == 1


async def test_a_producer_s_options_override_the_settings_servers() -> None:
    kafka = producer(
        Settings(bootstrap_servers="127.0.0.1:1"), bootstrap_servers="127.0.0.1:2", linger_ms=2
    )
    assert kafka.client._bootstrap_servers == "127.0.0.1:2"


async def test_transient_startup_errors_are_retried() -> None:
    calls = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise GroupCoordinatorNotAvailableError()
        return "done"

    assert await with_retries(flaky, attempts=5, delay=0) == "done"
    assert len(calls) == 3


async def test_permanent_errors_and_exhausted_retries_are_raised() -> None:
    async def denied() -> None:
        raise TopicAuthorizationFailedError()

    with pytest.raises(TopicAuthorizationFailedError):
        await with_retries(denied, attempts=5, delay=0)

    async def never() -> None:
        raise GroupCoordinatorNotAvailableError()

    with pytest.raises(GroupCoordinatorNotAvailableError):
        await with_retries(never, attempts=2, delay=0)
