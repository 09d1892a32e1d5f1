"""Fault-test fixtures: workers that can be spawned and killed without waiting, and the
figures every test reports (printed at the end of the run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, WorkerProcess
from tests.faults.support import FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FIGURES:
        return
    terminalreporter.section("fault figures")
    for entry in FIGURES:
        terminalreporter.write_line(json.dumps(entry))


class FaultWorker(WorkerProcess):
    """A worker whose start and readiness are separate, so it can die while recovering."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        headers: dict[str, str] | None = None,
        loglevel: str = "warning",
    ) -> None:
        super().__init__(env, log_path)
        token = env.get("CHORUS_API_TOKEN")
        self.headers = headers or ({"Authorization": f"Bearer {token}"} if token else {})
        self.loglevel = loglevel
        self.spawned_at = 0.0

    def spawn(self) -> FaultWorker:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "streams.interfaces.cli", "worker", "--loglevel", self.loglevel],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
        log.close()
        self.spawned_at = time.monotonic()
        return self

    def start(self, timeout: float = 120.0) -> FaultWorker:
        self.spawn()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        probe = f"{self.base_url}/ready"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log_tail()}")
            try:
                answer = httpx.get(probe, timeout=2, headers=self.headers)
                if answer.status_code == 200 and self.context_ready():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"worker not ready in {timeout}s:\n{self.log_tail()}")

    def is_ready(self) -> bool:
        try:
            probe = f"{self.base_url}/ready"
            return httpx.get(probe, timeout=2, headers=self.headers).status_code == 200
        except httpx.HTTPError:
            return False

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.base_url}{path}", timeout=10, headers=self.headers)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@pytest.fixture
def fault_workers(
    chorus_env: dict[str, str], tmp_path: Path
) -> Iterator[Callable[..., FaultWorker]]:
    """`make(**env_overrides)` builds a FaultWorker (not started); all are stopped after."""
    workers: list[FaultWorker] = []

    def make(**overrides: str) -> FaultWorker:
        env = {**chorus_env, **overrides}
        worker = FaultWorker(env, tmp_path / f"worker-{len(workers)}.log")
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.stop()


@pytest.fixture
def fault_seed() -> int:
    """CHORUS_FAULT_SEED (default 20261130): seeds kill moments and generated traffic."""
    return int(os.environ.get("CHORUS_FAULT_SEED", "20261130"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "faults: fault-injection tests (kills, failover, bad input, LLM, security)"
    )
