"""`chorus worker` on a real broker: a supervisor and two roles, each its own process and
consumer group; driver events from the fold role, summaries from the context role (their
state part read from the fold role), and SIGTERM stops all three."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from projections.model import ActorType, Message, MessageType
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.settings import Settings
from streams.worker.run import STOP_GRACE_SECONDS
from tests.conftest import WorkerProcess, read_until

pytestmark = pytest.mark.kafka

CHANNEL = "roles/split"


def conversation() -> list[Message]:
    said = {"channel": CHANNEL, "actor_type": ActorType.AGENT}
    messages = [
        Message(
            **said,
            sender="planner",
            type=MessageType.COMMAND,
            correlation_id="c-1",
            target="role:coder",
            content="Port the lexer",
        )
    ]
    messages += [
        Message(**said, sender="coder", type=MessageType.STATUS, content=f"lexer step {i}")
        for i in range(4)
    ]
    messages.append(
        Message(
            **said,
            sender="coder",
            type=MessageType.DONE,
            in_reply_to=messages[0].id,
            correlation_id="c-1",
            content="lexer ported",
        )
    )
    return messages


def alive(pid: int) -> bool:
    """The process runs (a zombie, exited and not yet reaped, does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


async def test_two_roles_give_driver_events_and_summaries_and_stop_together(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    worker = start_worker(CHORUS_SUMMARY_AFTER_MESSAGES="3", CHORUS_SUMMARY_AFTER_SECONDS="2")
    pids = worker.role_pids()
    assert set(pids) == {"fold", "context"}
    assert worker.context_ready()

    messages = conversation()
    await send_messages(chorus_settings, messages)
    events = await read_until(
        chorus_settings, "driver-events", lambda rs: len(rs) >= len(messages), 60
    )
    assert [e.value["offset"] for e in events[: len(messages)]] == list(range(len(messages)))

    def covers_all(records: list[object]) -> bool:
        return any(
            r.value["last_offset"] == len(messages) - 1  # type: ignore[attr-defined]
            for r in records
        )

    summaries = [r.value for r in await read_until(chorus_settings, "summaries", covers_all, 60)]
    last = next(s for s in reversed(summaries) if s["last_offset"] == len(messages) - 1)
    assert last["total_messages"] == len(messages)

    # The state part comes from the fold role: the request ended, nothing is open. The
    # summary may have been rendered before the fold had the DONE: then the state refresh
    # (the DONE may change commitments) publishes it again within seconds.
    def ended(records: list[object]) -> bool:
        texts = [r.value["text"] for r in records]  # type: ignore[attr-defined]
        return any("fulfilled" in t and "Open (" not in t for t in texts)

    await read_until(chorus_settings, "summaries", ended, 30)
    view = worker.get(f"/channels/{CHANNEL}/summary").json()
    assert "Port the lexer" in view["content"] and "Open (" not in view["content"]

    # Recaps are the context role's: the fold role's views read them from it.
    recap = worker.get(f"/channels/{CHANNEL}/recap").json()
    assert recap["message_count"] == len(messages) and recap["decision"] is not None
    context = worker.get(f"/channels/{CHANNEL}/context?max_tokens=2000").json()
    assert "lexer ported" in context["text"]
    # With the context role frozen, the recap view says to retry, and the agent context
    # still answers from the fold role: header and commitments; no summary, recap or
    # recent messages (the context role's).
    os.kill(pids["context"], signal.SIGSTOP)
    try:
        frozen = await asyncio.to_thread(worker.get, f"/channels/{CHANNEL}/recap")
        assert frozen.status_code == 503 and frozen.headers["Retry-After"]
        without = await asyncio.to_thread(
            worker.get, f"/channels/{CHANNEL}/context?max_tokens=2000"
        )
        assert without.status_code == 200, without.text
        parts = without.json()["parts"]
        assert parts["messages"]["total"] == 0 and parts["summary"] is None
        assert parts["header"]["offset"] == len(messages) - 1
        assert parts["ended"]["fulfilled"] == 1  # the fold's: "Port the lexer" was done
    finally:
        os.kill(pids["context"], signal.SIGCONT)

    assert worker.process is not None
    started = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)  # the supervisor only: it forwards
    code = await asyncio.to_thread(worker.process.wait, STOP_GRACE_SECONDS + 10)
    assert code == 0, worker.log_tail()
    assert time.monotonic() - started < STOP_GRACE_SECONDS + 3
    for role, pid in pids.items():
        for _ in range(20):
            if not alive(pid):
                break
            await asyncio.sleep(0.1)
        assert not alive(pid), f"the {role} role (pid {pid}) outlived its supervisor"
