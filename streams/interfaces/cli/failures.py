"""How a `ChorusError` leaves the command line: its one-line message and its exit code
(`exit_code`, 1 by default), never a traceback. `ChorusGroup` also lists its commands in
`--help` with their descriptions whole (click cuts them to a line by default), and its
subgroups are ChorusGroups too."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from streams.errors import ChorusError


def _reported(invoke: Callable[[click.Context], Any], ctx: click.Context) -> Any:
    try:
        return invoke(ctx)
    except ChorusError as error:
        failure = click.ClickException(str(error))
        failure.exit_code = getattr(error, "exit_code", 1)
        raise failure from None


class ChorusGroup(click.Group):
    group_class = type  # `@group.group()` makes a ChorusGroup

    def invoke(self, ctx: click.Context) -> Any:
        return _reported(super().invoke, ctx)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and each one's description (its help's first sentence) whole,
        wrapped to the terminal."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class ChorusCommand(click.Command):
    def invoke(self, ctx: click.Context) -> Any:
        return _reported(super().invoke, ctx)
