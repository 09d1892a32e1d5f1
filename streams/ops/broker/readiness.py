"""Waiting until started nodes logged their startup and answer Metadata with every broker."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import subprocess
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from aiokafka.conn import create_conn
from aiokafka.protocol.metadata import MetadataRequest

from streams.ops.broker.errors import BrokerError
from streams.ops.broker.files import LOG_TAIL_LINES, read_from, tail
from streams.ops.broker.process import LAUNCH_HEADER
from streams.ops.broker.state import NodeInfo

_T = TypeVar("_T")

READY_LINE = "Kafka Server started"
_STDOUT_TAIL_LINES = 15
_POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Launched:
    """A node just launched: its process and the size of its log before the launch."""

    node: NodeInfo
    process: subprocess.Popen[bytes]
    log_offset: int


def run_coro(factory: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """asyncio.run, also when called from inside a running event loop (via a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()


async def _metadata_brokers(port: int, timeout: float) -> int:
    """Number of brokers in a real Metadata response from the node at 127.0.0.1:port."""
    conn = await asyncio.wait_for(
        create_conn("127.0.0.1", port, request_timeout_ms=int(timeout * 1000)), timeout
    )
    try:
        response = await asyncio.wait_for(conn.send(MetadataRequest([])), timeout)
        return len(response.brokers)
    finally:
        conn.close()


async def _probe_all(ports: Sequence[int], timeout: float) -> list[int | str]:
    """Per port, the number of brokers its Metadata lists, or why it did not answer."""

    async def one(port: int) -> int | str:
        try:
            return await _metadata_brokers(port, timeout)
        except Exception as exc:  # not ready yet: any failure is retried
            return f"{type(exc).__name__}: {exc}"

    return list(await asyncio.gather(*(one(p) for p in ports)))


def _log_tail_for(node: NodeInfo, offset: int) -> str:
    parts = []
    log = read_from(node.log_file, offset)
    parts.append(f"--- {node.log_file} (last {LOG_TAIL_LINES} lines) ---\n{tail(log)}")
    stdout = node.dir / "stdout.log"
    out = read_from(stdout).rsplit(LAUNCH_HEADER, 1)[-1].split("\n", 1)[-1]
    if out.strip():  # the JVM's own output since the last launch (crashes, bad options)
        parts.append(f"--- {stdout} ---\n{tail(out, _STDOUT_TAIL_LINES)}")
    return "\n".join(parts)


def wait_ready(
    starting: Sequence[Launched],
    probe_ports: Sequence[int],
    expected_brokers: int,
    timeout: float,
) -> None:
    """Wait until each started node logged READY_LINE and every probed node answers Metadata
    listing expected_brokers brokers."""
    deadline = time.monotonic() + timeout
    logged: set[int] = set()
    last_probe: list[int | str] = []
    while True:
        for launched in starting:
            node, proc = launched.node, launched.process
            rc = proc.poll()
            if rc is not None:
                raise BrokerError(
                    f"Kafka node {node.node_id} exited during startup with code {rc}.\n"
                    f"{_log_tail_for(node, launched.log_offset)}"
                )
            if proc.pid not in logged and READY_LINE in read_from(
                node.log_file, launched.log_offset
            ):
                logged.add(proc.pid)
        if len(logged) == len(starting):
            probe_timeout = min(5.0, max(deadline - time.monotonic(), 0.5))
            last_probe = run_coro(functools.partial(_probe_all, probe_ports, probe_timeout))
            if all(r == expected_brokers for r in last_probe):
                return
        if time.monotonic() >= deadline:
            break
        time.sleep(_POLL_SECONDS)
    waiting = [s for s in starting if s.process.pid not in logged] or list(starting)
    if len(logged) == len(starting):
        detail = ", ".join(
            f"127.0.0.1:{port}: {r if isinstance(r, str) else f'{r} broker(s)'}"
            for port, r in zip(probe_ports, last_probe, strict=False)
        )
        why = (
            f"the nodes logged '{READY_LINE}' but Metadata did not list {expected_brokers} "
            f"broker(s) ({detail})"
        )
    else:
        why = f"node(s) {[s.node.node_id for s in waiting]} never logged '{READY_LINE}'"
    tails = "\n".join(_log_tail_for(s.node, s.log_offset) for s in waiting)
    raise BrokerError(
        f"the local Kafka cluster was not ready after {timeout:g}s: {why}. "
        f"Raise CHORUS_BROKER_START_TIMEOUT if the machine is just slow.\n{tails}"
    )
