"""streams.interfaces.cli.failures: a ChorusError leaves as one line and its exit code."""

from __future__ import annotations

import click
from click.testing import CliRunner

from streams.errors import ChorusError
from streams.interfaces.cli.failures import ChorusCommand, ChorusGroup


class Unavailable(ChorusError):
    exit_code = 3


@click.group(cls=ChorusGroup)
def group() -> None:
    pass


@group.command()
def plain() -> None:
    raise ChorusError("the broker is not there")


@group.command()
def coded() -> None:
    raise Unavailable("try again later")


@click.command(cls=ChorusCommand)
def single() -> None:
    raise ChorusError("single failed")


def test_a_chorus_error_is_one_line_and_exit_1() -> None:
    result = CliRunner().invoke(group, ["plain"])
    assert result.exit_code == 1
    assert result.output == "Error: the broker is not there\n"


def test_an_error_s_own_exit_code_is_kept() -> None:
    result = CliRunner().invoke(group, ["coded"])
    assert result.exit_code == 3
    assert result.output == "Error: try again later\n"


def test_a_single_command_reports_the_same_way() -> None:
    result = CliRunner().invoke(single, [])
    assert (result.exit_code, result.output) == (1, "Error: single failed\n")
