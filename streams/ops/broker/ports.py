"""Free TCP ports on 127.0.0.1, and the ports each node of a new cluster listens on."""

from __future__ import annotations

import socket

from streams.ops.broker.errors import BrokerError
from streams.ops.broker.state import ClusterState


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    return free_ports(1)[0]


def free_ports(count: int, exclude: set[int] | None = None) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that are free right now, none in `exclude`.

    Ask for all the ports one process needs in one call: each is held bound until all are
    chosen, so the kernel cannot hand one out twice (separate free_port() calls can).
    """
    exclude = exclude or set()
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port not in exclude and port not in ports:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def port_free(port: int) -> bool:
    # SO_REUSEADDR like the JVM does, so TIME_WAIT leftovers of a stopped broker don't count.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_in_use_error(port: int) -> BrokerError:
    return BrokerError(
        f"port {port} is already in use (by the broker of another chorus checkout? each "
        f"checkout runs its own); stop whatever holds it or set CHORUS_BROKER_PORT for this "
        f"checkout (e.g. CHORUS_BROKER_PORT={port + 100}); to use the Kafka broker that is "
        f"there instead, set CHORUS_BOOTSTRAP_SERVERS=127.0.0.1:{port}, or give both "
        f"checkouts the same CHORUS_BROKER_HOME"
    )


def choose_ports(
    nodes: int, base_port: int, previous: ClusterState | None
) -> list[tuple[int, int]]:
    """(broker port, controller port) per node.

    base_port > 0: node i (1-based) listens on base_port + 2*(i-1) and these must be free;
    its controller prefers the next port up, else any free port.
    base_port == 0: any free ports, reusing the previous run's ports when still free.
    """
    chosen: set[int] = set()
    result: list[tuple[int, int]] = []
    old = {}
    if previous is not None and len(previous.nodes) == nodes:
        old = {n.node_id: n for n in previous.nodes}
    for i in range(1, nodes + 1):
        if base_port > 0:
            port = base_port + 2 * (i - 1)
            if not port_free(port):
                raise port_in_use_error(port)
            preferred = port + 1
        else:
            prev = old.get(i)
            prev_port = prev.port if prev else 0
            if prev_port and prev_port not in chosen and port_free(prev_port):
                port = prev_port
            else:
                port = free_ports(1, chosen)[0]
            preferred = prev.controller_port if prev else 0
        chosen.add(port)
        if preferred and preferred not in chosen and port_free(preferred):
            cport = preferred
        else:
            cport = free_ports(1, chosen)[0]
        chosen.add(cport)
        result.append((port, cport))
    return result
