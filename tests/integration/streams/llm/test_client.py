"""The fake chat-completions server the LLM tests use, run as a process of its own
(`python -m tests.fakes.llm_server`, for a worker to call by hand)."""

from __future__ import annotations

import subprocess
import sys

import httpx

from tests.conftest import REPO

USER = "New items (2):\n<items>\n[alice] Let's use Redis for the cache\n[bob] Agreed\n</items>"


def test_fake_server_runs_as_a_process() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.llm_server", "--port", "0", "--delay", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        base_url = line.rsplit(" ", 1)[-1].strip()
        assert base_url.startswith("http://127.0.0.1:")
        reply = httpx.post(
            f"{base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": USER}]},
            timeout=5,
        )
        assert reply.json()["choices"][0]["message"]["content"].startswith("Summary of 2 items")
    finally:
        process.terminate()
        process.wait(timeout=10)
