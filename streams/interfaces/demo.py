"""`chorus demo` (what `make run` shows): what an agent would read, then a real conversation.

Starts a worker, streams the shipped multi-agent scenario (a planner, two workers and a
reviewer; a deadline that expires) and shows commitments opening and closing, the
termination decision, the summary, the budgeted context and the recap. Then it streams a
real conversation (a QMSum meeting when ../shared/data is there, else a chitchat-dataset
chat), dated now like the scenario, and prints each fold, each summary and the idle recap.
On a terminal the worker stays up until Ctrl-C so the suggested commands work; without one
(CI, a script) the demo ends by itself and says in one line how to start a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson

from projections.model import Message, utc_now
from projections.text.lines import cut
from streams.conversations import Conversation, as_messages, conversations
from streams.errors import ChorusError
from streams.interfaces.console import text_console
from streams.interfaces.control import configure_channel
from streams.interfaces.worker_api import WorkerApi
from streams.kafka.clients import local_run_dir
from streams.kafka.consume import read_topic
from streams.kafka.produce import send_messages
from streams.ops.broker import cluster_status
from streams.ops.topics import create_topics
from streams.settings import Settings
from streams.topology import MESSAGES, ROLES
from streams.worker.app import role_url

console = text_console()


class NoDriverEvents(ChorusError):
    """The demo waited for a channel's driver events and none arrived: no worker folds it."""

    def __init__(self, settings: Settings, channel: str, waited: float) -> None:
        super().__init__(
            f"no driver event of {channel} arrived in {waited:g} s: is a worker consuming "
            f"{settings.topic(MESSAGES)}? Start one with `chorus worker` (the same "
            "CHORUS_BOOTSTRAP_SERVERS and CHORUS_TOPIC_PREFIX), or drop --no-worker."
        )


def start_worker(settings: Settings, log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "streams.interfaces.cli", "worker", "--loglevel", "warning"],
        stdout=log_path.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=os.environ.copy(),
    )
    # Both roles: the fold role's API, and the context role (summaries, recaps).
    probes = [f"{role_url(settings, role)}/ready" for role in ROLES]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the worker exited; see {log_path}")
        with contextlib.suppress(httpx.HTTPError):
            if all(httpx.get(probe, timeout=2).status_code == 200 for probe in probes):
                return process
        time.sleep(0.5)
    process.terminate()
    raise RuntimeError(f"the worker did not become ready in 120 s; see {log_path}")


def short(text: str | None, width: int = 70) -> str:
    return cut(" ".join((text or "").split()), width)


async def show_driver_events(settings: Settings, channel: str, total: int, seen: list[int]) -> None:
    """Print the channel's driver events until `total` were seen, counting them in `seen`."""
    async for record in read_topic(
        settings,
        settings.topic("driver-events"),
        follow=True,
        from_beginning=False,
        channels=[channel],
    ):
        event = record.value
        live = event["projections"]["overview"]["live"]
        if live is None:  # left out of an event too large to send whole
            continue
        seen.append(event["offset"])
        console.print(
            f"[dim]#{event['offset']:>3}[/dim] fold → {live['message_count']} msgs, "
            f"{live['participant_count']} people, open commitments {live['open_commitments']}, "
            f"decision {event['decision']['decision']}"
        )
        if len(seen) >= total:
            return


SCENARIO = Path(__file__).resolve().parent / "demo_assets" / "multi-agent.jsonl"
SCENARIO_CHANNEL = "demo/release-notes"
SCENARIO_TERMINATION = ["all-commitments-resolved", "escalate-on-decline:0"]
# How long the demo waits for the scenario's deadline to expire, and for the conversation's
# driver events.
EXPIRY_WAIT = 30
FOLD_WAIT = 60
CONTEXT_TOKENS = 300
# What the demo's driver-event lines show, said once above them.
EVENT_LINES = (
    "each fold: #the message's partition offset (its position on the channel's partition, "
    "shared with other channels), what it changed, the decision"
)
# The late agent whose own context the demo shows too (it owes the scenario's open work).
AGENT = "worker-a"
AGENT_CONTEXT_TOKENS = 250


def scenario_records() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in SCENARIO.read_bytes().splitlines() if line.strip()]


def scenario_messages(
    start: datetime, rate: float, channel: str = SCENARIO_CHANNEL, run: str = ""
) -> list[Message]:
    """The scenario as if sent from `start` at `rate` messages a second into `channel`; a
    deadline keeps its distance from its message, so it expires while the demo runs. `run`
    suffixes every id, so a second run opens its own commitments instead of repeating the
    first run's (which the commitments ignore as redelivered requests)."""
    messages = []
    suffix = f"-{run}" if run else ""
    for index, record in enumerate(scenario_records()):
        created = datetime.fromisoformat(record["created_at"])
        now = start + timedelta(seconds=index / rate)
        moved = {**record, "channel": channel, "created_at": now}
        for link in ("id", "correlation_id", "in_reply_to"):
            if record.get(link):
                moved[link] = record[link] + suffix
        if record.get("deadline") is not None:
            moved["deadline"] = now + (datetime.fromisoformat(record["deadline"]) - created)
        messages.append(Message.model_validate(moved))
    return messages


def commitment_changes(changed: list[dict[str, Any]]) -> list[str]:
    """The commitments a driver event says its message opened, changed or ended, as lines
    a person reads."""
    lines = []
    for commitment in changed:
        owner = (commitment.get("obligor") or "anyone").split(":")[-1]
        state = commitment.get("state")
        lines.append(
            f"commitment {state.lower() if state else '?'}: {commitment.get('requester')} → {owner}"
        )
    return lines


def driver_event_line(event: dict[str, Any], seen: dict[str, dict[str, Any]]) -> str | None:
    """One driver event as the demo prints it (the record's format lives only here); `seen`
    collects every commitment the events changed, by id, as it is now."""
    carried = (event.get("projections") or {}).get("commitments") or {}
    if carried.get("live") is None:  # not folded here, or left out of a too large event
        return None
    changed = (carried.get("changes") or {}).get("commitments") or []
    changes = commitment_changes(changed)
    seen.update((commitment["id"], commitment) for commitment in changed)
    decision = (event.get("decision") or {}).get("decision")
    return (
        f"[dim]#{event['offset']:>3}[/dim] "
        + ("; ".join(changes) or "no change")
        + (f" | decision {decision}")
    )


async def show_commitments(
    settings: Settings, channel: str, expired: asyncio.Event, seen: dict[str, dict[str, Any]]
) -> None:
    async for record in read_topic(
        settings,
        settings.topic("driver-events"),
        follow=True,
        from_beginning=False,
        channels=[channel],
    ):
        line = driver_event_line(record.value, seen)
        if line is not None:
            console.print(line)
        if any(c.get("state") == "EXPIRED" for c in seen.values()):
            expired.set()


async def show_agent_view(settings: Settings, channel: str) -> None:
    async with WorkerApi(settings) as api:
        summary = await api.summary(channel)
        context = await api.context(channel, CONTEXT_TOKENS)
        mine = await api.context(channel, AGENT_CONTEXT_TOKENS, AGENT)
    console.print("\n[bold green]summary[/bold green]:")
    # Channel text is printed as it is: `[worker-a] …` lines are not Rich markup.
    console.print(summary.get("content"), markup=False)
    console.print(
        f"\n[bold cyan]context within {CONTEXT_TOKENS} tokens[/bold cyan] "
        f"({context['tokens']} used) — what an agent reads first:"
    )
    console.print(context["text"], markup=False)
    console.print(
        f"\n[bold cyan]context for {AGENT} within {AGENT_CONTEXT_TOKENS} tokens[/bold cyan] "
        f"({mine['tokens']} used): what it owes and is owed first"
    )
    console.print(mine["text"], markup=False)


async def scenario(settings: Settings, debounce: float, rate: float, run: str) -> str:
    channel = f"{SCENARIO_CHANNEL}-{run}"
    console.print(f"[bold]multi-agent scenario[/bold] ({SCENARIO.name}) into channel {channel}")
    await configure_channel(
        settings,
        channel,
        summary_after_messages=5,
        recap_debounce_seconds=debounce,
        termination=SCENARIO_TERMINATION,
    )
    console.print(f"termination: {' | '.join(SCENARIO_TERMINATION)}")
    console.print(EVENT_LINES, markup=False)
    expired = asyncio.Event()
    changed: dict[str, dict[str, Any]] = {}
    watcher = asyncio.ensure_future(show_commitments(settings, channel, expired, changed))
    await asyncio.sleep(1.0)
    await stream_conversation(settings, scenario_messages(utc_now(), rate, channel, run), rate)
    try:
        await asyncio.wait_for(expired.wait(), EXPIRY_WAIT)
    except TimeoutError:
        if not changed:
            watcher.cancel()
            raise NoDriverEvents(settings, channel, EXPIRY_WAIT) from None
        console.print(f"[yellow]the deadline did not expire within {EXPIRY_WAIT} s[/yellow]")
    await asyncio.sleep(1.0)
    watcher.cancel()
    await show_agent_view(settings, channel)
    console.print(f"\n[bold]quiet now; waiting {debounce:.0f}s for the recap…[/bold]")
    await wait_for_recap(settings, channel, debounce + 30)
    return channel


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
                tier = record.value["tier"]
                console.print(f"[bold magenta]recap[/bold magenta] ({tier}):", end=" ")
                console.print(await recap_as_shown(settings, channel), markup=False)
                return

    try:
        await asyncio.wait_for(first_completed(), timeout)
    except TimeoutError:
        console.print("[yellow]no recap within the wait; see `chorus watch`[/yellow]")


async def recap_as_shown(settings: Settings, channel: str) -> str:
    """The recap as the worker shows it once it has read the record: its narrative with the
    goal, what is open and the next step rendered from the fold now."""
    async with WorkerApi(settings) as api:
        for _ in range(20):
            shown = await api.recap(channel)
            if shown["phase"] == "COMPLETED" and shown["text"]:
                return str(shown["text"])
            await asyncio.sleep(0.25)
    return str(shown["text"] or "")


async def stream_conversation(settings: Settings, messages: list[Message], rate: float) -> None:
    for message in messages:
        kind = message.type.value
        console.print(f"[cyan]{message.sender}[/cyan] [dim]{kind}[/dim]", end=" ")
        console.print(short(message.content), markup=False)
        await send_messages(settings, [message])
        await asyncio.sleep(1 / rate)


def first_conversation(turns: int) -> Conversation:
    """The first real conversation of at least `turns` turns (`streams.conversations`)."""
    return next(c for c in conversations() if len(c.turns) >= turns)


def conversation_messages(conversation: Conversation, channel: str) -> list[Message]:
    """The conversation as messages sent from now, as the scenario's are."""
    return as_messages(conversation, channel, start=utc_now())


async def demo(settings: Settings, turns: int, rate: float, debounce: float) -> list[str]:
    """Both parts; returns the channels it wrote."""
    await create_topics(settings)
    # Each run writes channels of its own: the log keeps every earlier run's messages.
    run = uuid.uuid4().hex[:6]
    agents = await scenario(settings, debounce, rate=2.0, run=run)
    conversation = first_conversation(turns)
    channel = f"demo/{conversation.name.lower()}-{run}"
    messages = conversation_messages(conversation, channel)[:turns]
    console.print(
        f"[bold]{conversation.source}[/bold]: {len(messages)} turns into channel {channel}"
    )
    console.print(EVENT_LINES, markup=False)
    await configure_channel(
        settings,
        channel,
        summary_after_messages=10,
        recap_debounce_seconds=debounce,
        termination=["max-messages:1000", "escalate-on-decline:3"],
    )
    folded: list[int] = []
    watchers = [
        asyncio.ensure_future(show_driver_events(settings, channel, len(messages), folded)),
        asyncio.ensure_future(show_summaries(settings, channel)),
    ]
    await asyncio.sleep(1.0)  # let the followers reach the end of their topics
    await stream_conversation(settings, messages, rate)
    try:
        await asyncio.wait_for(watchers[0], FOLD_WAIT)
    except TimeoutError:
        watchers[1].cancel()
        if not folded:
            raise NoDriverEvents(settings, channel, FOLD_WAIT) from None
        console.print(f"[yellow]{len(folded)} of {len(messages)} folded in {FOLD_WAIT} s[/yellow]")
    console.print(f"[bold]quiet now; waiting {debounce:.0f}s for the recap…[/bold]")
    await wait_for_recap(settings, channel, debounce + 30)
    watchers[1].cancel()
    return [agents, channel]


def chorus_command() -> str:
    """How another terminal runs this `chorus`: bare when PATH finds this one, else its path
    (relative to the current folder when inside it, such as `.venv/bin/chorus`)."""
    here = Path(sys.executable).parent / "chorus"
    found = shutil.which("chorus")
    if found is not None and Path(found).resolve() == here.resolve():
        return "chorus"
    with contextlib.suppress(ValueError):
        return str(here.relative_to(Path.cwd()))
    return str(here)


def try_these(channels: list[str], command: str) -> str:
    agents, meeting = channels
    how = (
        ""
        if command == "chorus"
        else f" from {Path.cwd()}; or `source {Path(command).parent / 'activate'}` first and "
        "type `chorus`"
    )
    return (
        f"\nTry (in another terminal{how}):\n"
        f"  {command} context {agents} --max-tokens 200\n"
        f"  {command} context {agents} --for {AGENT} --max-tokens 300\n"
        f"  {command} state {agents}\n"
        f"  {command} summary {meeting}\n"
        f"  {command} recap {meeting}\n"
        f"  {command} watch"
    )


def suggest(channels: list[str]) -> None:
    # Printed whole, never wrapped at the terminal's width: a command is copied line by line.
    console.print(try_these(channels, chorus_command()), markup=False, soft_wrap=True)


def left_running(settings: Settings, command: str, own_worker: bool, kept: bool = True) -> str:
    """What the demo leaves running once it ends, and how to stop it: its own worker stops
    with it (`kept`: it was kept for a terminal until Ctrl-C; else, with no terminal, how
    to start one is said); the local broker keeps running (a cluster it was pointed at is
    not chorus's). One line."""
    if not own_worker:
        worker = "The worker you started keeps running (Ctrl-C in its terminal stops it)"
    elif kept:
        worker = "The demo's worker has stopped"
    else:
        worker = (
            "The demo's worker has stopped (no terminal to keep it for): start one with "
            f"`{command} worker` (it runs until Ctrl-C) for the commands above and the "
            "README's agent example"
        )
    if settings.bootstrap_servers:
        return (
            f"{worker}; the Kafka cluster at {settings.bootstrap_servers} "
            "(CHORUS_BOOTSTRAP_SERVERS) is not chorus's to stop."
        )
    run_dir = local_run_dir(settings)
    cluster = cluster_status(run_dir)
    if cluster is None:
        return f"{worker}; no local Kafka broker is running."
    return (
        f"{worker}; the local Kafka broker keeps running ({cluster.bootstrap_servers}, "
        f"data in {run_dir}). Stop it with `{command} broker stop` (or `make broker-stop` in "
        "the checkout)."
    )


def run_demo(settings: Settings, turns: int, rate: float, debounce: float, worker: bool) -> None:
    process = start_worker(settings, Path(".chorus/demo-worker.log")) if worker else None
    interactive = sys.stdin.isatty()
    try:
        suggest(asyncio.run(demo(settings, turns, rate, debounce)))
        if process is not None and interactive:
            # `chorus summary` and `chorus recap` also answer from the compacted topics
            # without a worker; `context`, `state` and `watch` need this one.
            console.print("[bold]The worker keeps running for them; Ctrl-C to stop.[/bold]")
            with contextlib.suppress(KeyboardInterrupt):
                while process.poll() is None:
                    time.sleep(1)
    finally:
        if process is not None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
    ended = left_running(
        settings, chorus_command(), own_worker=process is not None, kept=interactive
    )
    console.print(ended, markup=False, soft_wrap=True)
