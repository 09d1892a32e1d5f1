"""`chorus worker` on a real broker: a supervisor and two roles, each its own process and
consumer group, joined by Kafka topics only. Driver events from the fold role, summaries
and recaps from the context role; neither role calls the other (every web server counts
the requests it receives); with either role down, the other answers; SIGTERM stops all
three."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from projections.model import ActorType, Message, MessageType
from streams.kafka.consume import Record
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.settings import Settings
from streams.worker.run import STOP_GRACE_SECONDS
from tests.conftest import WorkerProcess, read_until

pytestmark = pytest.mark.kafka

CHANNEL = "roles/split"
ROLE_SETTINGS = {
    "CHORUS_SUMMARY_AFTER_MESSAGES": "3",
    "CHORUS_SUMMARY_AFTER_SECONDS": "2",
    "CHORUS_RECAP_DEBOUNCE_SECONDS": "1",
    "CHORUS_RECAP_CHECK_SECONDS": "0.2",
}
# What "answers at once" means for a view while the other role is down.
ANSWER_SECONDS = 1.0
VIEWS = (
    "/channels",
    "/recaps",
    f"/channels/{CHANNEL}/state",
    f"/channels/{CHANNEL}/summary",
    f"/channels/{CHANNEL}/recap",
    f"/channels/{CHANNEL}/context?max_tokens=2000",
)


def conversation(channel: str = CHANNEL, start: int = 0) -> list[Message]:
    said = {"channel": channel, "actor_type": ActorType.AGENT}
    ask = Message(
        **said,
        sender="planner",
        type=MessageType.COMMAND,
        correlation_id=f"c-{start}",
        target="role:coder",
        content=f"Port the lexer, part {start}",
    )
    steps = [
        Message(**said, sender="coder", type=MessageType.STATUS, content=f"lexer step {start + i}")
        for i in range(4)
    ]
    done = Message(
        **said,
        sender="coder",
        type=MessageType.DONE,
        in_reply_to=ask.id,
        correlation_id=ask.correlation_id,
        content=f"lexer part {start} ported",
    )
    return [ask, *steps, done]


def alive(pid: int) -> bool:
    """The process runs (a zombie, exited and not yet reaped, does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """The process stopped (SIGSTOP): its port still accepts connections and answers none,
    the way a role hangs; running again after."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def requests_received(url: str, headers: dict[str, str]) -> dict[str, float]:
    """`chorus_http_requests_total` by view, as the server at `url` counts them (this read
    included)."""
    text = httpx.get(f"{url}/metrics", headers=headers, timeout=10).text
    found = re.findall(r'^chorus_http_requests_total\{view="([^"]+)"\} (\S+)$', text, re.M)
    return {view: float(count) for view, count in found}


def grown(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {v: n - before.get(v, 0.0) for v, n in after.items() if n != before.get(v, 0.0)}


def covers(last_offset: int) -> Callable[[list[Record]], bool]:
    def done(records: list[Record]) -> bool:
        return any(r.value and r.value.get("last_offset") == last_offset for r in records)

    return done


def completed_after(covered: int) -> Callable[[list[Record]], bool]:
    def done(records: list[Record]) -> bool:
        return any(
            r.value["phase"] == "COMPLETED" and (r.value["covered_offset"] or -1) >= covered
            for r in records
        )

    return done


async def answers_at_once(worker: WorkerProcess) -> dict[str, Any]:
    """Every public view of the fold role, each answered 200 within ANSWER_SECONDS."""
    found: dict[str, Any] = {}
    for path in VIEWS:
        started = time.monotonic()
        answer = await asyncio.to_thread(worker.get, path)
        took = time.monotonic() - started
        assert answer.status_code == 200, (path, answer.status_code, answer.text)
        assert took < ANSWER_SECONDS, (path, took)
        found[path.split("?")[0]] = answer.json()
    return found


async def test_two_roles_share_only_topics_and_each_answers_while_the_other_is_down(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    worker = start_worker(**ROLE_SETTINGS)
    pids = worker.role_pids()
    assert set(pids) == {"fold", "context"}
    assert worker.context_ready()

    # Both roles at work (folds, driver events, summaries, recaps, the views read), and
    # every request each server receives counted: none comes from the other role.
    fold_before = requests_received(worker.base_url, worker.auth)
    context_before = requests_received(worker.context_url, worker.auth)
    messages = conversation()
    await send_messages(chorus_settings, messages)
    events = await read_until(
        chorus_settings, "driver-events", lambda rs: len(rs) >= len(messages), 60
    )
    assert [e.value["offset"] for e in events[: len(messages)]] == list(range(len(messages)))
    summaries = await read_until(chorus_settings, "summaries", covers(len(messages) - 1), 60)
    last = next(s.value for s in reversed(summaries) if s.value["last_offset"] == 5)
    assert last["total_messages"] == len(messages)
    # The topic carries the narrative (what was asked, told as history); whether it is open
    # and how it ended are the fold's.
    assert "Open (" not in last["text"] and "asked coder: Port the lexer" in last["text"]
    await read_until(chorus_settings, "recaps", completed_after(len(messages) - 1), 60)
    asked = 0
    for _ in range(3):
        await answers_at_once(worker)
        asked += 1
    fold_after = requests_received(worker.base_url, worker.auth)
    context_after = requests_received(worker.context_url, worker.auth)
    assert grown(context_after, context_before) == {"/metrics": 1.0}
    mine = {path.split("?")[0].replace(CHANNEL, "{channel}"): float(asked) for path in VIEWS}
    assert grown(fold_after, fold_before) == {**mine, "/metrics": 1.0}

    # The summary view renders the state part from the fold; the recap says how the request
    # ended; the context takes the latest summary and recap with where it read them.
    views = await answers_at_once(worker)
    summary = views[f"/channels/{CHANNEL}/summary"]
    assert "Port the lexer" in summary["content"] and "Open (" not in summary["content"]
    assert summary["current_at"]["read_through"] is not None
    recap = views[f"/channels/{CHANNEL}/recap"]
    assert recap["message_count"] == len(messages) and recap["decision"] is not None
    assert "(fulfilled)" in recap["text"] and "Nothing is open." in recap["text"]
    context = views[f"/channels/{CHANNEL}/context"]
    assert "lexer part 0 ported" in context["text"]
    assert context["sources"]["summaries"]["read_through"] is not None

    # The context role down (frozen: its port answers nothing): every view of the fold role
    # answers at once, with the latest summary and recap the topics hold, and the message
    # sent meanwhile among the recent ones.
    with frozen(pids["context"]):
        after = Message(
            channel=CHANNEL, sender="coder", type=MessageType.STATUS, content="lexer benchmarked"
        )
        await send_messages(chorus_settings, [after])
        await read_until(chorus_settings, "driver-events", lambda rs: len(rs) > len(messages), 30)
        views = await answers_at_once(worker)
        context = views[f"/channels/{CHANNEL}/context"]
        parts = context["parts"]
        assert parts["summary"] is not None and parts["summary"]["last_offset"] == 5
        assert parts["header"]["offset"] == len(messages)
        assert "coder (STATUS): lexer benchmarked" in context["text"], context["text"]
        assert parts["ended"]["fulfilled"] == 1
        assert context["sources"]["summaries"]["restoring"] is False
        assert views[f"/channels/{CHANNEL}/recap"]["text"] is not None
        assert views["/recaps"]["recaps"][0]["channel"] == CHANNEL

    # The fold role down: summaries and recaps of what is sent meanwhile go on.
    more = conversation(start=len(messages) + 1)
    with frozen(pids["fold"]):
        await send_messages(chorus_settings, more)
        last_offset = len(messages) + len(more)
        await read_until(chorus_settings, "summaries", covers(last_offset), 60)
        await read_until(chorus_settings, "recaps", completed_after(last_offset), 60)
        assert worker.context_ready()
    # Back, the fold role folds on and its views show what it missed.
    for _ in range(60):
        state = await asyncio.to_thread(worker.get, f"/channels/{CHANNEL}/state")
        if state.status_code == 200 and state.json()["decision"]["offset"] == last_offset:
            break
        await asyncio.sleep(0.5)
    else:
        pytest.fail("the fold role did not fold on after it was frozen")
    summary = (await answers_at_once(worker))[f"/channels/{CHANNEL}/summary"]
    assert summary["last_offset"] == last_offset

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
