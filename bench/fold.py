"""Fold throughput: N pre-produced messages through a processor, measured on its output.

Each processor (the whole `chorus worker`, chorus's fold stage alone, the Quix Streams peer)
reads the same messages topic from the beginning and writes one driver event per message
per projection. Throughput is N ÷ (last − first driver-event timestamp), the timestamps
being the CreateTime its producer stamped, so neither the bench's own polling nor the
processor's start-up is counted. CPU is the processor's own (user + system) over the same
window, sampled with psutil.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.common import (
    Phase,
    Worker,
    create_topic,
    log,
    timeline,
    topic_span,
    wait_for_count,
)
from bench.meta import REPO
from bench.pipeline import (
    SUMMARY_AFTER_SECONDS,
    Coverage,
    Summary,
    bytes_per_message,
    collect_summaries,
    cpu_ms_per_message_to,
    pipeline_result,
    process_name,
)

QUIX_VENV = REPO / "bench" / ".venv-quix"
QUIX_REQUIREMENTS = REPO / "bench" / "quix_peer" / "requirements.txt"


@dataclass
class CpuSampler:
    """(wall, output count, process cpu seconds) at each poll; `broker`, when set, polls the
    local broker's JVM at the same moments (its CPU, apart from the processor's)."""

    pid: int
    samples: list[tuple[float, int, float]] = field(default_factory=list)
    broker: CpuSampler | None = None

    def __call__(self, total: int) -> None:
        if self.broker is not None:
            self.broker(total)
        try:
            process = psutil.Process(self.pid)
            times = process.cpu_times()
            cpu = times.user + times.system + times.children_user + times.children_system
            # `chorus worker` is a supervisor: its roles' processes do the work.
            for child in process.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child_times = child.cpu_times()
                    cpu += child_times.user + child_times.system
        except psutil.Error:
            return
        self.samples.append((time.time(), total, cpu))

    def cpu_ms_between(self, first: int, end: int) -> float | None:
        """CPU per output record from the last poll at or before `first` records to the first
        at or after `end` (from the first poll with output when `first` is 0: start-up CPU is
        not a record's)."""
        seen = [s for s in self.samples if s[1] > 0]
        before = [s for s in seen if s[1] <= first] or seen[:1]
        after = [s for s in seen if s[1] >= end]
        if not before or not after or after[0][1] <= before[-1][1]:
            return None
        (_, c0, cpu0), (_, c1, cpu1) = before[-1], after[0]
        return (cpu1 - cpu0) * 1000.0 / (c1 - c0)

    def cpu_ms_per_message(self, per_message: int) -> float | None:
        """CPU per input message between the first poll that saw output and the last poll."""
        seen = [s for s in self.samples if s[1] > 0]
        if len(seen) < 2:
            return None
        (_, c0, cpu0), (_, c1, cpu1) = seen[0], seen[-1]
        if c1 <= c0:
            return None
        return (cpu1 - cpu0) * 1000.0 / ((c1 - c0) / per_message)

    def wall_rate(self, per_message: int) -> float | None:
        """Messages/s from the bench's own polls (a cross-check on the timestamps)."""
        seen = [s for s in self.samples if s[1] > 0]
        if len(seen) < 2 or seen[-1][0] <= seen[0][0]:
            return None
        return (seen[-1][1] - seen[0][1]) / per_message / (seen[-1][0] - seen[0][0])

    def utilisation(self) -> float | None:
        """Average cores used by the process while it produced output."""
        seen = [s for s in self.samples if s[1] > 0]
        if len(seen) < 2 or seen[-1][0] <= seen[0][0]:
            return None
        return (seen[-1][2] - seen[0][2]) / (seen[-1][0] - seen[0][0])


async def measure_output(
    phase: Phase,
    topic: str,
    expected: int,
    per_message: int,
    pid: int,
    alive: Any,
    timeout: float,
    sampler: CpuSampler | None = None,
) -> dict[str, Any]:
    """`sampler`: the caller's, to read its polls afterwards."""
    sampler = sampler or CpuSampler(pid)
    broker_pid = phase.broker.pid()
    if broker_pid is not None and sampler.broker is None:
        sampler.broker = CpuSampler(broker_pid)
    started = time.time()
    await wait_for_count(
        phase.broker.bootstrap, topic, expected, timeout, poll=0.25, alive=alive, on_poll=sampler
    )
    span = await topic_span(phase.broker.bootstrap, topic)
    messages = expected // per_message
    step_ms = max(250, int(span.seconds * 1000 / 40))
    line = await timeline(phase.broker.bootstrap, topic, span.first_ms, span.last_ms, step_ms)
    return {
        "messages": messages,
        "driver_events": span.count,
        "seconds": span.seconds,
        "msgs_per_s": messages / span.seconds,
        "wall_to_done_s": time.time() - started,
        "msgs_per_s_polled": sampler.wall_rate(per_message),
        "cpu_ms_per_msg": sampler.cpu_ms_per_message(per_message),
        "cores_used": sampler.utilisation(),
        "broker_cpu_ms_per_msg": sampler.broker.cpu_ms_per_message(per_message)
        if sampler.broker
        else None,
        "timeline": [(round(t, 3), n / per_message) for t, n in line],
    }


async def run_chorus(
    phase: Phase,
    messages: int,
    projections: int,
    timeout: float,
    fold_only: bool = False,
    sampler: CpuSampler | None = None,
    pipeline_ends: dict[str, int] | None = None,
) -> tuple[dict[str, Any], Worker]:
    """The whole worker (`chorus worker`), or its fold stage alone; returns the worker,
    stopped, for the recovery measurement. `sampler` (pid 0: set here) keeps the CPU polls.

    `pipeline_ends` (channel -> offset of its last message; whole worker only): also wait
    for the summaries that cover every channel's last message, and add the pipeline's
    figures under "pipeline" (bench/pipeline.py)."""
    if fold_only:
        topic = phase.topic("driver-events") + "-fold-only"
        await create_topic(phase.broker.bootstrap, topic, phase.partitions, {})
        # Its own consumer group, changelogs and data dir (table names are the same).
        env = phase.env(
            CHORUS_APP_ID=phase.app_id.replace("bench-", "bench-foldonly-", 1),
            CHORUS_DATA_DIR=str(phase.work / f"{phase.name}-{phase.tag}" / "fold-only-data"),
        )
        worker = Worker(
            env,
            phase.work / f"{phase.name}-fold-only.log",
            loglevel="info",
            module=("bench.fold_worker",),
        )
    else:
        topic = phase.topic("driver-events")
        # The pipeline is measured to its last summary: the tail is summarised after
        # SUMMARY_AFTER_SECONDS, not the default 300 s (bench/pipeline.py).
        env = phase.env(**(pipeline_env() if pipeline_ends is not None else {}))
        worker = Worker(env, phase.work / f"{phase.name}-worker.log", loglevel="info")
    summaries: list[Summary] = []
    stop = asyncio.Event()
    collector = (
        asyncio.create_task(
            collect_summaries(phase.broker.bootstrap, phase.topic("summaries"), summaries, stop)
        )
        if pipeline_ends is not None and not fold_only
        else None
    )
    sampler = sampler or CpuSampler(0)
    worker.start(wait=False)
    sampler.pid = worker.pid
    try:
        result = await measure_output(
            phase,
            topic,
            messages * projections,
            projections,
            worker.pid,
            worker.check_alive,
            timeout,
            sampler,
        )
        result["rss_mb"] = worker.rss() / 1e6
        if not fold_only:
            result["bytes_per_message"] = bytes_per_message(
                phase.broker.topic_bytes(), phase.app_id, phase.prefix, messages
            )
        if collector is not None and pipeline_ends is not None:
            result["pipeline"] = await _to_last_summary(
                phase,
                topic,
                messages,
                projections,
                pipeline_ends,
                summaries,
                sampler,
                worker,
                timeout,
            )
    finally:
        # The worker first: an interrupted run must not leave it running.
        worker.stop()
        stop.set()
        if collector is not None:
            await asyncio.gather(collector, return_exceptions=True)
    return result, worker


def pipeline_env() -> dict[str, str]:
    return {"CHORUS_SUMMARY_AFTER_SECONDS": f"{SUMMARY_AFTER_SECONDS:g}"}


async def _to_last_summary(
    phase: Phase,
    topic: str,
    messages: int,
    projections: int,
    ends: dict[str, int],
    summaries: list[Summary],
    sampler: CpuSampler,
    worker: Worker,
    timeout: float,
    stall: float = 120.0,
) -> dict[str, Any]:
    """After the last driver event: wait until every channel's last message is covered by a
    summary, polling the CPU of all the worker's processes; the pipeline's figures."""
    coverage = Coverage(ends)
    deadline = time.monotonic() + timeout
    fed, last_missing, last_change = 0, -1, time.monotonic()
    events = messages * projections
    while time.monotonic() < deadline:
        for summary in summaries[fed:]:
            coverage.add(summary)
        fed = len(summaries)
        sampler(events)
        if coverage.done:
            break
        missing = coverage.missing()
        if missing != last_missing:
            last_missing, last_change = missing, time.monotonic()
        elif time.monotonic() - last_change > stall:
            log(f"  pipeline: no summary progress for {stall:.0f}s, {missing} channels uncovered")
            break
        worker.check_alive()
        await asyncio.sleep(0.25)
    end_cpu = sampler.samples[-1][2] if sampler.samples else 0.0
    broker = sampler.broker
    broker_cpu = (
        cpu_ms_per_message_to(broker.samples, messages, projections, broker.samples[-1][2])
        if broker is not None and broker.samples
        else None
    )
    span = await topic_span(phase.broker.bootstrap, topic)
    seen = [s for s in sampler.samples if s[1] > 0]
    cores = (
        (seen[-1][2] - seen[0][2]) / (seen[-1][0] - seen[0][0])
        if len(seen) >= 2 and seen[-1][0] > seen[0][0]
        else None
    )
    by_process = cpu_by_process(worker.pid)
    processes = len(by_process)
    result = pipeline_result(
        messages,
        span.first_ms,
        span.last_ms,
        coverage,
        cpu_ms_per_message_to(sampler.samples, messages, projections, end_cpu),
        cores,
        processes,
    )
    result["cpu_s_by_process"] = by_process
    result["broker_cpu_ms_per_msg"] = broker_cpu
    log(
        f"  pipeline to its last summary: {_fmt(result['msgs_per_s'])} msg/s, "
        f"last summary {_fmt(result['last_summary_s'])} s after the first output, "
        f"{coverage.missing()} channels uncovered"
    )
    return result


def cpu_by_process(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of `pid` and each of its descendants, named by
    role ("supervisor" for `pid`, "fold"/"context" for `chorus worker --role ...`)."""
    out: dict[str, float] = {}
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            out[process_name(process.pid == pid, process.cmdline(), process.pid)] = round(
                times.user + times.system, 3
            )
    return out


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f}"


async def run_floor(phase: Phase, messages: int, mode: str, timeout: float) -> dict[str, Any]:
    """bench.faust_floor in `mode` over the same messages (its own group, tables, data dir)."""
    topic = phase.topic(f"floor-{mode}")
    await create_topic(phase.broker.bootstrap, topic, phase.partitions, {})
    env = phase.env(
        CHORUS_APP_ID=phase.app_id.replace("bench-", f"bench-floor{mode}-", 1),
        CHORUS_DATA_DIR=str(phase.work / f"{phase.name}-{phase.tag}" / f"floor-{mode}-data"),
    )
    worker = Worker(
        env,
        phase.work / f"{phase.name}-floor-{mode}.log",
        loglevel="info",
        module=("bench.faust_floor", "--mode", mode, "--output", topic),
    )
    per_message = 1 if mode == "read" else 2
    worker.start(wait=False)
    try:
        result = await measure_output(
            phase,
            topic,
            messages * per_message,
            per_message,
            worker.pid,
            worker.check_alive,
            timeout,
        )
    finally:
        worker.stop()
    result.pop("timeline", None)
    return result


def ensure_quix_venv() -> Path:
    """bench/.venv-quix with quixstreams; created (python3 -m venv + pip) when missing."""
    python = QUIX_VENV / "bin" / "python"
    probe = [str(python), "-c", "import quixstreams, aiokafka"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    log(f"creating {QUIX_VENV} (python3 -m venv + pip install quixstreams)")
    base = os.environ.get("BENCH_QUIX_PYTHON", "python3")
    subprocess.run([base, "-m", "venv", "--clear", str(QUIX_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-r", str(QUIX_REQUIREMENTS)], check=True
    )
    return python


async def run_quix(phase: Phase, messages: int, projections: int, timeout: float) -> dict[str, Any]:
    python = ensure_quix_venv()
    output = phase.topic("quix-driver-events")
    dead = phase.topic("quix-dead-letters")
    for topic in (output, dead):
        await create_topic(phase.broker.bootstrap, topic, phase.partitions, {})
    state_dir = phase.work / f"{phase.name}-quix-state"
    log_path = phase.work / f"{phase.name}-quix.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [
        str(python),
        "-m",
        "bench.quix_peer.peer",
        "--bootstrap",
        phase.broker.bootstrap,
        "--input",
        phase.topic("messages"),
        "--output",
        output,
        "--dead-letters",
        dead,
        "--group",
        f"{phase.app_id}-quix",
        "--state-dir",
        str(state_dir),
        "--partitions",
        str(phase.partitions),
    ]
    with log_path.open("ab") as out:
        process = subprocess.Popen(
            command, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def alive() -> None:
        if process.poll() is not None:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"quix peer exited early:\n{tail}")

    try:
        result = await measure_output(
            phase, output, messages * projections, projections, process.pid, alive, timeout
        )
        result["rss_mb"] = psutil.Process(process.pid).memory_info().rss / 1e6
        version = subprocess.run(
            [str(python), "-c", "import quixstreams; print(quixstreams.__version__)"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        result["version"] = version
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    return result
