"""The budgeted context on a real broker: the HTTP endpoint, `chorus context`, and
`chorus summary` / `chorus recap` answering from the compacted topics without a worker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable

import httpx
import orjson
import pytest

from projections.model import utc_now
from projections.summarise import estimate_tokens
from streams.interfaces.demo import SCENARIO_CHANNEL, scenario_messages
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.settings import Settings
from tests.conftest import REPO, WorkerProcess

pytestmark = pytest.mark.kafka


def chorus(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams.interfaces.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, **env},
    )


async def test_context_endpoint_and_cli_stay_within_budget(
    chorus_settings: Settings,
    chorus_env: dict[str, str],
    start_worker: Callable[..., WorkerProcess],
) -> None:
    await create_topics(chorus_settings)
    worker = start_worker(
        CHORUS_SUMMARY_AFTER_MESSAGES="4",
        CHORUS_RECAP_DEBOUNCE_SECONDS="1",
        CHORUS_RECAP_CHECK_SECONDS="0.2",
    )
    await send_messages(chorus_settings, scenario_messages(utc_now(), rate=50))
    url = f"{worker.base_url}/channels/{SCENARIO_CHANNEL}/context"
    found: dict[str, object] = {}
    for _ in range(120):
        found = httpx.get(url, params={"max_tokens": 2000}, timeout=10).json()
        parts = found["parts"]
        if parts["summary"] and parts["recap"] and parts["messages"]["total"] == 14:
            break
        await asyncio.sleep(0.5)
    text = str(found["text"])
    assert "Summary:" in text and "Latest recap:" in text and "Open commitments" in text
    assert "worker-a owes planner: “Fix the sample service config" in text
    for budget in (0, 7, 50, 120, 400):
        small = httpx.get(url, params={"max_tokens": budget}, timeout=10).json()
        assert estimate_tokens(small["text"]) <= budget == small["max_tokens"]
    assert httpx.get(url, params={"max_tokens": "-1"}, timeout=10).status_code == 400
    assert httpx.get(url, params={"max_tokens": "many"}, timeout=10).status_code == 400

    cli = chorus(chorus_env, "context", SCENARIO_CHANNEL, "--max-tokens", "120")
    assert cli.returncode == 0, cli.stderr
    assert estimate_tokens(cli.stdout.rstrip("\n")) <= 120 and cli.stdout.startswith("Summary:")
    as_json = chorus(chorus_env, "context", SCENARIO_CHANNEL, "--json")
    assert orjson.loads(as_json.stdout)["parts"]["commitments"]["total"] >= 1

    shown = chorus(chorus_env, "summary", SCENARIO_CHANNEL)
    assert "(from the worker)" in shown.stderr
    worker.stop()
    offline = chorus(chorus_env, "summary", SCENARIO_CHANNEL)
    assert offline.returncode == 0, offline.stderr
    assert "no worker answered" in offline.stderr and "summaries" in offline.stderr
    assert orjson.loads(offline.stdout)["content"] == orjson.loads(shown.stdout)["content"]
    recap = chorus(chorus_env, "recap", SCENARIO_CHANNEL)
    assert recap.returncode == 0 and "no worker answered" in recap.stderr
    assert orjson.loads(recap.stdout)["phase"] == "COMPLETED"
