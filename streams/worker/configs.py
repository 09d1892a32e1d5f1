"""Each channel's configuration as the stages read it: the `channel-config` table, parsed once.

The config stage (`streams.worker.stages.config`) is the table's only writer.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Literal

from pydantic import ValidationError

from projections.model import describe_validation_error
from projections.termination import TerminationCondition, parse_conditions
from streams.records import ChannelConfig
from streams.settings import Settings

# What a channel's config may set for itself, over the worker's settings of the same name.
SettingName = Literal["summary_after_messages", "summary_after_seconds", "recap_debounce_seconds"]


def parse_config(value: bytes | None) -> ChannelConfig:
    """A config record, with its termination specs checked, or ValueError with the reason."""
    if value is None:
        raise ValueError("config record value is null")
    try:
        config = ChannelConfig.model_validate_json(value)
    except ValidationError as error:
        raise ValueError(describe_validation_error(error)) from None
    parse_conditions(config.termination)
    return config


class ChannelConfigs:
    """Each channel's config, parsed once: the fold and its followers read it on every
    message. The agent below is the only writer here; partition moves (`forget`) drop the
    parsed values, since recovery rewrites the table."""

    def __init__(self, table: MutableMapping[str, Any], defaults: Settings) -> None:
        """`defaults`: the worker's settings, what a channel without its own value uses."""
        self.table = table
        self.defaults = defaults
        self._parsed: dict[str, tuple[ChannelConfig | None, TerminationCondition]] = {}

    def _entry(self, channel: str) -> tuple[ChannelConfig | None, TerminationCondition]:
        entry = self._parsed.get(channel)
        if entry is None:
            raw = self.table.get(channel)
            config = ChannelConfig.model_validate(raw) if raw else None
            entry = (config, parse_conditions(config.termination if config else []))
            self._parsed[channel] = entry
        return entry

    def get(self, channel: str) -> ChannelConfig | None:
        return self._entry(channel)[0]

    def conditions(self, channel: str) -> TerminationCondition:
        return self._entry(channel)[1]

    def setting(self, channel: str, name: SettingName) -> Any:
        """The channel's own `name` (a field of ChannelConfig), else the worker's."""
        return getattr(self.get(channel), name, None) or getattr(self.defaults, name)

    def put(self, config: ChannelConfig) -> None:
        self.table[config.channel] = config.model_dump(mode="json")
        self._parsed.pop(config.channel, None)

    def forget(self) -> None:
        self._parsed.clear()
