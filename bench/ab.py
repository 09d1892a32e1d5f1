"""A/B a proposed change: the same messages through workers run from different checkouts.

    python -m bench.ab --messages 10000 --channels 200 /path/to/base /path/to/changed [...]

Each source is a directory holding `streams/` and `projections/` (a copy of the repository
with the change applied); its worker runs with that directory first on PYTHONPATH. Runs
alternate A, B, A, B... (`--rounds`) over one pre-filled messages topic, each with its own
consumer group and data dir, so both see the same data and the same broker; the machine's
noise shows as the spread between rounds. `--fold-only` runs bench.fold_worker instead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

from bench.common import Phase, log, produce, start_broker, work_dir
from bench.data import encoded_messages, load_conversations
from bench.fold import run_chorus
from bench.pipeline import read_channel_ends
from streams.ops.topics import create_topics


async def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    work = work_dir()
    broker = start_broker(work)
    results: dict[str, list[dict[str, Any]]] = {src: [] for src in args.sources}
    try:
        _, conversations = load_conversations()
        records = encoded_messages(conversations, args.messages, args.channels)
        for round_ in range(args.rounds):
            for src in args.sources:
                os.environ["BENCH_WORKER_SRC"] = src
                # Topics of its own, filled with the very same records.
                phase = Phase("ab", broker, work, partitions=args.partitions)
                await create_topics(phase.settings())
                await produce(broker.bootstrap, phase.topic("messages"), records)
                # The whole worker is measured to its last summary too (bench/pipeline.py).
                ends = (
                    None
                    if args.fold_only
                    else await read_channel_ends(broker.bootstrap, phase.topic("messages"))
                )
                # Driver events v2 on: one per message, every state in it.
                result, _ = await run_chorus(
                    phase,
                    args.messages,
                    1,
                    args.timeout,
                    fold_only=args.fold_only,
                    pipeline_ends=ends,
                )
                results[src].append(result)
                pipeline = result.get("pipeline") or {}
                log(
                    f"round {round_} {src}: {result['msgs_per_s']:,.0f} msg/s, "
                    f"{result['cpu_ms_per_msg'] or 0:.2f} ms CPU/msg "
                    f"(broker {result.get('broker_cpu_ms_per_msg') or 0:.2f}), "
                    + (
                        f"pipeline {pipeline.get('msgs_per_s') or 0:,.0f} msg/s, "
                        if pipeline
                        else ""
                    )
                    + f"RSS {result['rss_mb']:.0f} MB"
                )
    finally:
        os.environ.pop("BENCH_WORKER_SRC", None)
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ab")
    parser.add_argument("sources", nargs="+", type=Path)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--channels", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fold-only", action="store_true")
    parser.add_argument("--timeout", type=float, default=1200)
    args = parser.parse_args()
    args.sources = [str(Path(s).resolve()) for s in args.sources]
    results = asyncio.run(run(args))
    print(
        f"\n{args.messages:,} messages over {args.channels:,} channels, "
        f"{'fold stage' if args.fold_only else 'whole worker'}:"
    )
    for src, runs in results.items():
        rates = [r["msgs_per_s"] for r in runs]
        pipeline = [r["pipeline"]["msgs_per_s"] or 0.0 for r in runs if r.get("pipeline")]
        print(
            f"  {src}: msg/s {', '.join(f'{x:,.0f}' for x in rates)} "
            f"(median {statistics.median(rates):,.0f}); CPU ms/msg "
            f"{_median(r['cpu_ms_per_msg'] for r in runs):.2f}, the broker's besides "
            f"{_median(r.get('broker_cpu_ms_per_msg') for r in runs):.2f}"
            + (
                f"; pipeline to its last summary msg/s {', '.join(f'{x:,.0f}' for x in pipeline)}"
                f" (median {statistics.median(pipeline):,.0f})"
                if pipeline
                else ""
            )
        )


def _median(values: Any) -> float:
    present = [value for value in values if value]
    return statistics.median(present) if present else float("nan")


if __name__ == "__main__":
    main()
