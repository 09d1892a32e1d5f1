"""`python -m bench.run` (`make bench`): chorus beside Quix Streams, in one run on one broker.

Phases (`--only` picks some; docs/benchmarks.md says how each measures):
  throughput  N real messages through the fold stage alone, Quix Streams' same fold, and
              `chorus worker` to its last driver event and its last summary;
  wake        produce → driver event at fixed rates, chorus and Quix, and what each role
              writes per message by topic;
  recovery    the fold SIGKILLed under load: the longest wait, nothing lost;
  replay      `chorus replay --benchmark` against a raw read;
  quality     ROUGE of the default summary on QMSum val (skipped without ../shared/data);
  channels    N resident channels (1,000,000; 100,000 with --quick) folded by chorus and by
              Quix Streams, then the wake probe over them, timer ticks, stop and restarts;
  agents      request/reply pairs of 20 agents over `chorus mcp --transport http`, beside
              the Python client's wait_for over Kafka (bench/agents.py).

Starts its own local broker (in a temp dir, stopped at the end). Writes
bench/results/<date>[-quick].json and .md and prints the markdown. `--quick` is a smoke run
of a few minutes; the full run takes about an hour on 2 cores (the 1,000,000-channel
phase alone about 40 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.meta import RESULTS, ensure_requirements, run_meta

PHASES = ("throughput", "wake", "recovery", "replay", "quality", "channels", "agents")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few minutes")
    parser.add_argument("--only", nargs="+", choices=PHASES, help="run only these phases")
    parser.add_argument("--messages", type=int, help="throughput and replay's N")
    parser.add_argument("--channels", type=int, default=200)
    parser.add_argument("--rates", type=float, nargs="+", default=[100.0, 300.0, 500.0])
    parser.add_argument("--wake-seconds", type=float, help="how long each rate is sent")
    parser.add_argument("--kill-rate", type=float, default=100.0, help="recovery's msg/s")
    parser.add_argument("--many-channels", type=int, help="the channels phase's N")
    parser.add_argument(
        "--many-systems", nargs="+", default=["chorus", "quix"], help="the channels phase's"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    args = parser.parse_args(argv)
    args.messages = args.messages or (2_000 if args.quick else 20_000)
    args.wake_seconds = args.wake_seconds or (5.0 if args.quick else 30.0)
    args.kill_seconds = 20.0 if args.quick else 60.0
    args.drain = 90.0  # past a 30 s session timeout and a restart
    args.timeout = 600.0 if args.quick else 1200.0
    args.many_channels = args.many_channels or (100_000 if args.quick else 1_000_000)
    args.probe_seconds = 30.0 if args.quick else 60.0
    return args


async def run(args: argparse.Namespace, results: dict[str, Any], work: Path) -> None:
    from bench import agents, channels, recovery, replay, summary_quality, throughput, wake
    from bench.data import load_conversations
    from bench.report import SECTIONS
    from bench.systems import Broker, log
    from streams.testing import local_broker

    wanted = args.only or PHASES
    if "quality" in wanted:
        await phase(results, "quality", lambda: asyncio.to_thread(summary_quality.measure))
    if not set(wanted) - {"quality"}:
        return
    source, conversations = load_conversations()
    _, meetings = load_conversations(meetings_only=True)
    results["meta"]["conversations"] = source
    log("starting the broker")
    with local_broker(work / "kafka") as bootstrap:
        broker = Broker(bootstrap, work / "kafka")
        phases: dict[str, Callable[[], Awaitable[dict[str, Any] | None]]] = {
            "throughput": lambda: throughput.measure(
                broker, work, conversations, args.messages, args.channels, args.timeout
            ),
            "wake": lambda: wake.measure(
                broker, work, meetings, args.rates, args.wake_seconds, args.channels, args.drain
            ),
            "recovery": lambda: recovery.measure(
                broker, work, meetings, args.kill_rate, args.kill_seconds, args.channels, args.drain
            ),
            "replay": lambda: replay.measure(broker, work, conversations, args.messages),
            "channels": lambda: channels.measure(
                broker,
                work,
                conversations,
                args.many_channels,
                args.probe_seconds,
                timeout=3 * 3600.0,
                systems=tuple(args.many_systems),
            ),
            "agents": lambda: agents.measure(broker, work, 100 if args.quick else 1000, 10),
        }
        SECTIONS.setdefault("agents", agents.report)
        for name, measure in phases.items():
            if name in wanted:
                await phase(results, name, measure)


async def phase(
    results: dict[str, Any], name: str, measure: Callable[[], Awaitable[dict[str, Any] | None]]
) -> None:
    """One phase; its failure is recorded under its name and the run goes on."""
    from bench.systems import log

    log(f"phase {name}")
    try:
        found = await measure()
    except Exception as error:
        log(f"{name} failed: {error}")
        results.setdefault("errors", {})[name] = f"{type(error).__name__}: {error}"
        return
    if found is not None:
        results[name] = found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ensure_requirements()
    from bench.report import write

    given = sys.argv[1:] if argv is None else argv
    results: dict[str, Any] = {
        "meta": run_meta(" ".join(["python -m bench.run", *given]), args.quick)
    }
    work = Path(tempfile.mkdtemp(prefix="chorus-bench-"))
    started = time.time()
    # SIGTERM unwinds like Ctrl-C, so the phases stop their processes and the broker.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        asyncio.run(run(args, results, work))
    except KeyboardInterrupt:
        print("interrupted; writing what was measured", file=sys.stderr)
    finally:
        results["meta"]["seconds"] = round(time.time() - started)
        results["meta"]["load_average_at_end"] = [round(load, 2) for load in os.getloadavg()]
        stem = datetime.now().strftime("%Y-%m-%d") + ("-quick" if args.quick else "")
        if args.only:
            stem += "-" + "-".join(args.only)
        path = write(results, args.out, stem)
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(path.read_text("utf-8"))
    return 1 if results.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
