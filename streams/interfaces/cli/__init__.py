"""The `chorus` command line (`main`) and its `chorus replay` command (`replay`)."""

from streams.interfaces.cli.main import main

__all__ = ["main"]
