"""The systems under test, each on topics of its own on the bench's one broker: `chorus
worker` (both roles), its fold stage alone (bench/fold_worker.py), and the Quix Streams
peer running chorus's fold (bench/quix_peer, in its own virtualenv .venv-quix).

Each is started as a user starts it (`streams.testing.WorkerProcess`), its topics created
with `chorus topics create`, and it reads `<prefix>messages` and writes
`<prefix>driver-events`, so the same client and the same counters serve all three.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.measure import TopicRole, chorus_roles, quix_roles
from bench.meta import REPO
from streams.ops.broker import cluster_status
from streams.settings import Settings
from streams.testing import WorkerProcess, worker_env

QUIX_VENV = REPO / ".venv-quix"
QUIX_REQUIREMENTS = REPO / "bench" / "quix_peer" / "requirements.txt"


def log(text: str) -> None:
    from time import strftime

    print(f"[bench {strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def chorus(args: Sequence[str], env: Mapping[str, str], stdin: bytes = b"") -> bytes:
    """Run a `chorus` command as a user does, in `env`; its standard output."""
    argv = [sys.executable, "-m", "streams.interfaces.cli", *args]
    return subprocess.run(
        argv, input=stdin, env=env, cwd=REPO, capture_output=True, check=True
    ).stdout


@dataclass(frozen=True)
class Broker:
    bootstrap: str
    run_dir: Path

    @property
    def settings(self) -> Settings:
        return Settings(bootstrap_servers=self.bootstrap)

    def pid(self) -> int | None:
        """The broker's JVM: its CPU is part of what a message costs."""
        cluster = cluster_status(self.run_dir)
        return cluster.nodes[0].pid if cluster is not None else None


@dataclass
class System:
    """One system under test: its topics (`prefix`), what writes each topic, its process."""

    name: str
    prefix: str
    role_of: TopicRole
    process: WorkerProcess
    # app id or consumer group: its changelog topics carry it
    group: str

    def topic(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def create_topics(self) -> None:
        chorus(["topics", "create"], self.process.env)

    def start(self) -> System:
        """Start it; `chorus worker` is waited for until both roles own their partitions."""
        if self.process.command is None:
            self.process.start(timeout=180)
        else:
            self.process.spawn()
        return self


Makers = Sequence[tuple[str, Callable[[], "System"]]]


async def side_by_side(
    phase: str, makers: Makers, run: Callable[[System], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """`run` on each system in turn, its figures under its label; one failing (its error
    recorded instead) leaves the others'."""
    results: dict[str, Any] = {}
    for label, make in makers:
        log(f"{phase}: {label}")
        try:
            results[label] = await run(make())
        except Exception as error:
            log(f"  {label} failed: {error}")
            results[label] = {"error": f"{type(error).__name__}: {error}"}
    return results


def chorus_worker(broker: Broker, work: Path, tag: str, **settings: str) -> System:
    """`chorus worker`, both roles, default settings but those given (CHORUS_* names)."""
    env = {**worker_env(broker.bootstrap, work / tag / "data", tag), **settings}
    process = WorkerProcess(env, work / tag / "worker.log")
    app_id = env["CHORUS_APP_ID"]
    system = System("chorus", f"{tag}.", chorus_roles(f"{tag}.", app_id), process, app_id)
    system.create_topics()
    return system


def fold_stage(broker: Broker, work: Path, tag: str) -> System:
    env = worker_env(broker.bootstrap, work / tag / "data", tag)
    process = WorkerProcess(env, work / tag / "worker.log", command=("-m", "bench.fold_worker"))
    app_id = env["CHORUS_APP_ID"]
    system = System("fold stage", f"{tag}.", chorus_roles(f"{tag}.", app_id), process, app_id)
    system.create_topics()
    return system


def quix_peer(broker: Broker, work: Path, tag: str) -> System:
    """Quix Streams running chorus's fold; its topics made by `chorus topics create` under
    its own prefix (it reads `messages`, writes `driver-events` and `dead-letters`)."""
    prefix, group = f"{tag}.", f"quix-{tag}"
    command = [
        str(quix_python()),
        "-m",
        "bench.quix_peer.peer",
        *("--bootstrap", broker.bootstrap),
        *("--input", f"{prefix}messages"),
        *("--output", f"{prefix}driver-events"),
        *("--dead-letters", f"{prefix}dead-letters"),
        *("--group", group),
        *("--state-dir", str(work / tag / "state")),
        *("--partitions", "4"),
    ]
    env = {**worker_env(broker.bootstrap, work / tag / "data", tag), "PYTHONPATH": str(REPO)}
    process = WorkerProcess(env, work / tag / "quix.log", command=command)
    system = System("quix", prefix, quix_roles(prefix, group), process, group)
    system.create_topics()
    return system


def quix_python() -> Path:
    """.venv-quix's interpreter, the venv made (python3 -m venv + pip) when missing: Quix
    Streams caps pydantic below what chorus needs, so it lives apart."""
    python = QUIX_VENV / "bin" / "python"
    probe = [str(python), "-c", "import quixstreams, aiokafka"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    log(f"creating {QUIX_VENV} (python3 -m venv + pip install quixstreams)")
    base = os.environ.get("BENCH_QUIX_PYTHON", "python3")
    subprocess.run([base, "-m", "venv", "--clear", str(QUIX_VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-r", str(QUIX_REQUIREMENTS)], check=True)
    return python


def quix_version() -> str:
    found = subprocess.run(
        [str(quix_python()), "-c", "import quixstreams; print(quixstreams.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip()
