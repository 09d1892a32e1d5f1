"""Driver-event and table-write sizes on the bench's workload, in process (issue 22).

`python -m bench.event_sizes [--messages 20000] [--channels 200]`: the messages `bench.run`
streams (real conversations spread over channels, `bench.data.encoded_messages`) folded as
the worker folds them (`projections.channel.step`, states kept loaded), and per message:

* the v3 driver event as the worker sends it (`driver_event(...).fitted(limit)`);
* what a v2 event carried of the states: every projection's whole state;
* the table writes (`streams.fold_store.stored_fold`: the fold records and the new or
  changed commitments), each message its own batch (the worst case: batches write a channel once).

Prints p50 / p95 / max / mean of each, and the messages' own sizes. No broker needed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import orjson

from bench.common import percentile
from bench.data import encoded_messages, load_conversations, size_stats
from projections.channel import decide, step
from projections.model import decode_message
from projections.projection import Folded
from projections.termination import decision_to_json
from streams.fold_store import MemoryFoldStore
from streams.records import driver_event
from streams.registry import registered_projections
from streams.settings import Settings
from streams.worker.configs import ChannelConfigs


def measure(messages: int, channels: int) -> dict[str, Any]:
    settings = Settings()
    projections = registered_projections(settings.projections, settings)
    limit = settings.max_message_bytes
    _, conversations = load_conversations()
    records = encoded_messages(conversations, messages, channels)
    folds: dict[str, dict[str, Folded]] = {}
    loaded: dict[str, dict[str, Any]] = {}
    tables = MemoryFoldStore()  # the fold tables, split as the worker stores them
    offsets: dict[str, int] = {}
    events: list[int] = []
    whole_states: list[int] = []
    writes: list[int] = []
    for _, value in records:
        message = decode_message(value, settings.max_message_bytes)
        channel = message.channel
        offset = offsets[channel] = offsets.get(channel, -1) + 1
        stored = folds.setdefault(channel, {})
        steps = step(
            projections,
            dict(stored),
            message,
            offset,
            loaded.setdefault(channel, {}),
            max_state_bytes=settings.max_state_bytes,
        )
        decision = decision_to_json(decide(ChannelConfigs({}).conditions(channel), steps))
        events.append(len(driver_event(message, 0, offset, steps, decision).fitted(limit)))
        whole_states.append(sum(len(orjson.dumps(done.folded.state)) for done in steps))
        written = 0
        for done in steps:
            name = done.projection.name
            if done.applied:
                written += tables.write(done.projection, channel, done.folded, stored.get(name))
            stored[name] = done.folded
            loaded[channel][name] = done.state
        writes.append(written)
    return {
        "messages": messages,
        "channels": channels,
        "message_bytes": size_stats(records),
        "event_bytes": _stats(events),
        "v2_states_bytes": _stats(whole_states),
        "table_bytes": _stats(writes),
    }


def _stats(values: list[int]) -> dict[str, float]:
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values),
        "mean": statistics.fmean(values),
    }


def render(result: dict[str, Any]) -> str:
    rows = [
        ("message (its own size)", result["message_bytes"]),
        ("driver event v3", result["event_bytes"]),
        ("whole states (what a v2 event carried)", result["v2_states_bytes"]),
        ("table writes, one message per batch", result["table_bytes"]),
    ]
    lines = [
        f"{result['messages']:,} messages over {result['channels']} channels, bytes per message",
        "",
        "| what | p50 | p95 | max | mean |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, stats in rows:
        p95 = f"{stats['p95']:,.0f}" if "p95" in stats else "—"
        lines.append(
            f"| {name} | {stats['p50']:,.0f} | {p95} | {stats['max']:,.0f} | {stats['mean']:,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.event_sizes", description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--channels", type=int, default=200)
    args = parser.parse_args(argv)
    print(render(measure(args.messages, args.channels)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
