"""streams.ops.broker.readiness: probing works from inside an event loop too (a node that
dies or stays silent, a process each, is in tests/integration)."""

from __future__ import annotations

import asyncio

from streams.ops.broker.readiness import run_coro


async def _answer() -> int:
    return 42


def test_run_coro_works_with_and_without_a_running_loop() -> None:
    assert run_coro(_answer) == 42

    async def inside() -> int:
        return run_coro(_answer)

    assert asyncio.run(inside()) == 42
