"""`chorus demo` (what `make run` shows): a real conversation folding live.

Starts a worker, streams a real multi-party conversation into a channel, and prints each
driver event (the state after the fold), each summary and the idle recap as they happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console

from projections.model import Message
from streams.consume import read_topic
from streams.control import configure_channel
from streams.conversations import as_messages, conversations
from streams.produce import send_messages
from streams.settings import Settings
from streams.topics import create_topics

console = Console(highlight=False)


def start_worker(settings: Settings, log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "worker", "--loglevel", "warning"],
        stdout=log_path.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=os.environ.copy(),
    )
    probe = f"http://{settings.web_host}:{settings.web_port}/channels/readiness-probe/summary"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the worker exited; see {log_path}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(probe, timeout=2).status_code == 200:
                return process
        time.sleep(0.5)
    process.terminate()
    raise RuntimeError(f"the worker did not become ready in 120 s; see {log_path}")


def short(text: str | None, width: int = 70) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


async def show_driver_events(settings: Settings, channel: str, total: int) -> None:
    seen = 0
    async for record in read_topic(
        settings,
        settings.topic("driver-events"),
        follow=True,
        from_beginning=False,
        channels=[channel],
    ):
        event = record.value
        state = event["states"]["overview"]["state"]
        if state is None:  # left out of an event too large to send whole
            continue
        seen += 1
        console.print(
            f"[dim]#{event['offset']:>3}[/dim] fold → {state['message_count']} msgs, "
            f"{len(state['participants'])} people, open commitments {state['open_commitments']}, "
            f"decision {event['decision']['decision']}"
        )
        if seen >= total:
            return


async def show_summaries(settings: Settings, channel: str) -> None:
    async for record in read_topic(
        settings, settings.topic("summaries"), follow=True, from_beginning=False, channels=[channel]
    ):
        value = record.value
        notes = value["annotations"]
        console.print(
            f"[bold green]summary[/bold green] after {value['total_messages']} msgs "
            f"(tier {notes.get('tier')}): participants {notes.get('participants', '-')}"
        )


async def wait_for_recap(settings: Settings, channel: str, timeout: float) -> None:
    async def first_completed() -> None:
        async for record in read_topic(
            settings, settings.topic("recaps"), follow=True, channels=[channel]
        ):
            if record.value["phase"] == "COMPLETED":
                tier, text = record.value["tier"], record.value["text"]
                console.print(f"[bold magenta]recap[/bold magenta] ({tier}): {text}")
                return

    try:
        await asyncio.wait_for(first_completed(), timeout)
    except TimeoutError:
        console.print("[yellow]no recap within the wait; see `chorus watch`[/yellow]")


async def stream_conversation(settings: Settings, messages: list[Message], rate: float) -> None:
    for message in messages:
        kind = message.type.value
        console.print(f"[cyan]{message.sender}[/cyan] [dim]{kind}[/dim] {short(message.content)}")
        await send_messages(settings, [message])
        await asyncio.sleep(1 / rate)


async def demo(settings: Settings, turns: int, rate: float, debounce: float) -> None:
    await create_topics(settings)
    conversation = next(c for c in conversations() if len(c.turns) >= turns)
    channel = f"demo/{conversation.name.lower()}"
    messages = as_messages(conversation, channel)[:turns]
    console.print(
        f"[bold]{conversation.source}[/bold]: {len(messages)} turns into channel {channel}"
    )
    await configure_channel(
        settings,
        channel,
        summary_after_messages=10,
        recap_debounce_seconds=debounce,
        termination=["max-messages:1000", "escalate-on-decline:3"],
    )
    watchers = [
        asyncio.ensure_future(show_driver_events(settings, channel, len(messages))),
        asyncio.ensure_future(show_summaries(settings, channel)),
    ]
    await asyncio.sleep(1.0)  # let the followers reach the end of their topics
    await stream_conversation(settings, messages, rate)
    await asyncio.wait_for(watchers[0], 60)
    console.print(f"[bold]quiet now; waiting {debounce:.0f}s for the recap…[/bold]")
    await wait_for_recap(settings, channel, debounce + 30)
    watchers[1].cancel()
    console.print(f"\nTry: chorus state {channel} | chorus summary {channel} | chorus watch")


def run_demo(settings: Settings, turns: int, rate: float, debounce: float, worker: bool) -> None:
    process = start_worker(settings, Path(".chorus/demo-worker.log")) if worker else None
    try:
        asyncio.run(demo(settings, turns, rate, debounce))
    finally:
        if process is not None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
