"""`python -m bench.llm_quality`: the running summary with a real model, next to the digest.

Opt-in (needs `pip install -r requirements-llm.txt`, as `make test-llm` does; not in the
default `make bench`). Starts the local model server (bench/llm_server.py: llama-cpp-python,
Gemma 3 270M Q4_K_M, chat format gemma), then streams the first N QMSum meetings of the
split (sorted by name; `--shortest`: the N with the fewest turns) through
`bench.summary_quality.streamed_summary`, the live stage's batching and default tiers, twice:

- `llm`: with the model configured (`CHORUS_LLM_CONTEXT_TOKENS` = the server's context), so
  every batch above the medium threshold (batches of 20 > 15) goes to the EDIT tier, and
  an answer the tier rejects falls back to the digest;
- `digest`: the default wiring without a model, on the same meetings.

It reports, per meeting and overall: ROUGE-1/2/L F1 of each final summary against the
human summary, the LLM calls, how many answers were accepted and how many fell back (with
the reasons counted), latency per call (mean, p50, max; measured by the client) and prompt
and completion tokens per call (the server's `usage`), and the summary length.

Every summary the stage would publish (after each batch, not only the last) is checked:
one that carries the prompt's own markers (`Current summary:`, `New items (`, the item
delimiters), is over the budget, or is an answer the tier rejected means a degenerate
answer became the summary; the run then exits 1. Results go to
bench/results/<date>-llm-quality.json and .md, rewritten after every meeting (`complete`
says whether all were done). Skips (exit 0) when ../shared/data/qmsum is absent; exits 2
when the model's requirements are missing. An LLM call takes 20-60 s on 2 shared cores (the
model mostly writes until max_tokens): the first 5 val meetings by name (~4,250 turns, ~210
calls) take 1-3 hours, the 5 shortest (`--shortest`, 756 turns, 36 calls) 15-40 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.meta import RESULTS
from bench.summary_quality import (
    meetings,
    new_scorer,
    rouge,
    split_dir,
    streamed_summary,
)
from projections.model import Message
from projections.summarise import (
    FALLBACK_REASON,
    ChatClient,
    Completion,
    ContentSummariser,
    LlmContentSummariser,
    LlmError,
    SummaryResult,
    estimate_tokens,
)
from projections.summarise.synthesised import PROMPT_MARKERS

METHODS = ("llm", "digest")
SAMPLE_CHARS = 300
_REJECTED_PREFIX = "the model's summary was rejected: "
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True)
class Call:
    """One LLM call as the summariser saw it: the completion, or why there was none."""

    latency_ms: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    answer: str | None = None
    error: str | None = None


class RecordingClient:
    """The `ChatClient` the summariser gets: passes each call on and keeps what came back."""

    def __init__(self, inner: ChatClient) -> None:
        self.inner = inner
        self.calls: list[Call] = []

    @property
    def model(self) -> str:
        return self.inner.model

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        started = time.monotonic()
        try:
            completion = await self.inner.complete(system, user, max_tokens)
        except LlmError as error:
            self.calls.append(Call(int((time.monotonic() - started) * 1000), error=str(error)))
            raise
        self.calls.append(
            Call(
                completion.latency_ms,
                completion.prompt_tokens,
                completion.completion_tokens,
                answer=completion.text,
            )
        )
        return completion


@dataclass(frozen=True)
class BatchOutcome:
    """One batch: its size, the LLM calls it made and the summary the stage would publish."""

    items: int
    calls: list[Call]
    result: SummaryResult

    @property
    def accepted(self) -> bool:
        """The model's answer is the summary (the large tier did not fall back)."""
        return bool(self.calls) and self.result.annotations.get("tier") == LlmContentSummariser.tier

    @property
    def fallback_reason(self) -> str | None:
        if not self.calls or self.accepted:
            return None
        return self.result.annotations.get(FALLBACK_REASON, "unknown")


@dataclass
class RecordingSummariser:
    """Wraps the stage's summariser: keeps every batch's summary and the calls it made."""

    inner: ContentSummariser[Message]
    client: RecordingClient
    batches: list[BatchOutcome] = field(default_factory=list)

    async def summarise(
        self, items: list[Message], previous: SummaryResult | None = None
    ) -> SummaryResult:
        before = len(self.client.calls)
        result = await self.inner.summarise(items, previous)
        self.batches.append(BatchOutcome(len(items), self.client.calls[before:], result))
        return result


Meeting = tuple[str, list[tuple[str, str]], str]


def selected(split: str, count: int, shortest: bool = False) -> list[Meeting]:
    """The first `count` meetings of the split by name, or with `shortest` the `count` with
    the fewest turns (then by name): the fewest LLM calls."""
    if not shortest:
        return meetings(split, count)
    return sorted(meetings(split), key=lambda m: (len(m[1]), m[0]))[:count]


def reason_kind(reason: str) -> str:
    """A fallback reason without its numbers, so like reasons count together."""
    return _NUMBER.sub("N", reason.removeprefix(_REJECTED_PREFIX))


def degenerate(batches: list[BatchOutcome], budget_tokens: int) -> list[str]:
    """Why each published summary that must not be one is wrong (empty: none is)."""
    problems: list[str] = []
    for index, batch in enumerate(batches):
        text = batch.result.text
        size = estimate_tokens(text)
        if size > budget_tokens:
            problems.append(f"batch {index}: over budget ({size} > {budget_tokens} tokens)")
        lowered = text.lower()
        problems += [
            f"batch {index}: carries the prompt marker {marker!r}"
            for marker in PROMPT_MARKERS
            if marker.lower() in lowered
        ]
        if batch.fallback_reason and any(
            call.answer is not None and call.answer.strip() == text.strip() for call in batch.calls
        ):
            problems.append(f"batch {index}: is the answer the tier rejected")
    return problems


def spread(values: list[int]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "max": 0.0}
    return {
        "mean": statistics.fmean(values),
        "p50": float(statistics.median(values)),
        "max": float(max(values)),
    }


def call_stats(calls: list[Call]) -> dict[str, Any]:
    answered = [c for c in calls if c.error is None]
    return {
        "calls": len(calls),
        "failed_calls": len(calls) - len(answered),
        "latency_ms": spread([c.latency_ms for c in answered]),
        "prompt_tokens": spread([c.prompt_tokens for c in answered]),
        "completion_tokens": spread([c.completion_tokens for c in answered]),
    }


def batch_stats(batches: list[BatchOutcome]) -> dict[str, Any]:
    asked = [b for b in batches if b.calls]
    reasons = Counter(reason_kind(b.fallback_reason) for b in asked if b.fallback_reason)
    return {
        "batches": len(batches),
        "llm_batches": len(asked),
        "accepted": sum(b.accepted for b in asked),
        "fallbacks": sum(reasons.values()),
        "fallback_reasons": dict(reasons.most_common()),
    }


async def evaluate(
    client: ChatClient,
    context_tokens: int,
    chosen: list[Meeting],
    max_tokens: int,
    on_row: Callable[[dict[str, Any]], None],
) -> list[dict[str, Any]]:
    from streams.settings import Settings
    from streams.worker.stages.summaries import summariser_from_settings

    settings = Settings(summary_max_tokens=max_tokens, llm_context_tokens=context_tokens)
    scorer = new_scorer()
    rows: list[dict[str, Any]] = []
    for name, turns, answer in chosen:
        recording = RecordingClient(client)
        summariser = RecordingSummariser(summariser_from_settings(settings, recording), recording)
        started = time.perf_counter()
        text = await streamed_summary(name, turns, settings, summariser)
        seconds = time.perf_counter() - started
        digest = await streamed_summary(name, turns, settings)
        final = summariser.batches[-1].result
        row: dict[str, Any] = {
            "meeting": name,
            "turns": len(turns),
            "seconds": seconds,
            "llm": rouge(scorer, answer, text),
            "digest": rouge(scorer, answer, digest),
            "final_tier": final.annotations.get("tier", "unknown"),
            **batch_stats(summariser.batches),
            **call_stats(recording.calls),
            "call_log": [
                [c.latency_ms, c.prompt_tokens, c.completion_tokens]
                for c in recording.calls
                if c.error is None
            ],
            "failed": [c.error for c in recording.calls if c.error is not None],
            "rejected_sample": next(
                (
                    c.answer[:SAMPLE_CHARS]
                    for b in summariser.batches
                    if b.fallback_reason
                    for c in b.calls
                    if c.answer
                ),
                None,
            ),
            "degenerate": degenerate(summariser.batches, max_tokens),
        }
        rows.append(row)
        on_row(row)
    return rows


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    mean = {
        method: {
            m: statistics.fmean(r[method][m] for r in rows) for m in ("r1", "r2", "rl", "chars")
        }
        for method in METHODS
    }
    calls = [Call(*logged) for r in rows for logged in r["call_log"]]
    reasons: Counter[str] = Counter()
    for r in rows:
        reasons.update(r["fallback_reasons"])
    stats = call_stats(calls)
    stats["failed_calls"] = sum(r["failed_calls"] for r in rows)
    stats["calls"] = len(calls) + stats["failed_calls"]
    return {
        "mean": mean,
        **stats,
        "llm_batches": sum(r["llm_batches"] for r in rows),
        "accepted": sum(r["accepted"] for r in rows),
        "fallbacks": sum(r["fallbacks"] for r in rows),
        "fallback_reasons": dict(reasons.most_common()),
        "degenerate": [f"{r['meeting']} {p}" for r in rows for p in r["degenerate"]],
        "seconds": sum(r["seconds"] for r in rows),
    }


def markdown(result: dict[str, Any]) -> str:
    total = result["total"]
    state = "" if result["complete"] else " (PARTIAL: the run did not finish)"
    lines = [
        f"## Summary quality with a real model: QMSum {result['split']}, "
        f"{len(result['rows'])} of {len(result['meetings'])} meetings "
        f"({result['selection']}){state}",
        "",
        f"`{result['meta']['command']}` ({result['meta']['date']}, {result['meta']['machine']}); "
        f"model {result['model']} (llama-cpp-python server, n_ctx {result['context_tokens']}, "
        f"chat format gemma); budget {result['max_tokens']} tokens; batches of "
        f"{result['after_messages']}, EDIT tier above {result['medium_threshold']} messages. "
        "ROUGE F1 x 100 against the human summary; `llm` is the pipeline with the model, "
        "`digest` the same meetings without one.",
        "",
        "| meeting | turns | llm R1 | llm R2 | digest R1 | digest R2 | llm chars | LLM calls "
        "| accepted | fell back | latency mean / p50 / max (s) | prompt / completion tokens "
        "(mean) | final tier |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        lines.append(_row(r["meeting"], r["turns"], r, r["final_tier"]))
    if result["rows"]:
        lines.append(
            _row(
                "**mean / all**",
                round(statistics.fmean(r["turns"] for r in result["rows"])),
                {**total, "llm": total["mean"]["llm"], "digest": total["mean"]["digest"]},
                "",
            )
        )
    reasons = ", ".join(f"{k}: {v}" for k, v in total.get("fallback_reasons", {}).items())
    problems = total.get("degenerate", [])
    lines += [
        "",
        f"Fallback reasons: {reasons or 'none'}. Failed calls: {total.get('failed_calls', 0)}. "
        f"LLM wall time {total.get('seconds', 0) / 60:.1f} min.",
        "",
        "Degenerate answers that became a summary: "
        + ("none (checked after every batch)" if not problems else "; ".join(problems)),
        "",
    ]
    return "\n".join(lines)


def _row(name: str, turns: int, r: dict[str, Any], tier: str) -> str:
    lat, pt, ct = r["latency_ms"], r["prompt_tokens"], r["completion_tokens"]
    return (
        f"| {name} | {turns} | {r['llm']['r1']:.2f} | {r['llm']['r2']:.2f} | "
        f"{r['digest']['r1']:.2f} | {r['digest']['r2']:.2f} | {r['llm']['chars']:.0f} | "
        f"{r['calls']} | {r['accepted']} | {r['fallbacks']} | "
        f"{lat['mean'] / 1000:.1f} / {lat['p50'] / 1000:.1f} / {lat['max'] / 1000:.1f} | "
        f"{pt['mean']:.0f} / {ct['mean']:.0f} | {tier} |"
    )


def write(result: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{datetime.now():%Y-%m-%d}-llm-quality"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1), "utf-8")
    md = stem.with_suffix(".md")
    md.write_text(markdown(result), "utf-8")
    return md


def measure(
    split: str = "val",
    count: int = 5,
    shortest: bool = False,
    max_tokens: int = 500,
    threads: int | None = None,
    out: Path = RESULTS,
    command: str = "python -m bench.llm_quality",
) -> dict[str, Any] | None:
    """Runs the phase, writing the result files after every meeting; None when the data is
    absent. Raises `bench.llm_server.LlmServerError` when the model cannot be started."""
    from bench.llm_server import chat_client, local_server
    from bench.meta import run_meta
    from streams.settings import Settings

    if split_dir(split) is None:
        return None
    defaults = Settings()
    chosen = selected(split, count, shortest)
    result: dict[str, Any] = {
        "meta": run_meta(command, quick=False),
        "split": split,
        "meetings": [name for name, _, _ in chosen],
        "selection": "fewest turns" if shortest else "first by name",
        "max_tokens": max_tokens,
        "after_messages": defaults.summary_after_messages,
        "medium_threshold": defaults.summary_medium_threshold,
        "llm_max_tokens": defaults.llm_max_tokens,
        "threads": threads,
        "complete": False,
        "rows": [],
        "total": {},
    }

    def on_row(row: dict[str, Any]) -> None:
        result["rows"].append(row)
        result["total"] = aggregate(result["rows"])
        print(f"[llm-quality] {_row(row['meeting'], row['turns'], row, row['final_tier'])}")
        write(result, out)

    async def run() -> None:
        with (
            tempfile.TemporaryDirectory(prefix="chorus-llm-") as logs,
            local_server(Path(logs), threads) as server,
        ):
            result["model"] = server.model
            result["context_tokens"] = server.n_ctx
            client = chat_client(server)
            try:
                await evaluate(client, server.n_ctx, chosen, max_tokens, on_row)
            finally:
                await client.aclose()

    asyncio.run(run())
    result["complete"] = True
    write(result, out)
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.llm_quality",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--split", default="val", choices=["train", "val"])
    parser.add_argument("--meetings", type=int, default=5, help="the first N (sorted by name)")
    parser.add_argument(
        "--shortest", action="store_true", help="the N meetings with the fewest turns instead"
    )
    parser.add_argument("--max-tokens", type=int, default=500, help="CHORUS_SUMMARY_MAX_TOKENS")
    parser.add_argument("--threads", type=int, help="the server's --n_threads (default: half)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from bench.llm_server import LlmServerError
    from bench.meta import ensure_requirements

    args = parse_args(argv)
    ensure_requirements()  # rouge-score
    given = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python -m bench.llm_quality", *given])
    try:
        result = measure(
            args.split,
            args.meetings,
            args.shortest,
            args.max_tokens,
            args.threads,
            args.out,
            command,
        )
    except LlmServerError as error:
        print(f"llm-quality: {error}", file=sys.stderr)
        return 2
    if result is None:
        print(f"skipped: ../shared/data/qmsum/{args.split} is absent", file=sys.stderr)
        return 0
    print(markdown(result))
    problems = result["total"]["degenerate"]
    if problems:
        print(f"FAILED: a degenerate answer became the summary: {problems}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
