"""Rich output for people, wherever it goes: on a terminal, lines wrap at its width; without
one (a log of `make run`, a pipe, CI, an editor's task runner) each line is written whole,
never broken mid-sentence at 80 columns, so the log reads and greps as printed."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console


def text_console(file: TextIO | None = None) -> Console:
    """A console that wraps on a terminal only (`file`: stdout by default)."""
    console = Console(highlight=False, file=file)
    console.soft_wrap = not console.is_terminal
    return console
