"""`chorus mcp` as a process, answering over stdio from a stub HTTP server for a worker: what
it logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import REPO
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
