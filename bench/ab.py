"""A/B: this checkout's `chorus worker` beside another checkout's, on one broker.

    git worktree add --detach ../base 327f904
    python -m bench.ab ../base [--rounds 2] [--messages 20000] [--channels 200]

The other checkout creates its topics and runs its worker from its own directory (its
`streams/` and `projections/` imported first; this environment's packages otherwise).
Rounds alternate base, this, base, this... over the same real messages, each run on topics,
consumer group and data directory of its own, and each is measured as the throughput phase
measures the pipeline (`bench.throughput.run_system`): msg/s and CPU per message of every
process of the worker and of the broker, to its last driver event and to its last summary.
The spread between rounds is the machine's noise. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.data import encoded_messages, load_conversations
from bench.measure import chorus_roles
from bench.meta import ensure_requirements
from bench.report import number, table
from bench.systems import Broker, System, chorus_worker, log
from bench.throughput import SUMMARY_AFTER_SECONDS, run_system
from streams.testing import WorkerProcess, local_broker, worker_env

CLI = (sys.executable, "-m", "streams.interfaces.cli")


def checkout_worker(broker: Broker, work: Path, tag: str, checkout: Path) -> System:
    """`chorus worker` of `checkout`, run from its directory with this bench's settings."""
    env = {
        **worker_env(broker.bootstrap, work / tag / "data", tag),
        "CHORUS_SUMMARY_AFTER_SECONDS": SUMMARY_AFTER_SECONDS,
    }
    command = ("sh", "-c", f"cd {shlex.quote(str(checkout))} && exec {shlex.join(CLI)} worker")
    process = WorkerProcess(env, work / tag / "worker.log", command=command)
    subprocess.run([*CLI, "topics", "create"], env=process.env, cwd=checkout, check=True)
    app_id = env["CHORUS_APP_ID"]
    return System("chorus", f"{tag}.", chorus_roles(f"{tag}.", app_id), process, app_id)


async def measure(base: Path, rounds: int, messages: int, channels: int) -> dict[str, Any]:
    _, conversations = load_conversations()
    records = encoded_messages(conversations, messages, channels)
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "this": []}
    work = Path(tempfile.mkdtemp(prefix="chorus-ab-"))
    try:
        with local_broker(work / "kafka") as bootstrap:
            broker = Broker(bootstrap, work / "kafka")
            for round_ in range(rounds):
                for label in runs:
                    tag = f"ab{round_}-{label}"
                    system = (
                        checkout_worker(broker, work, tag, base)
                        if label == "base"
                        else chorus_worker(
                            broker, work, tag, CHORUS_SUMMARY_AFTER_SECONDS=SUMMARY_AFTER_SECONDS
                        )
                    )
                    log(f"round {round_}: {label}")
                    runs[label].append(await run_system(system, broker, records, 1200, True))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return runs


def report(runs: dict[str, list[dict[str, Any]]], base: Path) -> list[str]:
    def figures(run: dict[str, Any]) -> list[float]:
        to_event = run["to_last_event"]
        return [
            to_event["msgs_per_s"],
            to_event["cpu_ms_per_msg"],
            to_event["broker_cpu_ms_per_msg"],
            run["msgs_per_s"],
            run["cpu_ms_per_msg"],
            run["broker_cpu_ms_per_msg"],
            run["broker_jit_ms_per_msg"],
        ]

    rows = []
    for label, found in runs.items():
        name = f"{base} (base)" if label == "base" else "this checkout"
        each = [figures(run) for run in found]
        rows += [[f"{name}, round {i}", *(number(x, 2) for x in row)] for i, row in enumerate(each)]
        medians = [statistics.median(column) for column in zip(*each, strict=True)]
        rows.append([f"**{name}, median**", *(number(x, 2) for x in medians)])
    head = ["worker", "msg/s", "CPU ms/msg", "broker", "msg/s", "CPU ms/msg", "broker", "JIT"]
    note = (
        "to its last driver event (first three figures), to its last summary (the rest; JIT: "
        "the broker's JIT compiler threads, part of its CPU)"
    )
    return [f"Pipeline {note}:", "", *table(head, rows)]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__)
    parser.add_argument("base", type=Path, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--channels", type=int, default=200)
    args = parser.parse_args()
    ensure_requirements()
    base = args.base.resolve()
    runs = asyncio.run(measure(base, args.rounds, args.messages, args.channels))
    print("\n".join(report(runs, base)))


if __name__ == "__main__":
    main()
