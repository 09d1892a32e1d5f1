"""`python -m bench.summary_quality`: what the default summary (no LLM) says, against people.

Each QMSum meeting (../shared/data/qmsum/<split>/*.json) is streamed as STATUS messages,
topic "general", one per turn, 5 s apart, through `streams.worker.stages.summaries.simulate`
(the live stage's batching and the default tiers, offline). Its final summary is scored against the
human answer to "Summarize the whole meeting." (the general query) with ROUGE-1/2/L F1
(`rouge-score`, stemming on), next to three baselines cut to the same budget (tokens x 4
characters):

- LEAD: the meeting's first turns;
- TextRank: turns of four words or more ranked at once, similarity = shared words over
  log|a| + log|b| (Mihalcea & Tarau 2004), highest first;
- LexRank: the same turns, TF-IDF cosine >= 0.1 as the graph (Erkan & Radev 2004).

`digest_bare` is the digest's text without its section headers and speaker tags: what the
structure costs (or earns) in ROUGE.

Baselines read the turns with the transcript markup ({disfmarker} ...) removed; the digest
gets the raw turns. Writes bench/results/<date>-summary-quality-<split>.json and .md.
Skips (exit 0) when ../shared/data/qmsum is absent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.meta import RESULTS
from streams.conversations import qmsum_meetings, shared_data_dir

METHODS = ("digest", "digest_bare", "lead", "textrank", "lexrank")
_HEADER_LINE = re.compile(
    r"^(?:Participants|Key terms|Discussed|Decided or done|Open):.*$\n?", re.MULTILINE
)
_SPEAKER_TAG = re.compile(r"^- \[[^\]]+\] ", re.MULTILINE)
_MARKUP = re.compile(r"\{[a-z_]+\}")
_WORD = re.compile(r"[a-z0-9']+")


def meetings(split: str, limit: int | None = None) -> list[tuple[str, list[tuple[str, str]], str]]:
    """(name, [(speaker, raw content)], human summary) for each meeting of the split."""
    root = shared_data_dir()
    found = [
        (m.name, [tuple(turn) for turn in m.turns], m.reference)
        for m in (qmsum_meetings(root, split, raw=True) if root else ())
        if m.reference and m.turns
    ]
    return found[:limit] if limit else found  # type: ignore[return-value]


def split_dir(split: str) -> Path | None:
    root = shared_data_dir()
    return root / "qmsum" / split if root and (root / "qmsum" / split).is_dir() else None


def as_messages(name: str, turns: list[tuple[str, str]]) -> list[Any]:
    from projections.model import Message

    start = datetime(2026, 1, 1, 9, tzinfo=UTC)
    channel = "meeting/" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return [
        Message.model_validate(
            {
                "id": f"{name}-{i}",
                "channel": channel,
                "sender": re.sub(r"[^A-Za-z0-9_.-]+", "-", speaker.lower()).strip("-") or "someone",
                "type": "STATUS",
                "topic": "general",
                "content": content,
                "created_at": start + timedelta(seconds=5 * i),
            }
        )
        for i, (speaker, content) in enumerate(turns)
    ]


def bare(digest: str) -> str:
    return _SPEAKER_TAG.sub("", _HEADER_LINE.sub("", digest)).strip()


def cleaned(turns: list[tuple[str, str]]) -> list[str]:
    return [t for t in (" ".join(_MARKUP.sub(" ", c).split()) for _, c in turns) if t]


def cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars].rsplit(" ", 1)[0]


def lead(texts: list[str], chars: int) -> str:
    return cut(" ".join(texts), chars)


def ranked(texts: list[str], order: list[int], chars: int) -> str:
    """The ranked texts, best first, until the budget is filled (the last one cut)."""
    out: list[str] = []
    used = 0
    for index in order:
        out.append(texts[index])
        used += len(texts[index]) + 1
        if used >= chars:
            break
    return cut(" ".join(out), chars)


def pagerank(weights: Any, damping: float = 0.85, iterations: int = 50) -> Any:
    import numpy as np

    n = weights.shape[0]
    sums = weights.sum(axis=1, keepdims=True)
    transition = np.divide(weights, sums, out=np.full_like(weights, 1.0 / n), where=sums > 0)
    rank = np.full(n, 1.0 / n)
    for _ in range(iterations):
        rank = (1 - damping) / n + damping * transition.T @ rank
    return rank


def graph_units(texts: list[str]) -> tuple[list[str], list[list[str]]]:
    units = [(t, _WORD.findall(t.lower())) for t in texts]
    kept = [(t, w) for t, w in units if len(w) >= 4]
    return [t for t, _ in kept], [w for _, w in kept]


def textrank(texts: list[str], chars: int) -> str:
    import numpy as np

    units, words = graph_units(texts)
    if not units:
        return lead(texts, chars)
    vocab = {w: i for i, w in enumerate(sorted({w for ws in words for w in ws}))}
    presence = np.zeros((len(units), len(vocab)))
    for row, ws in enumerate(words):
        presence[row, [vocab[w] for w in set(ws)]] = 1.0
    shared = presence @ presence.T
    logs = np.log(np.array([len(ws) for ws in words], dtype=float))
    weights = shared / (logs[:, None] + logs[None, :])
    np.fill_diagonal(weights, 0.0)
    order = list(np.argsort(-pagerank(weights), kind="stable"))
    return ranked(units, order, chars)


def lexrank(texts: list[str], chars: int, threshold: float = 0.1) -> str:
    import numpy as np

    units, words = graph_units(texts)
    if not units:
        return lead(texts, chars)
    vocab = {w: i for i, w in enumerate(sorted({w for ws in words for w in ws}))}
    tf = np.zeros((len(units), len(vocab)))
    for row, ws in enumerate(words):
        for w in ws:
            tf[row, vocab[w]] += 1.0
    df = (tf > 0).sum(axis=0)
    tfidf = tf * np.log(len(units) / df)
    norms = np.linalg.norm(tfidf, axis=1, keepdims=True)
    unit = np.divide(tfidf, norms, out=np.zeros_like(tfidf), where=norms > 0)
    graph = (unit @ unit.T >= threshold).astype(float)
    np.fill_diagonal(graph, 0.0)
    order = list(np.argsort(-pagerank(graph), kind="stable"))
    return ranked(units, order, chars)


async def streamed_summary(
    name: str, turns: list[tuple[str, str]], settings: Any, summariser: Any = None
) -> str:
    """The meeting's final summary through the live stage's batching: the default tiers
    without an LLM, or `summariser` (bench.llm_quality passes one with a model)."""
    from streams.worker.stages.summaries import simulate

    records = await simulate(as_messages(name, turns), settings, summariser)
    return next(iter(records.values())).text


def new_scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


def rouge(scorer: Any, answer: str, text: str) -> dict[str, float]:
    """ROUGE-1/2/L F1 x 100 of `text` against `answer`, and its length."""
    scores = scorer.score(answer, text)
    return {
        "r1": 100 * scores["rouge1"].fmeasure,
        "r2": 100 * scores["rouge2"].fmeasure,
        "rl": 100 * scores["rougeL"].fmeasure,
        "chars": len(text),
    }


async def evaluate(split: str, max_tokens: int, limit: int | None) -> dict[str, Any]:
    from streams.settings import Settings

    settings = Settings(summary_max_tokens=max_tokens)
    scorer = new_scorer()
    chars = max_tokens * 4
    baselines: dict[str, Callable[[list[str], int], str]] = {
        "lead": lead,
        "textrank": textrank,
        "lexrank": lexrank,
    }
    rows: list[dict[str, Any]] = []
    digest_seconds = 0.0
    for name, turns, answer in meetings(split, limit):
        started = time.perf_counter()
        digest = await streamed_summary(name, turns, settings)
        digest_seconds += time.perf_counter() - started
        # What the structure costs (or earns): the same sentences without headers and speakers.
        outputs = {"digest": digest, "digest_bare": bare(digest)}
        texts = cleaned(turns)
        for method, baseline in baselines.items():
            outputs[method] = baseline(texts, chars)
        row: dict[str, Any] = {"meeting": name, "turns": len(turns)}
        for method, text in outputs.items():
            row[method] = rouge(scorer, answer, text)
        rows.append(row)
    summary = {
        method: {
            metric: statistics.fmean(r[method][metric] for r in rows)
            for metric in ("r1", "r2", "rl", "chars")
        }
        for method in METHODS
    }
    summary["digest"]["max_chars"] = max(r["digest"]["chars"] for r in rows)
    bar = {m: max(summary["lead"][m], summary["textrank"][m]) for m in ("r1", "r2")}
    return {
        "split": split,
        "meetings": len(rows),
        "max_tokens": max_tokens,
        "budget_chars": chars,
        "after_messages": settings.summary_after_messages,
        "mean": summary,
        "bar": bar,
        "digest_meets_bar": all(summary["digest"][m] >= bar[m] for m in bar),
        "digest_ms_per_meeting": 1000 * digest_seconds / max(len(rows), 1),
        "rows": rows,
    }


def markdown(result: dict[str, Any], command: str) -> str:
    mean = result["mean"]
    lines = [
        f"## Summary quality: QMSum {result['split']} ({result['meetings']} meetings)",
        "",
        f"`{command}`; budget {result['max_tokens']} tokens ({result['budget_chars']} chars), "
        f"batches of {result['after_messages']}. ROUGE F1 x 100 against the human summary.",
        "",
        "| method | ROUGE-1 | ROUGE-2 | ROUGE-L | mean chars |",
        "|---|---:|---:|---:|---:|",
    ]
    for method in METHODS:
        m = mean[method]
        lines.append(
            f"| {method} | {m['r1']:.2f} | {m['r2']:.2f} | {m['rl']:.2f} | {m['chars']:.0f} |"
        )
    bar = result["bar"]
    lines += [
        "",
        f"Bar (better of LEAD and TextRank): R1 {bar['r1']:.2f}, R2 {bar['r2']:.2f}; digest "
        f"{'meets' if result['digest_meets_bar'] else 'does NOT meet'} it. Longest digest "
        f"{mean['digest']['max_chars']:.0f} chars; {result['digest_ms_per_meeting']:.0f} ms "
        "a meeting.",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.summary_quality", description=__doc__)
    parser.add_argument("--split", default="val", choices=["train", "val"])
    parser.add_argument("--max-tokens", type=int, default=500, help="CHORUS_SUMMARY_MAX_TOKENS")
    parser.add_argument("--limit", type=int, help="only the first N meetings")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def measure(split: str = "val", max_tokens: int = 500, limit: int | None = None) -> Any:
    """For bench.run: the result, or None when the data is absent."""
    if split_dir(split) is None:
        return None
    return asyncio.run(evaluate(split, max_tokens, limit))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if split_dir(args.split) is None:
        print(f"skipped: ../shared/data/qmsum/{args.split} is absent", file=sys.stderr)
        return 0
    result = asyncio.run(evaluate(args.split, args.max_tokens, args.limit))
    command = "python -m bench.summary_quality " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    text = markdown(result, command.strip())
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"{datetime.now():%Y-%m-%d}-summary-quality-{args.split}"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1), "utf-8")
    (args.out / f"{stem}.md").write_text(text, "utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
