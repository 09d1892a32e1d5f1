"""Agents taking part (issue 41): request/reply pairs through `chorus mcp --transport http`,
beside the Python client's `wait_for` over Kafka.

A `chorus worker` (both roles, default settings) folds the channels. Over MCP, 2 × C agents
(a planner and a worker per channel, each with its own bearer token) share one `chorus mcp
--transport http` process: each planner sends N / C COMMANDs to its worker one after the
other, each followed at once by `wait_for_reply`; its worker polls `check_messages` with its
cursor and answers each request with a DONE whose body names it. A pair's latency is from
the moment the worker called `reply` to the moment the planner's `wait_for_reply` returned,
both on this process's clock: the DONE's own way to the broker is counted in (a wait may
return before the replier hears that its DONE was acknowledged). The same pairs again
with `streams.client`: `send` and `wait_for` (a Kafka consumer per wait) for the planners,
`Client.messages` and `reply` for the workers.

Checked on every run: each wait returned its own request's reply (its id and body), and
each worker saw every request addressed to it exactly once across its cursors.
"""

from __future__ import annotations

import asyncio
import functools
import operator
import os
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from bench.measure import percentiles
from bench.systems import Broker, System, chorus_worker, log
from streams.client import Client, Message
from streams.settings import Settings
from streams.testing import mcp_over_http

# Each worker's pause between two empty polls of its inbox (10 workers: 20 polls a second
# at most, on the one MCP server).
POLL_SECONDS = 0.5
WAIT_SECONDS = 60


@dataclass
class Tally:
    """What one run of pairs measured and checked."""

    latencies_ms: list[float] = field(default_factory=list)
    wrong_answers: int = 0
    seen: Counter[str] = field(default_factory=Counter)
    asked: set[str] = field(default_factory=set)
    # A channel whose agents stopped: what stopped them (one line each).
    errors: list[str] = field(default_factory=list)

    async def each(self, runs: list[Awaitable[None]]) -> None:
        """Run the channels' pairs at once; one that fails is recorded, not fatal."""
        for outcome in await asyncio.gather(*runs, return_exceptions=True):
            if isinstance(outcome, BaseException):
                self.errors.append(_one_line(outcome))

    def figures(self, seconds: float) -> dict[str, Any]:
        pairs = len(self.latencies_ms)
        return {
            "pairs": pairs,
            "seconds": round(seconds, 1),
            "pairs_per_second": round(pairs / seconds, 1) if seconds else None,
            "reply_to_wait_ms": percentiles(self.latencies_ms),
            "wrong_answers": self.wrong_answers,
            "missed": len(self.asked - set(self.seen)),
            "repeated": sum(count - 1 for count in self.seen.values() if count > 1),
            "errors": self.errors,
        }


def _one_line(error: BaseException) -> str:
    """What stopped a channel, the innermost error of a group."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}".splitlines()[0]


# What a worker does with one request (the message as its inbox gave it): the reply's id.
Answer = Callable[[dict[str, Any]], Awaitable[str]]


def body_of(request_id: str) -> str:
    return f"done: notes for {request_id}\n\nin full"


async def pairs_on(
    channel: str,
    count: int,
    ask: Callable[[int], Awaitable[str]],
    wait: Callable[[str], Awaitable[dict[str, Any]]],
    inbox: Callable[[int | None], Awaitable[tuple[list[dict[str, Any]], int]]],
    answer: Answer,
    tally: Tally,
) -> None:
    """`count` pairs on one channel: the planner asks and waits, the worker reads its inbox
    by cursor and replies."""
    # request id -> when its reply was called for, and (once known) the reply's id
    replying: dict[str, float] = {}
    replied: dict[str, str] = {}
    answered = asyncio.Condition()
    done = asyncio.Event()

    async def worker() -> None:
        cursor: int | None = None
        while not done.is_set():
            messages, cursor = await inbox(cursor)
            for message in messages:
                tally.seen[message["id"]] += 1
                replying[message["id"]] = time.monotonic()
                reply_id = await answer(message)
                async with answered:
                    replied[message["id"]] = reply_id
                    answered.notify_all()
            if not messages:
                await asyncio.sleep(POLL_SECONDS)

    async def planner() -> None:
        for n in range(count):
            request_id = await ask(n)
            tally.asked.add(request_id)
            ended = await wait(request_id)
            returned = time.monotonic()
            async with answered:
                await answered.wait_for(functools.partial(operator.contains, replied, request_id))
            ended_by = ended.get("ended_by") or {}
            expected = (replied[request_id], body_of(request_id))
            if (ended_by.get("id"), ended_by.get("content")) != expected:
                tally.wrong_answers += 1
            tally.latencies_ms.append((returned - replying[request_id]) * 1000)
        done.set()

    await asyncio.gather(worker(), planner())


# --- over MCP ---------------------------------------------------------------------------------


def tokens_for(channels: int) -> dict[str, str]:
    return {
        f"{role}-{n}": f"{role}-{n}-token-{os.urandom(8).hex()}"
        for n in range(channels)
        for role in ("planner", "worker")
    }


def mcp_server(
    system: System, work: Path, tokens: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int]:
    path = work / "agents.tokens"
    path.write_text("".join(f"{name} {token}\n" for name, token in tokens.items()))
    env = {**system.process.env, "CHORUS_AGENT_TOKENS_FILE": str(path)}
    return mcp_over_http(env, work / "mcp-http.log")


def mcp_agent(port: int, token: str) -> McpClient:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    return McpClient(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http))


def _structured(result: Any) -> dict[str, Any]:
    if result.is_error:
        raise RuntimeError(result.content[0].text)
    found: dict[str, Any] = result.structured_content
    return found


async def over_mcp(port: int, tokens: dict[str, str], channels: int, count: int) -> Tally:
    tally = Tally()

    async def channel_pairs(n: int) -> None:
        channel = f"bench/agents-{n}"
        async with (
            mcp_agent(port, tokens[f"planner-{n}"]) as planner,
            mcp_agent(port, tokens[f"worker-{n}"]) as worker,
        ):

            async def ask(k: int) -> str:
                sent = await planner.call_tool(
                    "send_message",
                    {
                        "channel": channel,
                        "type": "command",
                        "content": f"request {k}: write the notes",
                        "target": f"role:worker-{n}",
                    },
                )
                return str(_structured(sent)["id"])

            async def wait(request_id: str) -> dict[str, Any]:
                arguments = {
                    "channel": channel,
                    "request_id": request_id,
                    "timeout_seconds": WAIT_SECONDS,
                }
                return _structured(await planner.call_tool("wait_for_reply", arguments))

            async def inbox(after: int | None) -> tuple[list[dict[str, Any]], int]:
                arguments: dict[str, Any] = {"channel": channel, "limit": 50}
                if after is not None:
                    arguments["after"] = after
                page = _structured(await worker.call_tool("check_messages", arguments))
                return page["messages"], page["next"]

            async def answer(message: dict[str, Any]) -> str:
                arguments = {
                    "channel": channel,
                    "to": message["id"],
                    "type": "done",
                    "content": body_of(message["id"]),
                }
                sent = _structured(await worker.call_tool("reply", arguments))
                return str(sent["id"])

            await pairs_on(channel, count, ask, wait, inbox, answer, tally)

    await tally.each([channel_pairs(n) for n in range(channels)])
    return tally


# --- the Python client over Kafka -------------------------------------------------------------


async def over_kafka(system: System, channels: int, count: int) -> Tally:
    tally = Tally()
    env = system.process.env
    settings = Settings(
        bootstrap_servers=env["CHORUS_BOOTSTRAP_SERVERS"],
        topic_prefix=env["CHORUS_TOPIC_PREFIX"],
        partitions=int(env["CHORUS_PARTITIONS"]),
        web_port=int(env["CHORUS_WEB_PORT"]),
    )

    async def channel_pairs(n: int) -> None:
        channel = f"bench/client-{n}"
        sent_by_id: dict[str, Any] = {}
        async with Client(settings) as chorus:

            async def ask(k: int) -> str:
                sent = await chorus.send(
                    channel,
                    sender=f"planner-{n}",
                    type="command",
                    content=f"request {k}: write the notes",
                    target=f"role:worker-{n}",
                )
                sent_by_id[sent.id] = sent
                return sent.id

            async def wait(request_id: str) -> dict[str, Any]:
                outcome = await chorus.wait_for(sent_by_id[request_id], timeout=WAIT_SECONDS)
                message = outcome.message
                ended_by = {"id": message.id, "content": message.content} if message else None
                return {"ended_by": ended_by}

            async def inbox(after: int | None) -> tuple[list[dict[str, Any]], int]:
                page = await chorus.messages(
                    channel, after=after, for_agent=f"worker-{n}", limit=50
                )
                return page["messages"], page["next"]

            async def answer(entry: dict[str, Any]) -> str:
                request = Message.model_validate({k: v for k, v in entry.items() if k != "offset"})
                reply = await chorus.reply(
                    request, sender=f"worker-{n}", type="done", content=body_of(request.id)
                )
                return reply.id

            await pairs_on(channel, count, ask, wait, inbox, answer, tally)

    await tally.each([channel_pairs(n) for n in range(channels)])
    return tally


async def measure(broker: Broker, work: Path, pairs: int, channels: int) -> dict[str, Any]:
    """`pairs` request/reply pairs over `channels` channels (2 agents each), over MCP then
    with the Python client; each with its figures and checks."""
    system = chorus_worker(broker, work, "agents").start()
    count = pairs // channels
    results: dict[str, Any] = {"agents": 2 * channels, "channels": channels}
    try:
        tokens = tokens_for(channels)
        server, port = mcp_server(system, work, tokens)
        try:
            started = time.monotonic()
            tally = await over_mcp(port, tokens, channels, count)
            results["mcp_http"] = tally.figures(time.monotonic() - started)
        finally:
            server.terminate()
            server.wait(timeout=30)
        log(f"  over MCP: {results['mcp_http']}")
        started = time.monotonic()
        tally = await over_kafka(system, channels, count)
        results["client_kafka"] = tally.figures(time.monotonic() - started)
        log(f"  the Python client: {results['client_kafka']}")
    finally:
        system.process.stop()
    return results


def report(result: dict[str, Any]) -> list[str]:
    """The phase as markdown (bench/report.py's section)."""
    from bench.report import ms, number, table

    rows = []
    stopped = []
    for label, key in (
        (f"{result['agents']} agents over MCP streamable HTTP", "mcp_http"),
        ("the Python client (wait_for over Kafka)", "client_kafka"),
    ):
        figures = result.get(key)
        if not figures:
            continue
        stopped += [f"{label}: a channel stopped: {error}" for error in figures["errors"]]
        latency = figures["reply_to_wait_ms"]
        rows.append(
            [
                label,
                number(figures["pairs"]),
                ms(latency["p50"]),
                ms(latency["p95"]),
                ms(latency["p99"]),
                number(figures["pairs_per_second"], 1),
                f"{figures['wrong_answers']} / {figures['missed']} / {figures['repeated']}",
            ]
        )
    return [
        f"## Agents: request/reply pairs on {result['channels']} channels",
        "",
        *table(
            [
                "how",
                "pairs",
                "reply called → wait returned p50 ms",
                "p95",
                "p99",
                "pairs/s",
                "wrong / missed / repeated",
            ],
            rows,
        ),
        *stopped,
    ]
