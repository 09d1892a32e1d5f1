"""streams.ops.broker.ports: free ports, and each node's broker and controller port."""

from __future__ import annotations

import socket

import pytest

from streams.ops.broker import ports as broker_ports
from streams.ops.broker.ports import choose_ports, free_port, free_ports


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_free_ports_are_distinct_and_all_bindable_together() -> None:
    # Bug: the secure test broker asked free_port() five times; ports freed between calls can
    # come back, and Kafka refused CONTROLLER and SASL_SSL listeners on one port (CI, stop 19).
    ports = free_ports(64)
    assert len(set(ports)) == 64
    held = [socket.socket() for _ in ports]
    try:
        for sock, port in zip(held, ports, strict=True):
            sock.bind(("127.0.0.1", port))
    finally:
        for sock in held:
            sock.close()


def test_free_ports_skip_a_port_the_kernel_hands_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    handed_out = iter([5000, 5000, 5001, 5002])

    class OnePortTwice:
        def __init__(self, *args: object) -> None:
            self.port = 0

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(handed_out)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

        def close(self) -> None:
            pass

    monkeypatch.setattr(broker_ports.socket, "socket", OnePortTwice)
    assert free_ports(3) == [5000, 5001, 5002]


def test_fixed_base_port_puts_each_controller_one_port_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker_ports, "port_free", lambda port: True)
    assert choose_ports(3, 19092, None) == [(19092, 19093), (19094, 19095), (19096, 19097)]
