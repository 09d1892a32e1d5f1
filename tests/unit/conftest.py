"""The unit tier (`make test-unit`): no broker, no process, no network but the loopback
servers a test starts in this process. A unit test that needs more fails here, saying where
it belongs: tests/integration (which `make test` runs too, with the session's broker)."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

MOVE = "move this test to tests/integration"


class UnitTier:
    """What the running unit test did that a unit test may not: refused when tried (an
    AssertionError), and failed again at teardown in case the code under test swallowed it."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self.bound: set[int] = set()  # the ports this test's own sockets bound

    def refuse(self, what: str) -> NoReturn:
        message = f"{what}: {MOVE}"
        self.violations.append(message)
        raise AssertionError(message)

    def may_connect(self, sock: socket.socket, address: Any) -> bool:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return True  # a Unix socket or a socketpair: this machine, not the network
        host, port = address[0], address[1]
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        return loopback and port in self.bound


@pytest.fixture
def kafka_bootstrap() -> NoReturn:
    """Overrides the session's broker for tests/unit: chorus_env, chorus_settings and
    start_worker need it too, so a unit test asking for any of them fails here."""
    pytest.fail(f"unit tests use no Kafka broker: {MOVE}", pytrace=False)


@pytest.fixture(autouse=True)
def unit_tier(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[UnitTier]:
    tier = UnitTier()
    if request.node.get_closest_marker("kafka") is not None:
        pytest.fail(f"a unit test is not marked kafka: {MOVE}", pytrace=False)

    def no_process(*_: object, **__: object) -> NoReturn:
        tier.refuse("unit tests start no process")

    # Every subprocess.Popen (subprocess.run, asyncio.create_subprocess_exec and _shell too)
    # starts its child in _execute_child; os.fork is multiprocessing's and os.spawn*'s.
    monkeypatch.setattr(subprocess.Popen, "_execute_child", no_process)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, no_process)

    bind, connect, connect_ex = socket.socket.bind, socket.socket.connect, socket.socket.connect_ex

    def tracked_bind(sock: socket.socket, address: Any) -> None:
        bind(sock, address)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            tier.bound.add(sock.getsockname()[1])

    def check(sock: socket.socket, address: Any) -> None:
        if not tier.may_connect(sock, address):
            tier.refuse(
                f"unit tests connect only to loopback servers they started in this process, "
                f"not to {address!r} (a broker, a worker, the network)"
            )

    def guarded_connect(sock: socket.socket, address: Any) -> None:
        check(sock, address)
        connect(sock, address)

    def guarded_connect_ex(sock: socket.socket, address: Any) -> int:
        check(sock, address)
        return connect_ex(sock, address)

    monkeypatch.setattr(socket.socket, "bind", tracked_bind)
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    yield tier
    if tier.violations:
        pytest.fail("\n".join(tier.violations), pytrace=False)
