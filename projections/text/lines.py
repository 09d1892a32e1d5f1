"""The short lines a person reads: a text cut to a length (`cut`, with `ELLIPSIS` when it
was longer), a count with its noun (`counted`), and the one way a message is written and
read back inside a summary, a prompt or a compacted span, the `[sender] text` line
(`message_line`, `parse_message_line`)."""

from __future__ import annotations

__all__ = ["ELLIPSIS", "counted", "cut", "message_line", "parse_message_line"]

ELLIPSIS = "…"


def cut(text: str, max_chars: int, *, at_word: bool = False) -> str:
    """`text` at most `max_chars` long: cut at the limit (`at_word`: back to the last whole
    word before it), trailing space dropped, with "…" when it was longer."""
    if len(text) <= max_chars:
        return text
    head = text[: max(max_chars - 1, 0)]
    if at_word and " " in head:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip() + ELLIPSIS


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and `noun`, the plural when count is not 1: "1 commitment", "2 commitments"."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def message_line(sender: str, text: str) -> str:
    """How a message reads inside a summary, a prompt or a compacted span: `[sender] text`."""
    return f"[{sender}] {text}"


def parse_message_line(line: str) -> tuple[str, str] | None:
    """`(sender, text)` of a `message_line`, or None when `line` is not one."""
    sender, separator, said = line.partition("] ")
    if not line.startswith("[") or not separator or not said:
        return None
    return sender[1:], said
