"""`chorus replay` (streams.interfaces.cli.replay): usage errors before any Kafka access."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from streams.interfaces.cli.replay import replay_command
from streams.settings import get_settings


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--to-offset", "3", "--as-of", "2026-01-01T00:00:00Z"], "not both"),
        (["--verify", "--rebuild"], "cannot be combined"),
        (["--verify", "--to-offset", "3"], "works on the whole log"),
        (["--rebuild", "--channel", "a"], "whole tables"),
        (["--projection", "nope"], "unknown projection"),
        (["--as-of", "yesterday"], "ISO 8601"),
    ],
)
def test_usage_errors(args: list[str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORUS_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(replay_command, args)
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2, result.output
    assert message in result.output
