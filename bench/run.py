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
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
REQUIREMENTS = REPO / "bench" / "requirements.txt"

PHASES = (
    "limits",
    "fold",
    "floor",
    "quix",
    "latency",
    "replay",
    "recovery",
    "summarisers",
    "memory",
    "quality",
    "growth",
    "cold",
    "llm",
)
# Phases that need no broker.
IN_PROCESS = ("summarisers", "quality", "llm")
# Phases that run only when named in --only: "cold" takes longer than the whole default run,
# "llm" needs requirements-llm.txt and takes an hour.
OPT_IN = ("cold", "llm")


def ensure_requirements() -> None:
    """matplotlib, psutil, rouge-score (bench-only): pip-installed into this interpreter if
    absent."""
    missing = []
    for module in ("matplotlib", "psutil", "rouge_score"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if not missing:
        return
    print(f"bench needs {', '.join(missing)}: pip install -r {REQUIREMENTS}", file=sys.stderr)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True
    )


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


def wanted(args: argparse.Namespace, phase: str) -> bool:
    if args.only:
        return phase in args.only and phase not in args.skip
    return phase not in OPT_IN and phase not in args.skip


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


async def run(args: argparse.Namespace, results: dict[str, Any], work: Path) -> None:
    from bench import (
        fold,
        growth,
        latency,
        limits,
        memory,
        recovery,
        replay_phase,
        summarisers,
    )
    from bench.common import Phase, log, produce, start_broker
    from bench.data import encoded_messages, load_conversations, size_stats
    from streams.ops.topics import create_topics

    errors: dict[str, str] = results.setdefault("errors", {})

    def failed(phase: str, error: BaseException) -> None:
        errors[phase] = f"{type(error).__name__}: {error}"
        log(f"{phase} failed: {error}")
        traceback.print_exc()

    if wanted(args, "summarisers"):
        log("7. summarisers in process")
        try:
            results["summarisers"] = await summarisers.measure(args.summariser_seconds)
        except Exception as error:
            failed("summarisers", error)

    if wanted(args, "quality"):
        log("9. summary quality (QMSum val)")
        try:
            from bench import summary_quality

            quality = await asyncio.to_thread(summary_quality.measure, "val")
            if quality is None:
                log("  skipped: ../shared/data/qmsum is absent")
            else:
                results["summary_quality"] = {k: v for k, v in quality.items() if k != "rows"}
        except Exception as error:
            failed("quality", error)

    if wanted(args, "llm"):
        log("11. summary quality with a real model (opt-in; about 20 s an LLM call)")
        try:
            from bench import llm_quality

            with_model = await asyncio.to_thread(
                llm_quality.measure,
                "val",
                args.llm_meetings,
                out=args.out,
                command=results["meta"]["command"],
            )
            if with_model is None:
                log("  skipped: ../shared/data/qmsum is absent")
            else:
                results["llm_quality"] = with_model["total"]
                if with_model["total"]["degenerate"]:
                    raise AssertionError(
                        "a degenerate answer became the summary: "
                        + "; ".join(with_model["total"]["degenerate"])
                    )
        except Exception as error:
            failed("llm", error)

    needs_broker = any(wanted(args, p) for p in PHASES if p not in IN_PROCESS)
    if not needs_broker:
        return
    log("starting the broker")
    broker = start_broker(work)
    results["meta"]["bootstrap"] = "local (started by bench)" if broker.run_dir else "external"
    try:
        source, conversations = load_conversations()
        events_per_message = 1  # driver events v2: one per message, every state in it
        phase = Phase("tput", broker, work, partitions=args.partitions)
        settings = phase.settings()
        await create_topics(settings)
        log(f"producing {args.messages:,} messages over {args.channels:,} channels")
        records = encoded_messages(conversations, args.messages, args.channels)
        sizes = size_stats(records)
        count, seconds = await produce(broker.bootstrap, phase.topic("messages"), records)
        del records
        results["dataset"] = {
            "source": source,
            "messages": count,
            "channels": args.channels,
            "partitions": args.partitions,
            "mean_bytes": sizes["mean"],
            "min_bytes": sizes["min"],
            "max_bytes": sizes["max"],
            "produce_msgs_per_s": count / seconds,
        }

        if wanted(args, "limits"):
            log("1. the limit")
            try:
                results["limits"] = await limits.measure_limits(
                    broker.lib, broker.bootstrap, phase.topic("messages"), count, args.repeats
                )
            except Exception as error:
                failed("limits", error)

        worker = None
        fold_results: dict[str, Any] = results.setdefault("fold", {})
        if wanted(args, "fold"):
            log("2. chorus worker fold")
            try:
                fold_results["chorus_worker"], worker = await fold.run_chorus(
                    phase, count, events_per_message, args.timeout
                )
                log(f"  chorus worker: {fold_results['chorus_worker']['msgs_per_s']:,.0f} msg/s")
            except Exception as error:
                failed("fold", error)
            log("2. chorus fold stage alone")
            try:
                fold_results["chorus_fold_stage"], _ = await fold.run_chorus(
                    phase, count, events_per_message, args.timeout, fold_only=True
                )
                log(f"  fold stage: {fold_results['chorus_fold_stage']['msgs_per_s']:,.0f} msg/s")
            except Exception as error:
                failed("fold_stage", error)

        if wanted(args, "floor"):
            # What Faust alone costs per message, configured like chorus (bench/faust_floor.py).
            floor_results = results.setdefault("faust_floor", {})
            for mode in ("read", "send", "table"):
                log(f"2. Faust floor: {mode}")
                try:
                    floor_results[mode] = await fold.run_floor(phase, count, mode, args.timeout)
                    log(f"  faust {mode}: {floor_results[mode]['msgs_per_s']:,.0f} msg/s")
                except Exception as error:
                    failed(f"floor-{mode}", error)

        if wanted(args, "quix"):
            log("3. Quix Streams peer")
            try:
                fold_results["quix"] = await fold.run_quix(
                    phase, count, events_per_message, args.timeout
                )
                log(f"  quix: {fold_results['quix']['msgs_per_s']:,.0f} msg/s")
            except Exception as error:
                fold_results["quix_error"] = str(error)
                failed("quix", error)

        if wanted(args, "replay"):
            log("5. replay vs raw read")
            try:
                replay_settings = settings.model_copy(
                    update={"bootstrap_servers": broker.bootstrap}
                )
                results["replay"] = await replay_phase.measure(replay_settings, count)
                log(f"  replay: {results['replay']}")
            except Exception as error:
                failed("replay", error)

        if wanted(args, "recovery") and worker is not None:
            log("6. recovery")
            try:
                data_dir = Path(phase.env()["CHORUS_DATA_DIR"])
                log_dirs = [broker.run_dir] if broker.run_dir else []
                results["recovery"] = await recovery.measure(
                    phase, data_dir, count, args.timeout, log_dirs
                )
            except Exception as error:
                failed("recovery", error)

        if wanted(args, "cold"):
            log(f"6. cold restore at scale: {args.cold_messages} messages")
            try:
                results["cold_restore"] = await recovery.measure_cold_at_scale(
                    broker,
                    work,
                    args.cold_messages,
                    args.cold_channels,
                    args.timeout,
                    args.partitions,
                    args.cold_build,
                )
            except Exception as error:
                failed("cold", error)

        if wanted(args, "latency"):
            fold_rate = (fold_results.get("chorus_worker") or {}).get("msgs_per_s")
            rates = [args.rate]
            if fold_rate and fold_rate < args.rate:
                # Also at a rate the worker sustains, so the percentiles mean something.
                rates.append(max(10.0, round(fold_rate * 0.5, -1)))
            runs = results.setdefault("latency", [])
            for rate in rates:
                for llm_delay in (None, 2.0):
                    log(f"4. latency at {rate:,.0f} msg/s, LLM delay {llm_delay}")
                    try:
                        lat_phase = Phase("lat", broker, work, partitions=args.partitions)
                        duration = args.latency_seconds
                        runs.append(
                            await latency.measure(
                                lat_phase,
                                conversations,
                                rate,
                                duration,
                                min(args.channels, 100),
                                args.drain,
                                events_per_message,
                                llm_delay,
                            )
                        )
                    except Exception as error:
                        failed(f"latency-{rate:.0f}-{llm_delay}", error)

        if wanted(args, "memory"):
            log(f"8. memory over {args.memory_channels:,} channels")
            try:
                mem_phase = Phase("mem", broker, work, partitions=args.partitions)
                results["memory"] = await memory.measure(
                    mem_phase,
                    conversations,
                    args.memory_channels,
                    events_per_message,
                    round_timeout=90.0 if args.quick else 180.0,
                )
            except Exception as error:
                failed("memory", error)
        if wanted(args, "growth"):
            log("9. bounded state: one growing channel")
            try:
                results["growth"] = await growth.measure(
                    broker,
                    work,
                    growth.QUICK_LENGTHS if args.quick else growth.LENGTHS,
                    growth.QUICK_LENGTHS if args.quick else growth.LENGTHS,
                    timeout=120.0 if args.quick else 900.0,
                )
            except Exception as error:
                failed("growth", error)
    finally:
        log("stopping the broker")
        broker.stop()

    limits_r = results.get("limits", {})
    raw = (limits_r.get("aiokafka") or {}).get("msgs_per_s")
    cp = (limits_r.get("consumer_performance") or {}).get("msgs_per_s")
    fold_r = results.get("fold", {})
    chorus_rate = (fold_r.get("chorus_worker") or {}).get("msgs_per_s")
    stage_rate = (fold_r.get("chorus_fold_stage") or {}).get("msgs_per_s")
    quix_rate = (fold_r.get("quix") or {}).get("msgs_per_s")
    results["ratios"] = {
        "chorus_worker_vs_aiokafka": ratio(chorus_rate, raw),
        "chorus_worker_vs_consumer_performance": ratio(chorus_rate, cp),
        "chorus_worker_vs_quix": ratio(chorus_rate, quix_rate),
        "fold_stage_vs_aiokafka": ratio(stage_rate, raw),
        "fold_stage_vs_quix": ratio(stage_rate, quix_rate),
        "quix_vs_aiokafka": ratio(quix_rate, raw),
    }


def _commit(source: str | None = None) -> str | None:
    if source:  # a snapshot: bench/ab-style copies carry the commit they were taken from
        marker = Path(source) / ".bench-commit"
        return marker.read_text().strip() if marker.exists() else "snapshot"
    try:
        proc = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    return proc.stdout.strip() or None


def run_meta(command: str, quick: bool, source: str | None = None) -> dict[str, Any]:
    """What every result file says about its run: when, how, on what, which code."""
    return {
        "date": datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": command,
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "load_average_at_start": os.getloadavg(),
        "kafka_version": os.environ.get("CHORUS_KAFKA_VERSION", "4.1.1"),
        "quick": quick,
        "code": source or str(REPO),
        "commit": _commit(source),
    }


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
