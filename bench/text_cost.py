"""`python -m bench.text_cost`: the context stages' text work per message, in process.

No broker: the bench's messages (`bench.data`: real conversations merged into 0.5-2 KB
messages, spread at random over `--channels` channels) go through the same code the
stages run, timed in CPU seconds (best of `--repeat`):

- **digest**: each channel's messages are batched as the summaries stage batches them
  (`pending.replay`, `summary_after_messages`) and each batch is summarised by the default
  wiring without an LLM (the digest tier). `per message` is the digest's reading of one
  message (`DigestSummariser._read`: cut into sentences, words counted); `summarised` is
  everything a batch costs (reading, ranking, cleaning what may be shown, selecting,
  rendering), over its messages; `a batch` is the same per summary.
- **recap**: the recap stage's fold of one message (`recaps.with_message`), and the title
  and keyphrases when a recap or a view asks for them (`recap.title`: the latest summary
  and the window of `RECAP_WINDOW` messages), per call.

Prints a table; `--json PATH` writes the figures too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.data import encoded_messages, load_conversations
from projections.model import Message, decode_message
from projections.summarise.digest import DigestSummariser
from projections.summarise.pending import PendingBatch, replay, spoken
from projections.summarise.state import narrative_of
from streams.settings import Settings
from streams.worker.stages.recaps import RECAP_WINDOW, ChannelRecap, with_message
from streams.worker.stages.summaries import summarise_batch, summariser_from_settings

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def bench_messages(count: int, channels: int) -> dict[str, list[Message]]:
    """`count` bench messages by channel, in log order."""
    _, conversations = load_conversations()
    by_channel: dict[str, list[Message]] = {}
    for _, value in encoded_messages(conversations, count, channels):
        message = decode_message(value)
        by_channel.setdefault(message.channel, []).append(message)
    return by_channel


def best_of(repeat: int, run: Callable[[], float]) -> float:
    """The least CPU time of `repeat` runs: the machine is shared, and the least is the
    one the least disturbed."""
    return min(run() for _ in range(repeat))


def batches(
    by_channel: dict[str, list[Message]], settings: Settings
) -> dict[str, list[tuple[PendingBatch, list[Message]]]]:
    """Each channel's batches as the summaries stage would summarise them."""
    return {
        channel: list(
            replay(
                enumerate(messages),
                after_messages=settings.summary_after_messages,
                after_seconds=settings.summary_after_seconds,
                max_pending=settings.summary_max_pending,
            )
        )
        for channel, messages in by_channel.items()
    }


def digest_costs(
    by_channel: dict[str, list[Message]], repeat: int
) -> tuple[dict[str, float], dict[str, str]]:
    """The digest's figures, and each channel's last summary narrative (for the titles)."""
    settings = Settings()
    summariser = summariser_from_settings(settings, None)
    planned = batches(by_channel, settings)
    messages = sum(len(batch) for runs in planned.values() for _, batch in runs)
    summaries = sum(len(runs) for runs in planned.values())
    last: dict[str, str] = {}

    def summarise_all() -> float:
        async def run() -> float:
            spent = 0.0
            for channel, runs in planned.items():
                previous = None
                for batch, batch_messages in runs:
                    started = time.process_time()
                    previous = await summarise_batch(
                        summariser, channel, batch, batch_messages, previous
                    )
                    spent += time.process_time() - started
                last[channel] = narrative_of(previous.text, previous.narrative) if previous else ""
            return spent

        return asyncio.run(run())

    digest = DigestSummariser(settings.summary_max_tokens)
    contents = [
        content
        for runs in planned.values()
        for _, batch in runs
        for message in batch
        for _, content in spoken(message)
    ]

    def read_all() -> float:
        counts: Counter[str] = Counter()
        started = time.process_time()
        for content in contents:
            digest._read(content, 0, "someone", counts)
        return time.process_time() - started

    summarised = best_of(repeat, summarise_all)
    out = {
        "messages": messages,
        "summaries": summaries,
        "summarised_us_per_message": 1e6 * summarised / messages,
        "batch_ms": 1e3 * summarised / summaries,
    }
    if hasattr(digest, "_read"):  # not in the digest before it read messages this way
        out["per_message_us"] = 1e6 * best_of(repeat, read_all) / len(contents)
    return out, last


def recap_costs(
    by_channel: dict[str, list[Message]], summaries: dict[str, str], repeat: int
) -> dict[str, float]:
    messages = sum(len(m) for m in by_channel.values())
    recaps: dict[str, ChannelRecap] = {}

    def fold_all() -> float:
        started = time.process_time()
        for channel, channel_messages in by_channel.items():
            recap = ChannelRecap()
            for offset, message in enumerate(channel_messages):
                recap = with_message(recap, message, offset, 30.0, NOW)
            recaps[channel] = recap
        return time.process_time() - started

    out = {"with_message_us": 1e6 * best_of(repeat, fold_all) / messages}
    try:
        from projections.recap.title import channel_keyphrases, channel_title
    except ImportError:  # before titles were read when asked for
        return out
    windows = {channel: recap.messages() for channel, recap in recaps.items()}

    def titles() -> float:
        started = time.process_time()
        for channel, recap in recaps.items():
            channel_title(windows[channel], recap.opening, summaries.get(channel))
        return time.process_time() - started

    def keyphrases() -> float:
        started = time.process_time()
        for channel in recaps:
            channel_keyphrases(windows[channel], summaries.get(channel))
        return time.process_time() - started

    out["title_when_due_us"] = 1e6 * best_of(repeat, titles) / len(recaps)
    out["keyphrases_when_due_us"] = 1e6 * best_of(repeat, keyphrases) / len(recaps)
    out["window"] = RECAP_WINDOW
    return out


def measure(count: int = 2000, channels: int = 20, repeat: int = 3) -> dict[str, Any]:
    by_channel = bench_messages(count, channels)
    digest, summaries = digest_costs(by_channel, repeat)
    return {
        "messages": count,
        "channels": channels,
        "mean_chars": sum(len(m.content or "") for ms in by_channel.values() for m in ms)
        / max(count, 1),
        "digest": digest,
        "recap": recap_costs(by_channel, summaries, repeat),
    }


def markdown(result: dict[str, Any]) -> str:
    digest, recap = result["digest"], result["recap"]
    rows = [
        f"{result['messages']} bench messages over {result['channels']} channels, "
        f"{result['mean_chars']:.0f} characters on average; CPU time, best of the runs.",
        "",
        "| text work | cost |",
        "|---|---:|",
    ]
    if "per_message_us" in digest:
        rows.append(f"| digest, per message (read) | {digest['per_message_us']:.0f} µs/msg |")
    rows += [
        f"| digest, summarised ({digest['summaries']} batches) | "
        f"{digest['summarised_us_per_message']:.0f} µs/msg |",
        f"| digest, a batch | {digest['batch_ms']:.2f} ms |",
        f"| recap fold (`with_message`) | {recap['with_message_us']:.1f} µs/msg |",
    ]
    if "title_when_due_us" in recap:
        rows += [
            f"| title when due (summary + {recap['window']} messages) | "
            f"{recap['title_when_due_us']:.0f} µs |",
            f"| keyphrases when due | {recap['keyphrases_when_due_us']:.0f} µs |",
        ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.text_cost", description=__doc__)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--channels", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    result = measure(args.messages, args.channels, args.repeat)
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
