"""`chorus mcp` as a process, answering over stdio from a stub HTTP server for a worker: what
it logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tests.conftest import REPO


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
