"""Text for people wherever it goes: whole lines without a terminal."""

from __future__ import annotations

import io

from streams.interfaces.console import text_console


def test_without_a_terminal_a_long_line_is_written_whole() -> None:
    written = io.StringIO()
    console = text_console(written)
    said = "each fold: #the message's partition offset (its position on the channel's partition)"
    console.print(said * 3)
    assert written.getvalue() == said * 3 + "\n"
