"""streams.worker.configs: channel configs parsed once, and dropped when they change."""

from __future__ import annotations

from typing import Any

import pytest

from streams.records import ChannelConfig
from streams.settings import Settings
from streams.worker.configs import ChannelConfigs, parse_config


def test_parse_config_checks_the_termination_specs() -> None:
    config = parse_config(b'{"channel": "team/a", "termination": ["max-messages:3"]}')
    assert config.channel == "team/a"
    assert config.termination == ["max-messages:3"]
    with pytest.raises(ValueError, match="unknown termination condition 'sometimes'"):
        parse_config(b'{"channel": "team/a", "termination": ["sometimes"]}')


@pytest.mark.parametrize(
    "value", [None, b"{not json", b'{"channel": "a", "recap_debounce_seconds": 0}']
)
def test_parse_config_refuses_what_is_not_a_config(value: bytes | None) -> None:
    with pytest.raises(ValueError):
        parse_config(value)


class CountingTable(dict[str, Any]):
    """A table that counts reads, to show configs are parsed once."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        self.reads += 1
        return super().get(key, default)


def test_a_channel_is_read_once_until_it_changes_or_is_forgotten() -> None:
    table = CountingTable()
    configs = ChannelConfigs(table, Settings())
    assert configs.get("team/a") is None
    configs.conditions("team/a")
    assert table.reads == 1

    configs.put(ChannelConfig(channel="team/a", summary_after_messages=5))
    found = configs.get("team/a")
    assert found is not None and found.summary_after_messages == 5
    assert table.reads == 2

    configs.forget()
    configs.get("team/a")
    assert table.reads == 3


def test_a_channel_setting_is_its_own_else_the_workers() -> None:
    own = ChannelConfig(channel="team/a", recap_debounce_seconds=5, summary_after_messages=3)
    configs = ChannelConfigs(
        {"team/a": own.model_dump(mode="json")},
        Settings(recap_debounce_seconds=40, summary_after_messages=20, summary_after_seconds=9),
    )
    assert configs.setting("team/a", "recap_debounce_seconds") == 5
    assert configs.setting("team/a", "summary_after_messages") == 3
    assert configs.setting("team/a", "summary_after_seconds") == 9  # not set for the channel
    assert configs.setting("team/b", "recap_debounce_seconds") == 40  # no config at all
