"""`python -m bench.run` (`make bench`): chorus against the limit and a peer, in one run.

Starts one local Kafka broker (streams.ops.broker.start_cluster on free ports, in a temp dir,
stopped at the end) unless CHORUS_BOOTSTRAP_SERVERS names one, then measures, side by side:

  1. the limit: Kafka's ConsumerPerformance and a raw aiokafka getmany loop over N messages;
  2. chorus: the same N messages through a real `chorus worker` (rocksdb), and through its
     fold stage alone, measured on the driver events;
  3. the peer: the same fold with Quix Streams, in bench/.venv-quix (created when missing);
  4. latency, produce → driver event, at a fixed rate, with and without a 2 s LLM;
  5. replay against the raw read; 6. recovery (warm restart, cold restore) of the worker
     from (2); 7. summarisers in process; 8. worker RSS per 10,000 channels and state
     bytes per channel; 9. summary quality (ROUGE on QMSum val, bench/summary_quality.py;
     skipped without ../shared); 10. bounded state: fold cost and bytes written per message
     as one channel grows to 100,000 messages (bench/growth.py); 11. opt-in, only with
     `--only llm`: the summary with a real local model next to the digest
     (bench/llm_quality.py, needs requirements-llm.txt, about an hour).

Writes bench/results/<date>.json, <date>.md (printed) and <date>-*.png. `--quick` is a
smoke run of a few minutes; the default takes about 10 minutes on 2 cores (limit 25).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.meta import REPO, RESULTS, ensure_requirements, run_meta
from bench.phases import IN_PROCESS, ON_BROKER, PHASES, BenchRun, BrokerRun, run_phase, wanted

if TYPE_CHECKING:
    from bench.common import Broker


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small N: a smoke run of minutes")
    parser.add_argument("--messages", type=int, help="N for throughput, replay and recovery")
    parser.add_argument("--channels", type=int, help="M channels for the throughput run")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=float, default=1000.0, help="latency run's msg/s")
    parser.add_argument("--latency-seconds", type=float)
    parser.add_argument("--memory-channels", type=int)
    parser.add_argument("--llm-meetings", type=int, default=5, help="the llm phase's meetings")
    parser.add_argument("--only", nargs="*", choices=PHASES, help="run only these phases")
    parser.add_argument("--skip", nargs="*", choices=PHASES, default=[])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--tag", default="", help="suffix for the result file names")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    parser.add_argument(
        "--cold-messages",
        type=int,
        nargs="*",
        default=[100_000, 300_000, 1_000_000],
        help="cold phase (opt-in): restore the state of each of these message counts",
    )
    parser.add_argument("--cold-channels", type=int, default=10_000, help="cold phase's channels")
    parser.add_argument(
        "--cold-build",
        choices=("rebuild", "worker"),
        default="rebuild",
        help="cold phase: build the state by a rebuild (fold tables) or a worker (every table)",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.messages = args.messages or (2_000 if quick else 20_000)
    args.channels = args.channels or (50 if quick else 200)
    args.latency_seconds = args.latency_seconds or (6.0 if quick else 20.0)
    args.memory_channels = args.memory_channels or (1_000 if quick else 10_000)
    args.repeats = 2 if quick else 3
    args.drain = 15.0 if quick else 30.0
    args.summariser_seconds = 1.0 if quick else 2.0
    args.timeout = 600.0 if quick else 1200.0
    return args


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def fold_ratios(results: dict[str, Any]) -> dict[str, float | None]:
    """chorus and the peer against the limit, from the limits and fold phases' rates."""
    limits_r = results.get("limits", {})
    raw = (limits_r.get("aiokafka") or {}).get("msgs_per_s")
    cp = (limits_r.get("consumer_performance") or {}).get("msgs_per_s")
    fold_r = results.get("fold", {})
    chorus_rate = (fold_r.get("chorus_worker") or {}).get("msgs_per_s")
    stage_rate = (fold_r.get("chorus_fold_stage") or {}).get("msgs_per_s")
    quix_rate = (fold_r.get("quix") or {}).get("msgs_per_s")
    from bench.pipeline import pipeline_ratios

    return {
        **pipeline_ratios(fold_r),
        "chorus_worker_vs_aiokafka": ratio(chorus_rate, raw),
        "chorus_worker_vs_consumer_performance": ratio(chorus_rate, cp),
        "chorus_worker_vs_quix": ratio(chorus_rate, quix_rate),
        "fold_stage_vs_aiokafka": ratio(stage_rate, raw),
        "fold_stage_vs_quix": ratio(stage_rate, quix_rate),
        "quix_vs_aiokafka": ratio(quix_rate, raw),
    }


async def _produce_dataset(bench: BenchRun, broker: Broker) -> BrokerRun:
    """Produce the N messages every broker phase reads, once; record what they are."""
    from bench.common import Phase, log, produce
    from bench.data import encoded_messages, load_conversations, size_stats
    from streams.ops.topics import create_topics

    args = bench.args
    source, conversations = load_conversations()
    phase = Phase("tput", broker, bench.work, partitions=args.partitions)
    settings = phase.settings()
    await create_topics(settings)
    log(f"producing {args.messages:,} messages over {args.channels:,} channels")
    records = encoded_messages(conversations, args.messages, args.channels)
    sizes = size_stats(records)
    count, seconds = await produce(broker.bootstrap, phase.topic("messages"), records)
    del records
    bench.results["dataset"] = {
        "source": source,
        "messages": count,
        "channels": args.channels,
        "partitions": args.partitions,
        "mean_bytes": sizes["mean"],
        "min_bytes": sizes["min"],
        "max_bytes": sizes["max"],
        "produce_msgs_per_s": count / seconds,
    }
    fold_results = bench.results.setdefault("fold", {})
    return BrokerRun(
        bench, broker, conversations, phase, settings, count, fold_results=fold_results
    )


async def run(args: argparse.Namespace, results: dict[str, Any], work: Path) -> None:
    """Every wanted phase: first those without a broker, then, on one broker, the others."""
    from bench.common import log, start_broker

    bench = BenchRun(args, results, work)
    for in_process in IN_PROCESS:
        if wanted(args, in_process):
            await run_phase(in_process, bench, bench)

    broker_phases = [phase for phase in ON_BROKER if wanted(args, phase)]
    if not broker_phases:
        return
    log("starting the broker")
    broker = start_broker(work)
    results["meta"]["bootstrap"] = "local (started by bench)" if broker.run_dir else "external"
    try:
        on_broker = await _produce_dataset(bench, broker)
        for phase in broker_phases:
            await run_phase(phase, on_broker, bench)
    finally:
        log("stopping the broker")
        broker.stop()
    results["ratios"] = fold_ratios(results)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ensure_requirements()
    sys.path.insert(0, str(REPO))
    # BENCH_WORKER_SRC: measure another checkout (its streams/ and projections/), in the
    # workers and in this process alike; bench/ itself always comes from this repository.
    source = os.environ.get("BENCH_WORKER_SRC")
    if source:
        sys.path.insert(0, str(Path(source).resolve()))
    os.chdir(REPO)
    from bench.common import log, work_dir
    from bench.report import write

    command = "python -m bench.run" + (
        " " + " ".join(argv if argv is not None else sys.argv[1:])
        if (argv if argv is not None else sys.argv[1:])
        else ""
    )
    now = datetime.now()
    results: dict[str, Any] = {"meta": run_meta(command, args.quick, source)}
    work = work_dir()
    started = time.time()
    # SIGTERM unwinds like Ctrl-C, so the phases' cleanup stops their workers and the broker
    # (a killed run once left a worker spinning at 100% CPU under the next run).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        asyncio.run(run(args, results, work))
    except KeyboardInterrupt:
        log("interrupted; writing what was measured")
    finally:
        results["meta"]["seconds"] = round(time.time() - started)
        results["meta"]["load_average_at_end"] = os.getloadavg()
        stem = (
            now.strftime("%Y-%m-%d")
            + (f"-{args.tag}" if args.tag else "")
            + ("-quick" if args.quick else "")
        )
        json_path, md_path, pngs = write(results, args.out, stem)
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(md_path.read_text("utf-8"))
    print(f"wrote {json_path}, {md_path}" + "".join(f", {p}" for p in pngs))
    return 1 if results.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
