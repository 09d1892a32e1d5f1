"""The budgeted context an agent reads before deciding whether to read a channel's history.

Given what the stages keep (the running summary, the open commitments, the latest recap,
the most recent messages) and a token budget, `assemble_context` renders the best text
that fits, never more: tokens are counted on the rendered text itself with the same
estimate the summarisers use. The parts come in priority order and a part is only shown
when every part before it was shown whole, so a tight budget keeps the summary and drops
the chatter, never the other way round. What was cut says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from projections.readable import OpenCommitment
from projections.summarise.llm import estimate_tokens

__all__ = [
    "TRUNCATED",
    "ChannelContext",
    "RecentMessage",
    "assemble_context",
]

TRUNCATED = " … [truncated]"
_SEPARATOR = "\n\n"
# A message cut shorter than this says too little to be worth its header.
_MIN_MESSAGE_CHARS = 40


@dataclass(frozen=True)
class RecentMessage:
    """One recent message, shown verbatim (the recap ring already cut long ones with "…")."""

    sender: str
    type: str
    content: str | None
    created_at: datetime

    def line(self, content: str | None = None) -> str:
        source = self.content if content is None else content
        text = " ".join((source or "").split()) or "-"
        return f"[{self.created_at:%Y-%m-%d %H:%M:%S}] {self.sender} ({self.type}): {text}"

    def as_json(self) -> dict[str, Any]:
        return {
            "sender": self.sender,
            "type": self.type,
            "content": self.content,
            "created_at": self.created_at.isoformat(),
        }


@dataclass
class ChannelContext:
    """The rendered `text` (within `max_tokens`) and the parts it shows, for JSON."""

    channel: str
    max_tokens: int
    text: str = ""
    summary: dict[str, Any] | None = None
    commitments: dict[str, Any] = field(default_factory=dict)
    recap: dict[str, Any] | None = None
    messages: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)

    def as_json(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "max_tokens": self.max_tokens,
            "tokens": self.tokens,
            "text": self.text,
            "parts": {
                "summary": self.summary,
                "commitments": self.commitments,
                "recap": self.recap,
                "messages": self.messages,
            },
        }


class _Page:
    """The sections placed so far and the budget they must stay within."""

    def __init__(self, max_tokens: int, estimate: Callable[[str], int]) -> None:
        self.max_tokens = max_tokens
        self.estimate = estimate
        self.sections: list[str] = []
        self.open = True  # False once a part was cut: nothing after it is shown

    def fits(self, section: str) -> bool:
        return self.estimate(_SEPARATOR.join([*self.sections, section])) <= self.max_tokens

    def place(self, section: str) -> None:
        self.sections.append(section)

    def text(self) -> str:
        return _SEPARATOR.join(self.sections)


def _longest(count: int, fits: Callable[[int], bool]) -> int:
    """The largest n in [0, count] with fits(n), for fits monotone (true up to some n)."""
    low, high = 0, count
    if not fits(0):
        return -1
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _cut(text: str, keep: int) -> str:
    """The first `keep` characters, backed off to a word boundary, then the mark."""
    head = text[:keep]
    if keep < len(text):
        boundary = head.rfind(" ")
        head = head[:boundary] if boundary > keep // 2 else head
    return head.rstrip() + TRUNCATED


def _text_part(page: _Page, header: str, text: str | None) -> dict[str, Any] | None:
    """A summary or recap: whole if it fits, else its longest prefix that fits, marked."""
    if text is None or not text.strip():
        return None
    if not page.open:
        return {"text": None, "truncated": True}
    whole = f"{header}\n{text.strip()}"
    if page.fits(whole):
        page.place(whole)
        return {"text": text.strip(), "truncated": False}
    page.open = False
    body = text.strip()
    keep = _longest(len(body), lambda n: page.fits(f"{header}\n{_cut(body, n)}"))
    if keep <= 0:
        return {"text": None, "truncated": True}
    shown = _cut(body, keep)
    page.place(f"{header}\n{shown}")
    return {"text": shown, "truncated": True}


def _commitments_part(page: _Page, owed: Sequence[OpenCommitment]) -> dict[str, Any]:
    def section(count: int) -> str:
        lines = [f"- {c.line()}" for c in owed[:count]]
        if count < len(owed):
            lines.append(f"- … and {len(owed) - count} more [truncated]")
        return "\n".join([f"Open commitments ({len(owed)}):", *lines])

    part: dict[str, Any] = {"total": len(owed), "shown": [], "omitted": len(owed)}
    if not owed or not page.open:
        return part
    shown = len(owed) if page.fits(section(len(owed))) else -1
    if shown < 0:
        page.open = False
        shown = _longest(len(owed) - 1, lambda n: page.fits(section(n)))
    if shown >= 0:
        page.place(section(shown))
        part.update(shown=[c.as_json() for c in owed[:shown]], omitted=len(owed) - shown)
    else:
        page.open = False
    return part


def _messages_part(page: _Page, messages: Sequence[RecentMessage]) -> dict[str, Any]:
    """The newest messages that fit, shown oldest first; if not even the newest fits
    whole, its head, marked."""

    def section(lines: Sequence[str]) -> str:
        return "\n".join([f"Recent messages ({len(lines)} of {total}, oldest first):", *lines])

    total = len(messages)
    part: dict[str, Any] = {"total": total, "shown": [], "omitted": total, "truncated": False}
    if not messages or not page.open:
        return part
    lines = [m.line() for m in messages]
    count = _longest(total, lambda n: n == 0 or page.fits(section(lines[total - n :])))
    if count > 0:
        page.place(section(lines[total - count :]))
        part.update(shown=[m.as_json() for m in messages[total - count :]], omitted=total - count)
        return part
    newest = messages[-1]
    body = " ".join((newest.content or "").split())
    keep = _longest(len(body), lambda n: page.fits(section([newest.line(_cut(body, n))])))
    if keep >= _MIN_MESSAGE_CHARS:
        page.place(section([newest.line(_cut(body, keep))]))
        shown = {**newest.as_json(), "content": _cut(body, keep)}
        part.update(shown=[shown], omitted=total - 1, truncated=True)
    return part


def assemble_context(
    channel: str,
    max_tokens: int,
    *,
    summary: str | None,
    commitments: Sequence[OpenCommitment],
    recap: str | None,
    messages: Sequence[RecentMessage],
    estimate: Callable[[str], int] = estimate_tokens,
) -> ChannelContext:
    """The channel's context within `max_tokens`: the summary, the open commitments (what
    was asked, who owes it, since when), the latest recap, then the most recent messages
    verbatim to fill what is left. A young channel with no summary yet gets its messages.

    `estimate` must grow with the text (longer text, no fewer tokens).
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    page = _Page(max_tokens, estimate)
    context = ChannelContext(channel=channel, max_tokens=max_tokens)
    context.summary = _text_part(page, "Summary:", summary)
    context.commitments = _commitments_part(page, commitments)
    context.recap = _text_part(page, "Latest recap:", recap)
    context.messages = _messages_part(page, messages)
    context.text = page.text()
    return context
