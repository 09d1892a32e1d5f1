"""streams.interfaces.mcp without a worker: the tools, the refusals, tiny budgets (the
worker's answer stubbed) and what `chorus mcp` logs (a stub HTTP server for a worker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

from projections.context import MAX_CONTEXT_TOKENS, budget_refusal
from streams.interfaces.mcp import answered, build_server, refused
from streams.interfaces.worker_api import WorkerApi
from streams.settings import Settings
from tests.conftest import REPO


@pytest.fixture
def server() -> MCPServer:
    return build_server(Settings(_env_file=None))  # type: ignore[call-arg]


def _text(result: CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


async def test_the_four_tools_are_listed(server: MCPServer) -> None:
    names = [tool.name for tool in await server.list_tools()]
    assert names == [
        "get_channel_context",
        "get_channel_summary",
        "get_channel_state",
        "list_channels",
    ]


@pytest.mark.parametrize(
    "tool", ["get_channel_context", "get_channel_summary", "get_channel_state"]
)
async def test_an_invalid_channel_is_refused_in_one_line(server: MCPServer, tool: str) -> None:
    result = await server.call_tool(tool, {"channel": "Bad Name"})
    assert result.is_error
    assert _text(result).startswith("invalid channel name 'Bad Name'")


@pytest.mark.parametrize("max_tokens", [-1, MAX_CONTEXT_TOKENS + 1])
async def test_a_budget_out_of_range_is_refused(server: MCPServer, max_tokens: int) -> None:
    result = await server.call_tool(
        "get_channel_context", {"channel": "team/a", "max_tokens": max_tokens}
    )
    assert result.is_error
    assert _text(result) == budget_refusal(max_tokens)


def test_an_answer_is_text_and_structured_content() -> None:
    result = answered({"a": 1}, {"a": 1})
    assert _text(result) == '{"a":1}'
    assert result.structured_content == {"a": 1}
    assert not result.is_error
    assert _text(answered("plain")) == "plain"
    assert refused("no worker").is_error


def _context_answer(text: str, min_tokens: int) -> dict[str, Any]:
    return {"text": text, "tokens": 2, "min_tokens": min_tokens, "decision": None, "parts": {}}


@pytest.mark.parametrize("budget", [0, 5, 30])
async def test_a_budget_below_the_header_is_refused_with_the_minimum(
    server: MCPServer, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    async def context(*_: object) -> dict[str, Any]:
        return _context_answer("Channe … [truncated]", 31)

    monkeypatch.setattr(WorkerApi, "context", context)
    result = await server.call_tool(
        "get_channel_context", {"channel": "team/a", "max_tokens": budget}
    )
    assert result.is_error
    assert _text(result) == (
        f"max_tokens {budget} is below the 31 tokens the header line of channel 'team/a' "
        "needs: ask for at least 31"
    )


async def test_a_budget_that_fits_the_header_gets_the_whole_header(
    server: MCPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    header = "Channel team/a: CONTINUE. 1 message; state as of partition offset 0."

    async def context(*_: object) -> dict[str, Any]:
        return _context_answer(header, 17)

    monkeypatch.setattr(WorkerApi, "context", context)
    result = await server.call_tool("get_channel_context", {"channel": "team/a", "max_tokens": 17})
    assert not result.is_error and _text(result) == header


class _StateView(BaseHTTPRequestHandler):
    """A worker that answers every GET with a channel's state."""

    def do_GET(self) -> None:
        body = json.dumps({"channel": "team/a", "decision": None, "projections": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def worker_port() -> Iterator[int]:
    stub = HTTPServer(("127.0.0.1", 0), _StateView)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    yield stub.server_port
    stub.shutdown()


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
        env={**os.environ, "CHORUS_WEB_PORT": str(port), "CHORUS_API_TOKEN": ""},
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
