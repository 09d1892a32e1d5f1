"""Profile the worker's hot path with py-spy: `python -m bench.profile [--fold-only]`.

Starts a broker (or uses CHORUS_BOOTSTRAP_SERVERS), fills a messages topic with N real
messages, starts `chorus worker` (or the fold stage alone), waits for it to fold, then
attaches py-spy for `--seconds` and writes, under bench/results/:
  <date>-profile[-fold-only].txt   collapsed stacks (flamegraph.pl / speedscope input);
  <date>-profile[-fold-only].md    where the samples go: by stage and by function.
With `--gil`, only samples holding the GIL count (CPU work, not waiting). BENCH_WORKER_SRC
runs the worker from another checkout, to profile a proposed change.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from bench.common import Phase, Worker, log, produce, start_broker, wait_for_count, work_dir
from bench.data import encoded_messages, load_conversations
from bench.meta import RESULTS
from streams.ops.topics import create_topics


def summarise(collapsed: Path, top: int = 35) -> str:
    total = 0
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    stage: collections.Counter[str] = collections.Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
        mine = [
            f for f in frames if "(streams/" in f and "cli.py" not in f and "worker.py" not in f
        ]
        if mine:
            stage[mine[0]] += n
        else:
            runs = [
                i
                for i, f in enumerate(frames)
                if f.startswith(("Handle._run", "Thread._bootstrap_inner"))
            ]
            i = runs[-1] + 1 if runs else len(frames) - 1
            stage[frames[min(i, len(frames) - 1)]] += n
    lines = [f"{total:,} samples", "", "| by entry point (stage) | share |", "|---|---|"]
    lines += [f"| `{f}` | {100 * n / total:.1f}% |" for f, n in stage.most_common(15)]
    lines += ["", "| function (inclusive, chorus code) | share |", "|---|---|"]
    lines += [
        f"| `{f}` | {100 * n / total:.1f}% |"
        for f, n in inclusive.most_common(400)
        if "(streams/" in f or "(projections/" in f
    ][:top]
    lines += ["", "| function (self) | share |", "|---|---|"]
    lines += [f"| `{f}` | {100 * n / total:.1f}% |" for f, n in own.most_common(top)]
    lines += by_role(collapsed, top)
    return "\n".join(lines)


ROLE = re.compile(r"worker --role (\w+)")


def by_role(collapsed: Path, top: int = 25) -> list[str]:
    """Per role process (`chorus worker --role ...`, as py-spy --subprocesses names them):
    its share of all samples, then the functions (inclusive, chorus, Faust, aiokafka) as
    shares of that role's samples. Empty for a profile of one process."""
    samples: collections.Counter[str] = collections.Counter()
    inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        found = ROLE.search(stack.split(";", 2)[1] if stack.count(";") > 1 else "")
        if found is None:
            continue
        role, n = found.group(1), int(count)
        samples[role] += n
        frames = {re.sub(r":\d+\)$", ")", f) for f in stack.split(";")[2:]}
        for frame in frames:
            inclusive[role][frame] += n
    if not samples:
        return []
    lines = ["", "| role | share of the samples |", "|---|---|"]
    lines += [f"| {role} | {100 * n / total:.1f}% |" for role, n in samples.most_common()]
    for role, n in samples.most_common():
        lines += ["", f"| {role} role: function (inclusive) | share of the role |", "|---|---|"]
        lines += [
            f"| `{f}` | {100 * c / n:.1f}% |"
            for f, c in inclusive[role].most_common(600)
            if any(p in f for p in ("(streams/", "(projections/", "faust/", "aiokafka/"))
            and "streams/interfaces/cli" not in f
            and not f.startswith("run_worker")
        ][:top]
    return lines


async def run(args: argparse.Namespace) -> Path:
    work = work_dir()
    broker = start_broker(work)
    try:
        phase = Phase("prof", broker, work)
        await create_topics(phase.settings())
        _, conversations = load_conversations()
        records = encoded_messages(conversations, args.messages, args.channels)
        await produce(broker.bootstrap, phase.topic("messages"), records)
        module = ("bench.fold_worker",) if args.fold_only else ("streams.interfaces.cli", "worker")
        topic = phase.topic("driver-events") + ("-fold-only" if args.fold_only else "")
        if args.fold_only:
            from bench.common import create_topic

            await create_topic(broker.bootstrap, topic, phase.partitions, {})
        worker = Worker(phase.env(), work / "worker.log", loglevel="info", module=module)
        worker.start(wait=False)
        try:
            await wait_for_count(
                broker.bootstrap, topic, args.warmup * 2, 600, alive=worker.check_alive
            )
            stem = (
                datetime.now().strftime("%Y-%m-%d")
                + "-profile"
                + ("-fold-only" if args.fold_only else "")
                + (f"-{args.tag}" if args.tag else "")
            )
            out = RESULTS / f"{stem}.txt"
            spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            command = [
                spy,
                "record",
                "--pid",
                str(worker.pid),
                # `chorus worker` supervises its two roles as child processes: follow them
                # (each sample's stack starts with its process).
                "--subprocesses",
                "-d",
                str(args.seconds),
                "-r",
                "100",
                "-f",
                "raw",
                "-o",
                str(out),
            ]
            if args.gil:
                command.append("--gil")
            log(" ".join(command))
            subprocess.run(command, check=True, capture_output=True)
        finally:
            worker.stop()
        md = out.with_suffix(".md")
        md.write_text(
            f"# py-spy profile: {'fold stage' if args.fold_only else 'chorus worker'}"
            f"\n\n{args.messages:,} messages over {args.channels} channels; "
            f"{args.seconds}s at 100 Hz{' (GIL holders only)' if args.gil else ''}."
            f"\n\n{summarise(out)}\n"
        )
        return md
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--channels", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=500, help="messages folded first")
    parser.add_argument("--fold-only", action="store_true")
    parser.add_argument("--gil", action="store_true")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    md = asyncio.run(run(args))
    print(md.read_text())


if __name__ == "__main__":
    main()
