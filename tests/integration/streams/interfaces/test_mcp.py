"""`chorus mcp` as a process, answering over stdio from a stub HTTP server for a worker: what
it logs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from projections.model import utc_now
from streams.ops.topics import create_topics
from streams.records import DriverEvent
from streams.settings import Settings
from streams.testing import mcp_over_http
from streams.topology import DRIVER_EVENTS
from tests.conftest import REPO, WorkerProcess, read_until
from tests.fakes.worker_stub import stub_worker

STATE = {"channel": "team/a", "decision": None, "projections": {}}


@pytest.fixture
def worker_port() -> Iterator[int]:
    """A worker that answers every GET with a channel's state."""
    with stub_worker(lambda _: STATE) as port:
        yield port


def _mcp_stderr(port: int, *flags: str) -> str:
    """What `chorus mcp` writes on stderr while it answers one get_channel_state call."""
    calls = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "get_channel_state", "arguments": {"channel": "team/a"}},
        },
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "streams.interfaces.cli", "mcp", *flags],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "CHORUS_WEB_PORT": str(port)},
    )
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    for call in calls:
        server.stdin.write(json.dumps(call) + "\n")
    server.stdin.flush()
    answers = [json.loads(server.stdout.readline()) for _ in range(2)]
    server.stdin.close()
    logged = server.stderr.read()
    server.wait(timeout=30)
    assert answers[1]["result"]["isError"] is False, answers[1]
    return logged


@pytest.mark.timeout(120)
def test_chorus_mcp_logs_only_warnings_and_errors_by_default(worker_port: int) -> None:
    assert _mcp_stderr(worker_port) == ""
    # What it left out: each HTTP call to the worker, at INFO.
    assert "HTTP Request" in _mcp_stderr(worker_port, "--loglevel", "info")


# --- agents taking part, through the official MCP client over both transports -------------

CHANNEL = "team/mcp"
PLANNER_TOKEN = "planner-token-0123456789"
WORKER_TOKEN = "worker-a-token-0123456789"
BODY = "Release notes: docs/notes.md\n\n- the parser\n- the lexer"


def _stdio(env: dict[str, str], *flags: str) -> StdioServerParameters:
    """`chorus mcp` as a host starts it."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "streams.interfaces.cli", "mcp", *flags],
        env=env,
        cwd=str(REPO),
    )


async def _inbox(agent: McpClient, request_id: str) -> tuple[list[dict[str, Any]], int]:
    """check_messages until the request is there: (the messages, the cursor)."""
    for _ in range(200):
        result = await agent.call_tool("check_messages", {"channel": CHANNEL})
        assert not result.is_error, result
        page = result.structured_content
        assert page is not None
        if any(m["id"] == request_id for m in page["messages"]):
            return page["messages"], page["next"]
        await asyncio.sleep(0.1)
    raise AssertionError(f"{request_id} never reached the inbox")


async def _exchange(planner: McpClient, worker: McpClient, settings: Settings) -> dict[str, Any]:
    """The planner asks, the worker finds the request whole and replies DONE with a body,
    the planner's wait (already waiting) returns how it ended; the wait's latency from the
    DONE's driver event is checked here."""
    sent = await planner.call_tool(
        "send_message",
        {
            "channel": CHANNEL,
            "type": "command",
            "content": "Write the release notes\n\nfor 2.0, in full.",
            "target": "role:worker-a",
        },
    )
    assert not sent.is_error, sent
    request = sent.structured_content
    assert request is not None and set(request) == {
        "id",
        "channel",
        "correlation_id",
        "partition",
        "offset",
    }
    messages, cursor = await _inbox(worker, request["id"])
    [asked] = [m for m in messages if m["id"] == request["id"]]
    assert asked["content"] == "Write the release notes\n\nfor 2.0, in full."  # whole
    assert (asked["sender"], asked["target"]) == ("planner", "role:worker-a")
    assert asked["correlation_id"] == request["correlation_id"]

    waiting = asyncio.ensure_future(
        planner.call_tool(
            "wait_for_reply",
            {"channel": CHANNEL, "request_id": request["id"], "timeout_seconds": 60},
        )
    )
    await asyncio.sleep(1.0)  # the wait is following the channel's events by now
    replied = await worker.call_tool(
        "reply", {"channel": CHANNEL, "to": request["id"], "type": "done", "content": BODY}
    )
    assert not replied.is_error, replied
    done = replied.structured_content
    assert done is not None
    waited = await waiting
    returned = utc_now()
    assert not waited.is_error, waited
    answer = waited.structured_content
    assert answer is not None
    assert (answer["state"], answer["still_open"]) == ("FULFILLED", False)
    assert answer["ended_by"]["id"] == done["id"]
    assert (answer["ended_by"]["content"], answer["ended_by"]["sender"]) == (BODY, "worker-a")
    assert answer["decision"]["decision"] == "COMPLETE"
    assert BODY in waited.content[0].text  # type: ignore[union-attr]
    event = await _event_of(settings, done["id"])
    assert returned - event.timestamp < timedelta(milliseconds=500), returned - event.timestamp
    # Nothing again past the cursor for the worker: its own reply is not for it.
    again = await worker.call_tool("check_messages", {"channel": CHANNEL, "after": cursor})
    assert again.structured_content is not None and again.structured_content["messages"] == []
    return answer


async def _event_of(settings: Settings, message_id: str) -> DriverEvent:
    records = await read_until(
        settings, DRIVER_EVENTS, lambda rs: any(r.value["message_id"] == message_id for r in rs)
    )
    return next(
        DriverEvent.model_validate(r.value) for r in records if r.value["message_id"] == message_id
    )


@pytest.mark.kafka
@pytest.mark.timeout(240)
async def test_two_agents_in_two_stdio_sessions_ask_answer_and_wait(
    chorus_env: dict[str, str],
    chorus_settings: Settings,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    await create_topics(chorus_settings)
    start_worker()
    env = {**os.environ, **chorus_env}
    async with (
        McpClient(_stdio(env, "--as", "planner")) as planner,
        McpClient(_stdio({**env, "CHORUS_AGENT": "worker-a"})) as worker,
    ):
        await _exchange(planner, worker, chorus_settings)
        mine = await planner.call_tool("my_commitments", {"channel": CHANNEL})
    assert mine.structured_content is not None
    assert (mine.structured_content["owes"], mine.structured_content["owed"]) == ([], [])


def _agent(port: int, token: str) -> McpClient:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=90)
    return McpClient(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http))


@pytest.mark.kafka
@pytest.mark.timeout(240)
async def test_two_agents_over_streamable_http_each_named_by_its_token(
    chorus_env: dict[str, str],
    chorus_settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    await create_topics(chorus_settings)
    start_worker()
    tokens = tmp_path / "agents.tokens"
    tokens.write_text(f"planner {PLANNER_TOKEN}\nworker-a {WORKER_TOKEN}\n")
    log = tmp_path / "mcp-http.log"
    env = {**chorus_env, "CHORUS_AGENT_TOKENS_FILE": str(tokens)}
    server, port = mcp_over_http(env, log)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        assert httpx.post(url, json=hello, timeout=10).status_code == 401
        wrong = {"Authorization": "Bearer not-a-token-of-anyone"}
        assert httpx.post(url, json=hello, headers=wrong, timeout=10).status_code == 401
        async with _agent(port, PLANNER_TOKEN) as planner, _agent(port, WORKER_TOKEN) as worker:
            await _exchange(planner, worker, chorus_settings)
    finally:
        server.terminate()
        server.wait(timeout=30)
    logged = log.read_text(errors="replace")
    assert PLANNER_TOKEN not in logged and "not-a-token-of-anyone" not in logged


def _documented_host_configuration() -> dict[str, Any]:
    """The stdio host configuration docs/agents.md gives, as it is written."""
    text = (REPO / "docs" / "agents.md").read_text()
    section = text[text.index("### One agent over stdio") :]
    block = section[section.index("```json\n") + len("```json\n") :]
    configuration: dict[str, Any] = json.loads(block[: block.index("```")])
    return configuration["mcpServers"]["chorus"]


@pytest.mark.kafka
@pytest.mark.timeout(240)
async def test_the_host_configuration_of_the_agents_guide_works_as_written(
    chorus_env: dict[str, str],
    chorus_settings: Settings,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """The server started from the guide's block: its command, its arguments and exactly its
    environment's names (values this test's broker, topics and worker, which has a token)."""
    documented = _documented_host_configuration()
    await create_topics(chorus_settings)
    start_worker(CHORUS_API_TOKEN="the-workers-api-token")
    ours = {
        **chorus_env,
        "CHORUS_WEB_HOST": "127.0.0.1",
        "CHORUS_API_TOKEN": "the-workers-api-token",
    }
    env = {name: ours[name] for name in documented["env"]}
    command = documented["command"].replace("/path/to/chorus", str(REPO))
    assert Path(command).exists(), command
    server = StdioServerParameters(command=command, args=documented["args"], env=env)
    async with McpClient(server) as planner:
        sent = await planner.call_tool(
            "send_message", {"channel": CHANNEL, "type": "query", "content": "which notes?"}
        )
        assert not sent.is_error, sent
        for _ in range(200):
            state = await planner.call_tool("get_channel_state", {"channel": CHANNEL})
            if not state.is_error:
                break
            await asyncio.sleep(0.1)
        mine = await planner.call_tool("my_commitments", {"channel": CHANNEL})
    assert not state.is_error, state
    owed = (mine.structured_content or {})["owed"]
    assert [c["request_id"] for c in owed] == [(sent.structured_content or {})["id"]]
