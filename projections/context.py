"""The budgeted context an agent reads before deciding whether to read a channel's history.

Given the channel's state as the fold holds it (the decision, the commitments, where the
fold is), what the stages keep (the narrative summary, the latest recap, the recent
messages) and a token budget, `assemble_context` renders the best text that fits, never
more: tokens are counted on the rendered text itself with the same estimate the
summarisers use.

The parts come in the order a late agent needs them (context v2):

1. a header: the channel, the decision and its detail, the message count, the partition
   offset and time the state is current at;
2. the open commitments now, the newest first (a tight budget keeps the newest), with
   "… and N more" when cut; with `for_agent`, that agent's own first, and the messages
   addressed to it;
3. what ended that a late joiner must know (declined, failed, expired, delegated), the
   most recent first, bounded;
4. the messages after the summary's last offset, the newest that fit;
5. the narrative summary (what was said), marked with the offsets it covers;
6. the recap, when it is newer than the summary and current (nothing folded since);
7. the fulfilled commitments, the most recent first, bounded;
8. the recent messages the summary covers, the newest that fit: a larger budget shows
   more when there is more.

One owner per fact: every line that names a commitment takes its status from the
commitments state given here (the fold's), so no part can say a commitment is open when
the fold says it ended. The summary and the recap carry no commitment status of their own
here: the summary part is its narrative only, and a recap is shown only while nothing was
folded after it. A part is shown only when every part before it was shown whole, except
that the header and the open commitments always take what fits; what was cut says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from projections.model import Message, MessageType
from projections.readable import CommitmentView, is_agent
from projections.summarise.llm import estimate_tokens
from projections.text.ids import person
from projections.text.lines import ELLIPSIS, closing, counted

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "ENDED_SHOWN",
    "MAX_CONTEXT_TOKENS",
    "PARTITION_OFFSET",
    "TRUNCATED",
    "ChannelContext",
    "ChannelHeader",
    "RecapPart",
    "RecentMessage",
    "SummaryPart",
    "assemble_context",
    "budget_refusal",
    "decision_phrase",
    "narrative_lines",
]

TRUNCATED_MARK = "[truncated]"
TRUNCATED = f" {ELLIPSIS} {TRUNCATED_MARK}"
# How every view names an offset of the log: a position on the channel's partition, which
# other channels share, never a count of the channel's messages.
PARTITION_OFFSET = "partition offset"
# The budget a context is asked for when none is given, and the most a caller may ask for:
# far above anything the stages keep (summary, recent messages, commitments), a bound on
# the work.
DEFAULT_CONTEXT_TOKENS = 1000
MAX_CONTEXT_TOKENS = 100_000
_SEPARATOR = "\n\n"
# A message cut shorter than this says too little to be worth its header.
_MIN_MESSAGE_CHARS = 40
# Ended commitments shown at most (most recent first): what a late joiner must know, not
# the channel's history.
ENDED_SHOWN = 10


def decision_phrase(decision: dict[str, Any] | None) -> str:
    """A decision's JSON (`decision`, `detail`) as a line says it: "ESCALATE (1 commitment
    expired (threshold: 0))", "CONTINUE"."""
    found = decision or {}
    name = found.get("decision") or "CONTINUE"
    detail = found.get("detail")
    return f"{name} ({detail})" if isinstance(detail, str) and detail else str(name)


@dataclass(frozen=True)
class ChannelHeader:
    """Where the channel stands as the fold holds it: `decision` is the termination
    decision's JSON (`decision`, `detail`, `offset`), `offset` the last message folded and
    `at` its time."""

    channel: str
    decision: dict[str, Any]
    offset: int | None
    at: datetime | None
    message_count: int

    def line(self) -> str:
        """ "Channel team/plan: CONTINUE. 42 messages; state as of partition offset 41,
        2026-12-01 10:02:00 UTC." (the offset is the last message's on the channel's
        partition of the log, which other channels share: not a count)."""
        said = decision_phrase(self.decision)
        when = f", {self.at:%Y-%m-%d %H:%M:%S} UTC" if self.at else ""
        where = (
            "nothing folded yet"
            if self.offset is None
            else f"state as of {PARTITION_OFFSET} {self.offset}{when}"
        )
        return f"Channel {self.channel}: {said}. {counted(self.message_count, 'message')}; {where}."

    def as_json(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "decision": self.decision,
            "offset": self.offset,
            "at": self.at.isoformat() if self.at else None,
            "message_count": self.message_count,
        }


@dataclass(frozen=True)
class RecentMessage:
    """One recent message, shown verbatim (the recap ring already cut long ones with "…").
    A message that opened or answered a commitment says its status now (`status`)."""

    sender: str
    type: str
    content: str | None
    created_at: datetime
    offset: int | None = None
    target: str | None = None
    correlation_id: str | None = None
    id: str | None = None

    @classmethod
    def of(cls, message: Message, offset: int | None) -> RecentMessage:
        """`message` at `offset` in its channel's log, as the context shows it."""
        return cls(
            message.sender,
            message.type.value,
            message.content,
            message.created_at,
            offset=offset,
            target=message.target,
            correlation_id=message.correlation_id,
            id=message.id,
        )

    def line(self, content: str | None = None, status: str | None = None) -> str:
        source = self.content if content is None else content
        text = " ".join((source or "").split()) or "-"
        to = f" → {person(self.target)}" if self.target else ""
        now = f" [{status}]" if status else ""
        return f"[{self.created_at:%Y-%m-%d %H:%M:%S}] {self.sender} ({self.type}{to}): {text}{now}"

    def as_json(self) -> dict[str, Any]:
        return {
            "sender": self.sender,
            "type": self.type,
            "content": self.content,
            "created_at": self.created_at.isoformat(),
            "offset": self.offset,
            "target": self.target,
        }


@dataclass(frozen=True)
class SummaryPart:
    """The narrative of the channel's latest summary and the offsets it covers."""

    text: str
    first_offset: int | None
    last_offset: int | None


@dataclass(frozen=True)
class RecapPart:
    """The latest recap and the offset the channel was at when it was written."""

    text: str
    covered_offset: int | None


@dataclass
class ChannelContext:
    """The rendered `text` (within `max_tokens`) and the parts it shows, for JSON."""

    channel: str
    max_tokens: int
    header: ChannelHeader
    for_agent: str | None = None
    text: str = ""
    parts: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)

    @property
    def decision(self) -> dict[str, Any]:
        return self.header.decision

    @property
    def min_tokens(self) -> int:
        """The smallest budget that shows the header whole."""
        return estimate_tokens(self.header.line())

    def as_json(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "max_tokens": self.max_tokens,
            "min_tokens": self.min_tokens,
            "for_agent": self.for_agent,
            "tokens": self.tokens,
            "text": self.text,
            "decision": self.decision,
            "parts": self.parts,
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
    """The largest n in [0, count] with fits(n), for fits monotone (true up to some n);
    -1 when not even fits(0)."""
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
    """The first `keep` characters, backed off to a word boundary, then the mark; a quote
    or bracket the cut fell inside is closed after its "…"."""
    head = text[:keep]
    if keep < len(text):
        boundary = head.rfind(" ")
        head = head[:boundary] if boundary > keep // 2 else head
    head = head.rstrip()
    closed = closing(head)
    if not closed:
        return head + TRUNCATED
    return f"{head} {ELLIPSIS}{closed} {TRUNCATED_MARK}"


def _header_part(page: _Page, header: ChannelHeader) -> None:
    """The header, cut to what fits when even it does not (a budget of a few tokens)."""
    line = header.line()
    if page.fits(line):
        page.place(line)
        return
    keep = _longest(len(line), lambda n: page.fits(_cut(line, n)))
    if keep > 0:
        page.place(_cut(line, keep))
    page.open = False


def _list_part(
    page: _Page,
    title: Callable[[int], str],
    lines: Sequence[str],
    items: Sequence[dict[str, Any]],
    *,
    always: bool = False,
) -> dict[str, Any]:
    """A titled list, its first lines first: whole if it fits, else as many as fit with
    "… and N more". `always`: placed even after an earlier part was cut (open commitments)."""
    total = len(lines)
    part: dict[str, Any] = {"total": total, "shown": [], "omitted": total}
    if not lines or not (page.open or always):
        return part

    def section(count: int) -> str:
        shown = [f"- {line}" for line in lines[:count]]
        if count < total:
            shown.append(f"- {ELLIPSIS} and {total - count} more {TRUNCATED_MARK}")
        return "\n".join([title(total), *shown])

    if page.fits(section(total)):
        shown = total
    else:
        page.open = False
        shown = _longest(total - 1, lambda n: page.fits(section(n)))
    if shown >= 0:
        page.place(section(shown))
        part.update(shown=list(items[:shown]), omitted=total - shown)
    return part


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


class _Statuses:
    """The status now of the commitment a message opened or answered, from the fold's
    commitments: by the message's own id (it opened one, or handed one off), else the
    latest commitment of its correlation id."""

    def __init__(self, commitments: Sequence[CommitmentView]) -> None:
        self.by_id = {c.id: c for c in commitments if c.id}
        self.by_correlation = {c.correlation_id: c for c in commitments}

    def of(self, message: RecentMessage) -> str | None:
        found = self.by_id.get(message.id) if message.id else None
        if found is None and message.correlation_id:
            found = self.by_correlation.get(message.correlation_id)
        if found is None:
            return None
        return f"commitment {found.outcome or found.state.lower()}"


def _messages_part(
    page: _Page,
    title: str,
    messages: Sequence[RecentMessage],
    statuses: _Statuses,
) -> dict[str, Any]:
    """The newest messages that fit, shown oldest first; if not even the newest fits
    whole, its head, marked."""
    total = len(messages)

    def section(lines: Sequence[str]) -> str:
        return "\n".join([f"{title} ({len(lines)} of {total}, oldest first):", *lines])

    part: dict[str, Any] = {"total": total, "shown": [], "omitted": total, "truncated": False}
    if not messages or not page.open:
        return part
    lines = [m.line(status=statuses.of(m)) for m in messages]
    count = _longest(total, lambda n: n == 0 or page.fits(section(lines[total - n :])))
    if count == total:
        page.place(section(lines))
        part.update(shown=[m.as_json() for m in messages], omitted=0)
        return part
    page.open = False
    if count > 0:
        page.place(section(lines[total - count :]))
        part.update(shown=[m.as_json() for m in messages[total - count :]], omitted=total - count)
        return part
    newest = messages[-1]
    body = " ".join((newest.content or "").split())
    status = statuses.of(newest)

    def cut_line(n: int) -> str:
        return newest.line(_cut(body, n), status)

    keep = _longest(len(body), lambda n: page.fits(section([cut_line(n)])))
    if keep >= _MIN_MESSAGE_CHARS:
        page.place(section([cut_line(keep)]))
        shown = {**newest.as_json(), "content": _cut(body, keep)}
        part.update(shown=[shown], omitted=total - 1, truncated=True)
    return part


def _newest_first(commitments: Sequence[CommitmentView]) -> list[CommitmentView]:
    return sorted(commitments, key=lambda c: c.since, reverse=True)


# A narrative line that says only a message's type: what summaries written before requests
# were narrated (and a message without words) left, "- [planner] COMMAND".
_BARE_TYPE_LINE = re.compile(
    r"^(?:- )?\[[^\]]*\] (?:" + "|".join(kind.value for kind in MessageType) + r")$"
)


def narrative_lines(text: str) -> str:
    """A summary's narrative as the context shows it: no blank lines and no line that says
    only a message's type (records on the summaries topic written before narratives told
    requests as history have both)."""
    kept = [
        line.rstrip()
        for line in text.splitlines()
        if line.strip() and not _BARE_TYPE_LINE.match(line.strip())
    ]
    return "\n".join(kept)


def budget_refusal(max_tokens: int) -> str | None:
    """Why `max_tokens` is refused as a context's budget, in the one line every entry point
    answers (the CLI, MCP, HTTP), or None when it is within 0..MAX_CONTEXT_TOKENS."""
    if 0 <= max_tokens <= MAX_CONTEXT_TOKENS:
        return None
    return f"max_tokens must be between 0 and {MAX_CONTEXT_TOKENS}, got {max_tokens}"


def assemble_context(
    max_tokens: int,
    *,
    header: ChannelHeader,
    commitments: Sequence[CommitmentView],
    summary: SummaryPart | None = None,
    recap: RecapPart | None = None,
    messages: Sequence[RecentMessage] = (),
    for_agent: str | None = None,
    ended_shown: int = ENDED_SHOWN,
    estimate: Callable[[str], int] = estimate_tokens,
) -> ChannelContext:
    """The channel's context within `max_tokens`, in the order of the module docstring.

    `commitments` are the fold's commitments (open and ended, any order of the state);
    `messages` the most recent ones, oldest first. `estimate` must grow with the text
    (longer text, no fewer tokens).
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    page = _Page(max_tokens, estimate)
    context = ChannelContext(header.channel, max_tokens, header, for_agent)
    parts: dict[str, Any] = {"header": header.as_json()}
    _header_part(page, header)
    statuses = _Statuses(commitments)

    open_now = _newest_first([c for c in commitments if c.is_open])
    ended = sorted(
        (c for c in commitments if not c.is_open), key=lambda c: c.ended_at or c.since, reverse=True
    )
    fulfilled = [c for c in ended if c.state == "FULFILLED"]
    ended = [c for c in ended if c.state != "FULFILLED"]
    after = summary.last_offset if summary is not None else None
    newer = [m for m in messages if after is None or m.offset is None or m.offset > after]
    covered = [m for m in messages if m not in newer]

    if for_agent:
        mine = [c for c in open_now if c.involves(for_agent)]
        open_now = [c for c in open_now if c not in mine]
        ended = [c for c in ended if c.involves(for_agent)] + [
            c for c in ended if not c.involves(for_agent)
        ]
        agent = person(for_agent)
        parts["mine"] = _list_part(
            page,
            lambda n: f"Yours, {agent} ({n} open: what you owe and what is owed to you):",
            [c.line() for c in mine],
            [c.as_json() for c in mine],
            always=True,
        )
        addressed = [m for m in newer if is_agent(m.target, for_agent)]
        newer = [m for m in newer if m not in addressed]
        parts["addressed"] = _messages_part(
            page, f"Messages to {agent}", addressed[-ended_shown:], statuses
        )
    parts["commitments"] = _list_part(
        page,
        lambda n: f"Open commitments ({n}{' more' if for_agent else ''}, newest first):",
        [c.line() for c in open_now],
        [c.as_json() for c in open_now],
        always=True,
    )
    shown_ended = ended[:ended_shown]
    parts["ended"] = _list_part(
        page,
        lambda n: (
            f"Ended without being fulfilled ({len(ended)}, most recent first"
            f"{'; ' + str(len(fulfilled)) + ' fulfilled' if fulfilled else ''}):"
        ),
        [c.line() for c in shown_ended],
        [c.as_json() for c in shown_ended],
    )
    parts["ended"]["total"] = len(ended)
    parts["ended"]["omitted"] = len(ended) - len(parts["ended"]["shown"])
    parts["ended"]["fulfilled"] = len(fulfilled)
    since = "Recent messages" if after is None else f"Messages after {PARTITION_OFFSET} {after}"
    parts["messages"] = _messages_part(page, since, newer, statuses)
    parts["messages"]["after_offset"] = after
    parts["summary"] = None
    if summary is not None:
        covers = (
            f" (through {PARTITION_OFFSET} {summary.last_offset})"
            if summary.last_offset is not None
            else ""
        )
        told = narrative_lines(summary.text)
        found = _text_part(page, f"Summary of what was said{covers}:", told)
        if found is not None:
            found.update(first_offset=summary.first_offset, last_offset=summary.last_offset)
        parts["summary"] = found
    parts["recap"] = None
    if recap is not None and _recap_is_current(recap, summary, header):
        found = _text_part(
            page, f"Recap (at {PARTITION_OFFSET} {recap.covered_offset}):", recap.text
        )
        if found is not None:
            found["covered_offset"] = recap.covered_offset
        parts["recap"] = found
    # More when there is more: what was done, then the recent messages the summary condenses.
    shown_fulfilled = fulfilled[:ended_shown]
    parts["fulfilled"] = _list_part(
        page,
        lambda n: f"Fulfilled ({len(fulfilled)}, most recent first):",
        [c.line() for c in shown_fulfilled],
        [c.as_json() for c in shown_fulfilled],
    )
    parts["fulfilled"]["total"] = len(fulfilled)
    parts["fulfilled"]["omitted"] = len(fulfilled) - len(parts["fulfilled"]["shown"])
    parts["earlier"] = _messages_part(
        page, f"Earlier messages, through {PARTITION_OFFSET} {after}", covered, statuses
    )
    context.parts = parts
    context.text = page.text()
    return context


def _recap_is_current(recap: RecapPart, summary: SummaryPart | None, header: ChannelHeader) -> bool:
    """A recap says where the channel stood when it was written: shown only when nothing
    was folded after it (so what it says of commitments is still the fold's) and it is
    newer than the summary."""
    at = recap.covered_offset
    if at is None or (header.offset is not None and at < header.offset):
        return False
    return summary is None or summary.last_offset is None or at > summary.last_offset
