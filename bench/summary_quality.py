"""Summary quality: what the default summary (no LLM) says, against people.

Each QMSum meeting (../shared/data/qmsum/<split>/*.json) becomes a channel of STATUS
messages, one per turn, 5 s apart, summarised offline by `chorus summary simulate` (the
summary stage's batching and default tiers). Its final summary is scored against the human
answer to "Summarize the whole meeting." with ROUGE-1/2/L F1 (`rouge-score`, stemming on),
next to two baselines cut to the same budget (tokens x 4 characters): LEAD (the first
turns) and TextRank (turns of four words or more; similarity = shared words over
log|a| + log|b|, Mihalcea & Tarau 2004). `digest_bare` is the summary without its section
headers and speaker tags: what the structure costs or earns in ROUGE. Baselines read the
turns with the transcript markup ({disfmarker}...) removed; the summary gets them raw.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from bench.systems import chorus
from projections.model import Message
from streams.conversations import qmsum_meetings, shared_data_dir

METHODS = ("digest", "digest_bare", "lead", "textrank")
MAX_TOKENS = 500
_HEADER_LINE = re.compile(
    r"^(?:Participants|Key terms|Discussed|Decided or done|Open):.*$\n?", re.MULTILINE
)
_SPEAKER_TAG = re.compile(r"^- \[[^\]]+\] ", re.MULTILINE)
_MARKUP = re.compile(r"\{[a-z_]+\}")
_WORD = re.compile(r"[a-z0-9']+")

Meeting = tuple[str, list[tuple[str, str]], str]


def meetings(split: str, limit: int | None = None) -> list[Meeting]:
    """(name, [(speaker, raw content)], human summary) for each meeting of the split."""
    root = shared_data_dir()
    found = [
        (m.name, [(turn[0], turn[1]) for turn in m.turns], m.reference)
        for m in (qmsum_meetings(root, split, raw=True) if root else ())
        if m.reference and m.turns
    ]
    return found[:limit] if limit else found


def channel_of(name: str) -> str:
    return "meeting/" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def as_messages(name: str, turns: list[tuple[str, str]]) -> list[Message]:
    start = datetime(2026, 1, 1, 9, tzinfo=UTC)
    return [
        Message.model_validate(
            {
                "id": f"{name}-{i}",
                "channel": channel_of(name),
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


def textrank(texts: list[str], chars: int, damping: float = 0.85) -> str:
    """The turns ranked by PageRank over shared words, best first, to the budget."""
    import numpy as np

    kept = [(t, w) for t in texts if len(w := _WORD.findall(t.lower())) >= 4]
    if not kept:
        return lead(texts, chars)
    vocab = {w: i for i, w in enumerate(sorted({w for _, ws in kept for w in ws}))}
    presence = np.zeros((len(kept), len(vocab)))
    for row, (_, ws) in enumerate(kept):
        presence[row, [vocab[w] for w in set(ws)]] = 1.0
    logs = np.log(np.array([len(ws) for _, ws in kept], dtype=float))
    weights = (presence @ presence.T) / (logs[:, None] + logs[None, :])
    np.fill_diagonal(weights, 0.0)
    n = len(kept)
    sums = weights.sum(axis=1, keepdims=True)
    transition = np.divide(weights, sums, out=np.full_like(weights, 1.0 / n), where=sums > 0)
    rank = np.full(n, 1.0 / n)
    for _ in range(50):
        rank = (1 - damping) / n + damping * transition.T @ rank
    out: list[str] = []
    for index in np.argsort(-rank, kind="stable"):
        out.append(kept[index][0])
        if sum(len(t) + 1 for t in out) >= chars:
            break
    return cut(" ".join(out), chars)


def simulated_summaries(found: list[Meeting]) -> dict[str, str]:
    """channel -> its final summary, from `chorus summary simulate` over every meeting."""
    lines = b"\n".join(
        message.model_dump_json().encode()
        for name, turns, _ in found
        for message in as_messages(name, turns)
    )
    env = {**os.environ, "CHORUS_SUMMARY_MAX_TOKENS": str(MAX_TOKENS)}
    answer = chorus(["summary", "simulate", "--file", "-", "--json"], env, lines)
    records = [orjson.loads(line) for line in answer.splitlines() if line.strip()]
    return {record["channel"]: record["text"] for record in records}


def measure(split: str = "val") -> dict[str, Any] | None:
    """Mean ROUGE F1 x 100 of each method over the split; None when the data is absent."""
    from rouge_score import rouge_scorer

    found = meetings(split)
    if not found:
        return None
    started = time.perf_counter()
    summaries = simulated_summaries(found)
    seconds = time.perf_counter() - started
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    chars = MAX_TOKENS * 4
    scores: dict[str, list[dict[str, float]]] = {method: [] for method in METHODS}
    for name, turns, answer in found:
        digest = summaries[channel_of(name)]
        texts = cleaned(turns)
        outputs = {
            "digest": digest,
            "digest_bare": bare(digest),
            "lead": lead(texts, chars),
            "textrank": textrank(texts, chars),
        }
        for method, text in outputs.items():
            found_scores = scorer.score(answer, text)
            scores[method].append(
                {
                    "r1": 100 * found_scores["rouge1"].fmeasure,
                    "r2": 100 * found_scores["rouge2"].fmeasure,
                    "rl": 100 * found_scores["rougeL"].fmeasure,
                    "chars": len(text),
                }
            )
    return {
        "split": split,
        "meetings": len(found),
        "max_tokens": MAX_TOKENS,
        "simulate_seconds": seconds,
        "mean": {
            method: {key: statistics.fmean(row[key] for row in rows) for key in rows[0]}
            for method, rows in scores.items()
        },
    }
