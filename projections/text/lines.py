"""The short lines a person reads: a text cut to a length (`cut`, with `ELLIPSIS` when it
was longer, and the quotes and brackets it cut inside closed: `closing`, `is_balanced`), a
count with its noun (`counted`), and the one way a message is written and read back inside
a summary, a prompt or a compacted span, the `[sender] text` line (`message_line`,
`parse_message_line`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "ELLIPSIS",
    "closing",
    "counted",
    "cut",
    "ended",
    "is_balanced",
    "merged",
    "message_line",
    "parse_message_line",
]

ELLIPSIS = "…"
# The pairs a cut must not leave open. A straight double quote closes the one before it; a
# straight single quote, and a ’ with no ‘ open, are apostrophes.
_PAIRS = {"“": "”", "‘": "’", "(": ")", "[": "]", "{": "}", '"': '"'}
_OPENER_OF = {close: open_ for open_, close in _PAIRS.items() if open_ != '"'}
# Every other character passes `_unclosed` by: only these are looked at, found in C (a
# message's window is cut on every message the context role takes).
_PAIR_CHARS = re.compile("[" + re.escape("".join(sorted({*_PAIRS, *_OPENER_OF}))) + "]")


def _unclosed(text: str, *, strict: bool) -> list[str] | None:
    """The openers of `text` left open, innermost last. `strict`: None when a closer closes
    nothing open or crosses another pair ("(a [b)"); else such a closer closes its opener
    and whatever was opened inside it, or nothing."""
    stack: list[str] = []
    for char in _PAIR_CHARS.findall(text):
        if char == '"' and '"' in stack:
            opener: str | None = '"'
        elif char in _PAIRS:
            stack.append(char)
            continue
        else:
            opener = _OPENER_OF.get(char)
            if opener is None or (char == "’" and "‘" not in stack):
                continue
        if stack and stack[-1] == opener:
            stack.pop()
        elif strict:
            return None
        elif opener in stack:
            del stack[len(stack) - 1 - stack[::-1].index(opener) :]
    return stack


def closing(text: str) -> str:
    """What closes the quotes and brackets `text` left open, innermost first: "”" for "“a"."""
    return "".join(_PAIRS[opener] for opener in reversed(_unclosed(text, strict=False) or []))


def is_balanced(text: str) -> bool:
    """True when every quote and bracket `text` opens is closed, in order."""
    return _unclosed(text, strict=True) == []


def ended(head: str) -> str:
    """`head`, the start of a longer text, as a cut shows it: without the space or the
    punctuation it stopped at, then "…", then what closes the quotes and brackets it cut
    inside (`“Fix the config…”`)."""
    head = head.rstrip(_CUT_AT)
    return head + ELLIPSIS + closing(head)


# What a cut drops at its end before the "…": space, and punctuation that ended a part.
_CUT_AT = " ,;:-–—."


def cut(text: str, max_chars: int, *, at_word: bool = False) -> str:
    """`text` at most `max_chars` long: cut at the limit (`at_word`: back to the last whole
    word before it) and `ended`, when it was longer."""
    if len(text) <= max_chars:
        return text
    room = max_chars - 1
    while True:
        head = text[: max(room, 0)]
        if at_word and " " in head:
            head = head.rsplit(" ", 1)[0]
        shown = ended(head)
        if len(shown) <= max_chars or shown == ELLIPSIS:
            return shown
        room = len(head.rstrip(_CUT_AT)) - 1  # what closes it takes room: a little less


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and `noun`, the plural when count is not 1: "1 commitment", "2 commitments"."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def merged(entries: Sequence[str]) -> list[str]:
    """`entries` each once, in the order first said; one said again reads "… (twice)", "…
    (3 times)". Entries are the same when they differ only in case and spacing."""
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for entry in entries:
        key = " ".join(entry.casefold().split())
        counts[key] = counts.get(key, 0) + 1
        first.setdefault(key, entry)
    return [
        entry if counts[key] == 1 else f"{entry} ({_times(counts[key])})"
        for key, entry in first.items()
    ]


def _times(count: int) -> str:
    return "twice" if count == 2 else f"{count} times"


def message_line(sender: str, text: str) -> str:
    """How a message reads inside a summary, a prompt or a compacted span: `[sender] text`."""
    return f"[{sender}] {text}"


def parse_message_line(line: str) -> tuple[str, str] | None:
    """`(sender, text)` of a `message_line`, or None when `line` is not one."""
    sender, separator, said = line.partition("] ")
    if not line.startswith("[") or not separator or not said:
        return None
    return sender[1:], said
