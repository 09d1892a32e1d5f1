"""The deadline index on the real broker: a commitment's deadline comes due after the worker
that indexed it restarted, and after its partition moved to another worker; the expiry goes
through the log either way."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from projections.model import Message, MessageType, utc_now
from projections.overview import ChannelOverviewProjection
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.records import key_partition
from streams.settings import Settings
from streams.testing import free_web_port
from streams.topology import changelog_name, fold_table_name
from tests.conftest import WorkerProcess, read_until

pytestmark = pytest.mark.kafka

# Checkpoints every 200 ms, and a standby copy of every table on the other worker.
QUICK = {"CHORUS_CHECKPOINT_MS": "200", "CHORUS_STANDBY_REPLICAS": "1"}


def request(channel: str, cid: str, seconds: float) -> Message:
    return Message(
        channel=channel,
        sender="planner",
        type=MessageType.COMMAND,
        content="ship it",
        correlation_id=cid,
        target="role:worker",
        deadline=utc_now() + timedelta(seconds=seconds),
    )


def commitment_state(worker: WorkerProcess, channel: str, cid: str) -> str | None:
    answer = worker.get(f"/channels/{channel}/state")
    if answer.status_code != 200:
        return None
    commitments = answer.json()["projections"]["commitments"]["state"]["commitments"]
    found = [c for c in commitments.values() if c["correlation_id"] == cid]
    return str(found[-1]["state"]) if found else None


async def until_state(worker: WorkerProcess, channel: str, cid: str, state: str) -> None:
    async def reached() -> None:
        while await asyncio.to_thread(commitment_state, worker, channel, cid) != state:
            await asyncio.sleep(0.2)

    await asyncio.wait_for(reached(), 90)


async def expired_through_the_log(settings: Settings, channel: str, cid: str) -> None:
    def expiry(record: object) -> bool:
        value = getattr(record, "value", None)
        return (
            isinstance(value, dict)
            and value.get("channel") == channel
            and (value.get("payload") or {}).get("kind") == "commitment-expired"
            and value.get("correlation_id") == cid
        )

    await read_until(settings, "messages", lambda rs: any(expiry(r) for r in rs), 90)


async def test_a_deadline_comes_due_after_the_worker_that_indexed_it_restarted(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    channel, cid = "deadline/restart", "d-restart"
    first = start_worker(**QUICK)
    await send_messages(chorus_settings, [request(channel, cid, seconds=8)])
    await until_state(first, channel, cid, "OPEN")
    first.stop()  # a role that stops checkpoints what it holds (or its messages fold again)
    second = start_worker(**QUICK)  # same data directory: its tables, its index
    await expired_through_the_log(chorus_settings, channel, cid)
    await until_state(second, channel, cid, "EXPIRED")


def owner_of(workers: list[WorkerProcess], settings: Settings, channel: str) -> WorkerProcess:
    """The worker whose fold owns `channel`'s partition, as Faust's router says."""
    table = changelog_name(settings, fold_table_name(ChannelOverviewProjection()))
    partition = key_partition(channel.encode(), settings.partitions)
    routes = httpx.get(f"{workers[0].base_url}/router/", timeout=10).json()
    for host, topics in routes.items():
        if partition in topics.get(table, []):
            return next(w for w in workers if w.base_url == host)
    raise AssertionError(f"no worker owns partition {partition}: {routes}")


async def test_a_deadline_comes_due_after_its_partition_moved_to_another_worker(
    chorus_settings: Settings,
    chorus_env: dict[str, str],
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    await create_topics(chorus_settings)
    channel, cid = "deadline/moves", "d-moves"
    first = start_worker(**QUICK)
    other = start_worker(
        **QUICK,
        CHORUS_WEB_PORT=str(free_web_port(taken=int(first.env["CHORUS_WEB_PORT"]))),
        CHORUS_DATA_DIR=str(tmp_path / "other-data"),
    )
    workers = [first, other]

    async def split() -> None:
        while True:
            try:
                owner_of(workers, chorus_settings, channel)
                routes = httpx.get(f"{first.base_url}/router/", timeout=10).json()
                if len(routes) == 2:
                    return
            except (AssertionError, httpx.HTTPError):
                pass
            await asyncio.sleep(0.5)

    await asyncio.wait_for(split(), 120)
    await send_messages(chorus_settings, [request(channel, cid, seconds=10)])
    owner = owner_of(workers, chorus_settings, channel)
    stays = other if owner is first else first
    await until_state(owner, channel, cid, "OPEN")
    owner.stop()  # its partitions move to the worker that stays, index entries with them
    await expired_through_the_log(chorus_settings, channel, cid)
    await until_state(stays, channel, cid, "EXPIRED")
