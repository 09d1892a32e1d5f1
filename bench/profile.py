"""Profile a running worker with py-spy:
`python -m bench.profile [--fold-only] [--shape turns|channels]`.

Starts a local broker, fills a messages topic with N real messages (`--shape turns`: real
turns spread over `--channels` channels, as the throughput phase sends them; `--shape
channels`: the channels phase's, each channel a COMMAND and its reply), starts `chorus
worker` (or the fold stage alone), lets it fold `--warmup` of them, then records py-spy
(following the role processes) for `--seconds` and writes under bench/results/:
  <date>-profile[-fold-only][-channels].txt  collapsed stacks (speedscope, flamegraph.pl);
  <date>-profile[-fold-only][-channels].md   each process's share of the samples, then per
                                             process the functions (inclusive) of chorus,
                                             Faust and aiokafka.
`--gil` counts only samples that hold the GIL (CPU work, not waiting).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

from bench.channels import channel_records, short_turns
from bench.data import encoded_messages, load_conversations
from bench.kafka import produce
from bench.meta import RESULTS
from bench.systems import Broker, chorus_worker, fold_stage, log
from bench.throughput import poll_until
from streams.testing import local_broker

_PROCESS = re.compile(r'^process \d+:"(.*)"$')
_LINE = re.compile(r":\d+\)$")
_OURS = ("(streams/", "(projections/", "faust/", "aiokafka/", "(bench/")
# Frames every sample of a process passes through: its entry point, not where time goes.
_ENTRY = ("(streams/interfaces/cli/", "run_worker (", "main (bench/")


def process_name(frame: str) -> str | None:
    """A role (`--role fold`), or the command of a process frame; None for a code frame."""
    found = _PROCESS.match(frame)
    if found is None:
        return None
    role = re.search(r"--role (\w+)", found.group(1))
    return role.group(1) if role else found.group(1).split(" -m ")[-1].split()[0]


def summarise(collapsed: str, top: int = 25) -> str:
    """Each process's share of the samples, then its top functions (inclusive)."""
    samples: Counter[str] = Counter()
    inclusive: dict[str, Counter[str]] = defaultdict(Counter)
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        names = [name for name in map(process_name, frames) if name is not None]
        process = names[-1] if names else "worker"
        samples[process] += int(count)
        ours = {_LINE.sub(")", f) for f in frames if any(p in f for p in _OURS)}
        for frame in {f for f in ours if not any(e in f for e in _ENTRY)}:
            inclusive[process][frame] += int(count)
    total = sum(samples.values()) or 1
    lines = [f"{total:,} samples", "", "| process | share |", "|---|---|"]
    lines += [f"| {name} | {100 * n / total:.1f}% |" for name, n in samples.most_common()]
    for name, n in samples.most_common():
        lines += ["", f"| {name}: function (inclusive) | share of the process |", "|---|---|"]
        found = inclusive[name].most_common(top)
        lines += [f"| `{frame}` | {100 * c / n:.1f}% |" for frame, c in found]
    return "\n".join(lines) + "\n"


async def profile(args: argparse.Namespace, work: Path, out: Path) -> None:
    with local_broker(work / "kafka") as bootstrap:
        broker = Broker(bootstrap, work / "kafka")
        make = fold_stage if args.fold_only else chorus_worker
        system = make(broker, work, "prof")
        _, conversations = load_conversations()
        if args.shape == "channels":
            contents = short_turns(conversations)
            records = channel_records(args.messages // 2, "prof", contents)
        else:
            records = encoded_messages(conversations, args.messages, args.channels)
        await produce(broker.settings, system.topic("messages"), records)
        system.process.spawn()
        try:
            await poll_until(system, broker, lambda count: count >= args.warmup, 600.0)
            spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            command = [spy, "record", "--pid", str(system.process.pid), "--subprocesses"]
            command += ["-d", str(args.seconds), "-r", "100", "-f", "raw", "-o", str(out)]
            log(" ".join(command + (["--gil"] if args.gil else [])))
            subprocess.run(command + (["--gil"] if args.gil else []), check=True)
        finally:
            system.process.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--channels", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=500, help="messages folded first")
    parser.add_argument("--fold-only", action="store_true")
    parser.add_argument(
        "--shape",
        choices=("turns", "channels"),
        default="turns",
        help="channels: a COMMAND and its reply per channel (--channels is then ignored)",
    )
    parser.add_argument("--gil", action="store_true")
    args = parser.parse_args()
    stem = f"{datetime.now():%Y-%m-%d}-profile" + ("-fold-only" if args.fold_only else "")
    stem += "-channels" if args.shape == "channels" else ""
    out = RESULTS / f"{stem}.txt"
    work = Path(tempfile.mkdtemp(prefix="chorus-profile-"))
    try:
        asyncio.run(profile(args, work, out))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    what = "the fold stage alone" if args.fold_only else "chorus worker"
    spread = (
        f"{args.messages // 2:,} channels, each a COMMAND and its reply"
        if args.shape == "channels"
        else f"{args.channels} channels"
    )
    text = (
        f"# py-spy profile of {what}\n\n{args.messages:,} messages over {spread}; "
        f"{args.seconds} s at 100 Hz{' (GIL holders only)' if args.gil else ''}.\n\n"
        + summarise(out.read_text())
    )
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
