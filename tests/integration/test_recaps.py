"""Idle recaps on a real broker: debounce, one per quiet period, survival across a kill."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable

import httpx
import orjson
import pytest

from projections.model import ActorType, Message, MessageType
from streams.kafka.consume import Record, read_topic
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.settings import Settings
from tests.conftest import REPO, WorkerProcess, read_until
from tests.fakes.llm_server import FakeLlmServer

pytestmark = pytest.mark.kafka

CHANNEL = "pairing/refactor"


def said(content: str, sender: str = "ada", kind: MessageType = MessageType.STATUS) -> Message:
    extra = {"correlation_id": "c-1"} if kind is MessageType.COMMAND else {}
    return Message(
        channel=CHANNEL,
        sender=sender,
        type=kind,
        actor_type=ActorType.HUMAN,
        content=content,
        target="role:coder" if extra else None,
        **extra,
    )


def completed(records: list[Record], channel: str = CHANNEL) -> list[dict[str, object]]:
    return [r.value for r in records if r.key == channel and r.value["phase"] == "COMPLETED"]


async def all_recaps(settings: Settings) -> list[Record]:
    return [record async for record in read_topic(settings, settings.topic("recaps"))]


CLOCK = "pairing/clock"


async def a_quiet_period_passes(settings: Settings) -> list[Record]:
    """A debounce on the worker's clock, not the test's: a message to another channel, which
    the same recap timer checks; its recap fires no sooner than a debounce after it. Every
    recap record by then."""
    before = len(completed(await all_recaps(settings), CLOCK))
    tick = Message(
        channel=CLOCK,
        sender="clock",
        type=MessageType.STATUS,
        actor_type=ActorType.HUMAN,
        content="the build is green again",
    )
    await send_messages(settings, [tick])
    await read_until(settings, "recaps", lambda rs: len(completed(rs, CLOCK)) > before, 30)
    return await all_recaps(settings)


async def test_one_extractive_recap_per_quiet_period_and_none_while_busy(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    worker = start_worker(CHORUS_RECAP_DEBOUNCE_SECONDS="2", CHORUS_RECAP_CHECK_SECONDS="0.2")
    # Busy: nine messages at once. Each restarts the countdown (projections.recap.phase, its
    # unit tests take every interleaving): the recap waits for the last and covers them all.
    busy = [said("Goal: split the parser module", kind=MessageType.COMMAND)] + [
        said(f"still on it, step {i}", sender="bob") for i in range(8)
    ]
    sent = await send_messages(chorus_settings, busy)

    records = await read_until(chorus_settings, "recaps", lambda rs: len(completed(rs)) >= 1, 30)
    # An extractive recap is one record: written at once, nothing to say it is coming.
    assert [r.value["phase"] for r in records if r.key == CHANNEL][:1] == ["COMPLETED"]
    recap = completed(records)[0]
    assert recap["covered_offset"] == sent[-1].offset  # none while busy: after the last one
    # The record is what was said; the request is the state part's, rendered when read.
    assert "split the parser" not in str(recap["text"]) and recap["text"] == recap["narrative"]
    assert recap["tier"] == "extractive"

    # quiet: no second recap for the same conversation
    assert len(completed(await a_quiet_period_passes(chorus_settings))) == 1
    view = worker.get(f"/channels/{CHANNEL}/recap").json()
    assert view["label"] == "done" and view["message_count"] == 9
    # The open command is the goal, and who owes it is named (its target, without "role:").
    assert str(view["text"]).startswith("Goal: Goal: split the parser module (asked by ada).")
    assert "Open: coder owes ada" in str(view["text"])

    # a new message re-arms: exactly one more
    await send_messages(chorus_settings, [said("parser split merged; next: docs")])
    await read_until(chorus_settings, "recaps", lambda rs: len(completed(rs)) >= 2, 30)
    assert len(completed(await a_quiet_period_passes(chorus_settings))) == 2


async def test_recap_fires_after_a_kill_during_the_countdown_and_costs_are_visible(
    chorus_settings: Settings,
    chorus_env: dict[str, str],
    start_worker: Callable[..., WorkerProcess],
) -> None:
    await create_topics(chorus_settings)
    async with FakeLlmServer() as llm:
        settings = {
            "CHORUS_RECAP_DEBOUNCE_SECONDS": "8",
            "CHORUS_RECAP_CHECK_SECONDS": "0.2",
            "CHORUS_LLM_BASE_URL": llm.base_url,
            "CHORUS_SECONDARY_LLM_MODEL": "tiny-recapper",
        }
        first = start_worker(**settings)
        await send_messages(chorus_settings, [said("we are migrating the billing tables")])
        for _ in range(40):
            # 404 until the fold role folded it, 503 until the context role read it
            answer = first.get(f"/channels/{CHANNEL}/recap")
            if answer.status_code == 200 and answer.json()["phase"] == "PENDING":
                break
            await asyncio.sleep(0.25)
        killed_at = time.monotonic()
        first.kill()
        second = start_worker(**settings)
        records = await read_until(
            chorus_settings, "recaps", lambda rs: len(completed(rs)) >= 1, 60
        )
        assert time.monotonic() - killed_at < 60
        recap = completed(records)[0]
        assert recap["tier"] == "synthesised" and recap["model"] == "tiny-recapper"
        assert recap["tokens_in"] > 0 and "\n" not in str(recap["text"])
        assert "transcript" in llm.last_system.lower()
        assert "User (ada): we are migrating the billing tables" in llm.last_user

        # The models are called by the context role: its costs and metrics are on its port.
        costs = httpx.get(f"{second.context_url}/costs", timeout=10).json()["llm"]
        assert [row["purpose"] for row in costs] == ["recap"]
        assert costs[0]["calls"] == 1 and costs[0]["model"] == "tiny-recapper"
        metrics = httpx.get(f"{second.context_url}/metrics", timeout=10).text
        assert (
            'chorus_llm_calls_total{model="tiny-recapper",outcome="ok",purpose="recap"} 1.0'
            in metrics
        )

        env = {**os.environ, **chorus_env, **settings}
        cli = subprocess.run(
            [sys.executable, "-m", "streams.interfaces.cli", "costs"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=60,
        )
        assert "recap    tiny-recapper" in cli.stdout and "calls=1" in cli.stdout, cli.stderr
        watch = subprocess.run(
            [sys.executable, "-m", "streams.interfaces.cli", "watch", "--once"],
            capture_output=True,
            text=True,
            env={**env, "COLUMNS": "200"},
            cwd=REPO,
            timeout=60,
        )
        # the title is the first message that says something until a phrase repeats
        assert (
            "CONTINUE | tiny-recapper | #1 | we are migrating the billing tables | - |"
            in watch.stdout
        )
        shown = subprocess.run(
            [sys.executable, "-m", "streams.interfaces.cli", "recap", CHANNEL, "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=60,
        )
        # The recap as written, then where its commitments stand now (none were asked).
        assert orjson.loads(shown.stdout)["text"] == f"{recap['text']} Nothing is open."
