"""How a `ChorusError` leaves the command line: its one-line message and its exit code
(`exit_code`, 1 by default), never a traceback."""

from __future__ import annotations

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
    def invoke(self, ctx: click.Context) -> Any:
        return _reported(super().invoke, ctx)


class ChorusCommand(click.Command):
    def invoke(self, ctx: click.Context) -> Any:
        return _reported(super().invoke, ctx)
