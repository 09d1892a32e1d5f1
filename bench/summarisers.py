"""Summarisers in process, on real conversations: speed of the non-LLM tiers, and what the
tiered default saves against calling the LLM for every batch.

Batching follows the live stage (streams/summaries.py with projections/summarise/pending.py):
`pending.replay`, the same rules `chorus summary simulate` runs: a channel's batch is due at
`after_messages` pending messages or when its oldest pending message has waited
`after_seconds`; at the end of the conversation what is pending falls due (the timer fires).
Conversations with real timestamps (IRC minutes, chitchat seconds) give the time threshold
real pauses to find; QMSum turns have none and are spaced 5 s apart.

The LLM is a fake ChatClient that counts tokens by the 4-chars rule (`estimate_tokens`) and
answers like tests/fakes/llm_server.py, so no network and no model is involved.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.data import load_conversations
from projections.model import Message
from projections.summarise import (
    Completion,
    HeuristicMessageSummariser,
    LlmContentSummariser,
    SummaryResult,
    VerbatimContentSummariser,
    default_summariser,
    estimate_tokens,
    render_message,
)
from projections.summarise.digest import DigestSummariser
from projections.summarise.pending import replay
from streams.conversations import Conversation, shared_data_dir

_IRC_LINE = re.compile(r"^\[(\d\d):(\d\d)\] <([^>]+)> (.+)$")
_NEW_ITEMS = re.compile(r"New items \((\d+)\):")


class CountingClient:
    """A ChatClient that answers at once and counts calls and tokens (4 chars a token)."""

    model = "fake-counting"

    def __init__(self) -> None:
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        lines = [line.strip() for line in user.splitlines() if line.strip()]
        match = _NEW_ITEMS.search(user)
        count = int(match.group(1)) if match else len(lines)
        gist = "; ".join(" ".join(line.split()[:8]) for line in lines[-count:][:12])
        text = f"Summary of {count} items: {gist}"[: max_tokens * 4]
        prompt, completion = estimate_tokens(system) + estimate_tokens(user), estimate_tokens(text)
        self.calls += 1
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        return Completion(text, self.model, prompt, completion, 0)


def timed_conversations() -> list[tuple[str, list[Message]]]:
    """(corpus, messages of one channel) with real or assigned timestamps."""
    out: list[tuple[str, list[Message]]] = []
    start = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    root = shared_data_dir()
    if root is not None:  # the IRC logs with their clock times, which the loader drops
        for path in sorted((root / "ubuntu-irc").glob("*/*.ascii.txt"))[:40]:
            messages: list[Message] = []
            day, last = 0, -1
            for line in path.read_text("utf-8", errors="replace").splitlines():
                match = _IRC_LINE.match(line)
                if not match:
                    continue
                minute = int(match.group(1)) * 60 + int(match.group(2))
                if minute < last:
                    day += 1
                last = minute
                at = start + timedelta(days=day, minutes=minute)
                messages.append(
                    _message(f"irc/{len(out)}", match.group(3), match.group(4), at, len(messages))
                )
            if messages:
                out.append(("ubuntu-irc", messages))
        _, conversations = load_conversations()
        for conversation in [c for c in conversations if c.name.startswith("qmsum")][:20]:
            out.append(("qmsum", _spaced(conversation, start, len(out))))
    else:
        _, conversations = load_conversations()
        for conversation in conversations[:400]:
            out.append(("chitchat", _spaced(conversation, start, len(out))))
    return out


def _spaced(conversation: Conversation, start: datetime, index: int) -> list[Message]:
    return [
        _message(f"meeting/{index}", speaker, text, start + timedelta(seconds=5 * i), i)
        for i, (speaker, text) in enumerate(conversation.turns)
    ]


def _message(channel: str, sender: str, text: str, at: datetime, index: int) -> Message:
    sender = re.sub(r"[^A-Za-z0-9_.-]+", "-", sender).strip("-") or "someone"
    return Message.model_validate(
        {
            "id": f"s{index}",
            "channel": channel.replace("/", "-"),
            "sender": sender,
            "type": "STATUS",
            "content": text,
            "created_at": at,
        }
    )


def live_batches(
    messages: list[Message], after_messages: int, after_seconds: float
) -> Iterator[list[Message]]:
    """The batches the live stage would hand to the summariser, in order."""
    for _, batch in replay(
        enumerate(messages),
        after_messages=after_messages,
        after_seconds=after_seconds,
        max_pending=10_000,
    ):
        yield batch


async def tier_speed(messages: list[Message], batch_size: int, seconds: float) -> dict[str, Any]:
    """Items/s of the non-LLM tiers, folding batches into a running summary."""
    out: dict[str, Any] = {}
    tiers: dict[str, Any] = {
        "verbatim": VerbatimContentSummariser(render_message),
        "heuristic": HeuristicMessageSummariser(),
        "digest": DigestSummariser(),
    }
    for name, summariser in tiers.items():
        items = 0
        previous: SummaryResult | None = None
        started = time.perf_counter()
        position = 0
        while time.perf_counter() - started < seconds:
            chunk = messages[position : position + batch_size]
            position = (position + batch_size) % max(1, len(messages) - batch_size)
            previous = await summariser.summarise(chunk, previous)
            if name == "verbatim" and len(previous.text) > 20_000:
                previous = None  # verbatim grows without bound; keep the cost per item honest
            items += len(chunk)
        elapsed = time.perf_counter() - started
        out[name] = {"items_per_s": items / elapsed, "batch_size": batch_size}
    return out


async def llm_cost(
    conversations: list[tuple[str, list[Message]]],
    after_messages: int,
    after_seconds: float,
    small: int,
    medium: int,
) -> dict[str, Any]:
    """LLM calls and tokens per 1,000 messages: the tiered default against always-LLM."""
    out: dict[str, Any] = {}
    for corpus in sorted({c for c, _ in conversations}):
        chosen = [m for c, m in conversations if c == corpus]
        total = sum(len(m) for m in chosen)
        sizes: list[int] = []
        row: dict[str, Any] = {"messages": total, "channels": len(chosen)}
        for strategy in ("tiered", "always_llm"):
            client = CountingClient()
            summariser: Any
            if strategy == "tiered":
                summariser = default_summariser(client, small, medium)
            else:
                summariser = LlmContentSummariser(client, render_message)
            for messages in chosen:
                previous = None
                for batch in live_batches(messages, after_messages, after_seconds):
                    if strategy == "tiered":
                        sizes.append(len(batch))
                    previous = await summariser.summarise(batch, previous)
            per_k = 1000 / total
            row[strategy] = {
                "llm_calls_per_1k": client.calls * per_k,
                "prompt_tokens_per_1k": client.prompt_tokens * per_k,
                "completion_tokens_per_1k": client.completion_tokens * per_k,
                "tokens_per_1k": (client.prompt_tokens + client.completion_tokens) * per_k,
            }
        row["batches"] = len(sizes)
        row["batch_sizes"] = {
            f"verbatim(<={small})": sum(1 for s in sizes if s <= small),
            f"digest(<={medium})": sum(1 for s in sizes if small < s <= medium),
            f"llm(>{medium})": sum(1 for s in sizes if s > medium),
        }
        tiered, always = row["tiered"]["tokens_per_1k"], row["always_llm"]["tokens_per_1k"]
        row["tokens_saved"] = 1 - tiered / always if always else None
        out[corpus] = row
    return out


async def measure(
    seconds: float,
    after_messages: int = 20,
    after_seconds: float = 300.0,
    small: int = 3,
    medium: int = 15,
) -> dict[str, Any]:
    conversations = timed_conversations()
    pool = [m for _, messages in conversations for m in messages][:20_000]
    speed = {
        "small_batches": await tier_speed(pool, small, seconds),
        "medium_batches": await tier_speed(pool, medium, seconds),
    }
    cost = await llm_cost(conversations, after_messages, after_seconds, small, medium)
    return {
        "speed": speed,
        "llm_cost": cost,
        "settings": {
            "after_messages": after_messages,
            "after_seconds": after_seconds,
            "small_threshold": small,
            "medium_threshold": medium,
        },
    }


if __name__ == "__main__":
    import asyncio
    import json

    print(json.dumps(asyncio.run(measure(2.0)), indent=1, default=str))
