"""Each channel's configuration as the stages read it (both roles): the `channel-config`
table, parsed once and cached (`streams.memory.ByteCache`, bounded in bytes; a channel
with no config costs a small entry too, so its absence is not read again each message).

Most channels have no config, and each new channel's first message would cost a store read
that finds nothing and a cache entry that says so (in both roles, at every channel's
start: 3-4 % of each role's CPU over 100,000 new channels). So a partition whose store
holds no config at all once its tables have recovered (one seek, per partition taken over)
is known to have none: its channels read the defaults without a read or an entry, until a
config is written to it (`put`) or it moves.

The config stage (`streams.worker.stages.config`) is the table's only writer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError

from projections.model import describe_validation_error
from projections.termination import TerminationCondition, parse_conditions
from streams.memory import ByteCache
from streams.records import ChannelConfig, ConfiguredSetting, configured
from streams.settings import Settings
from streams.worker.store import TableStore

if TYPE_CHECKING:
    from streams.worker.ownership import Ownership

# What a channel's config may set for itself, over the worker's settings of the same name.
SettingName = ConfiguredSetting
# What a parsed config costs in memory per byte of its record (its model and conditions),
# and what a channel without one costs.
CONFIG_OVERHEAD = 8
NO_CONFIG_BYTES = 256


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


Entry = tuple[ChannelConfig | None, TerminationCondition]


class ChannelConfigs:
    """Each channel's config, parsed once: the fold and its followers read it on every
    message."""

    def __init__(
        self,
        table: Any,
        defaults: Settings,
        cache: ByteCache[str, Entry],
        ownership: Ownership,
    ) -> None:
        """`defaults`: the worker's settings, what a channel without its own value uses."""
        self.table = table
        self.store = TableStore(table)
        self.defaults = defaults
        self.cache = cache
        self.ownership = ownership
        # Told of each channel whose config changed, with its partition: what a stage
        # derived from the old one (a deadline) it derives again.
        self.listeners: list[Callable[[str, int], None]] = []
        # A channel without a config has the default conditions: parsed once.
        self.default = parse_conditions([])
        self._no_config: Entry = (None, self.default)
        # The owned partitions whose store holds no config (see the module).
        self.empty: set[int] = set()

    def moved(self, gone: frozenset[int], taken: frozenset[int], _: frozenset[int]) -> None:
        """`Ownership.on_moved`: what is known of partitions that moved is forgotten; once
        the tables have recovered, each partition taken over whose store holds no config is
        known to have none."""
        self.empty -= gone | taken
        if not self.ownership.recovering:
            self.empty |= {p for p in taken if not self.store.holds_any(p)}

    def _entry(self, channel: str, partition: int | None) -> Entry:
        entry = self.cache.get(channel)
        if entry is None:
            if partition is None:
                partition = self.ownership.partition_of(channel)
            if partition in self.empty:
                return self._no_config
            raw = self.store.get(channel, partition)
            config = ChannelConfig.model_validate(orjson.loads(raw)) if raw else None
            conditions = parse_conditions(config.termination) if config else self.default
            entry = (config, conditions)
            size = len(raw) * CONFIG_OVERHEAD if raw else NO_CONFIG_BYTES
            self.cache.put(channel, entry, size, partition)
        return entry

    # `partition`, where a caller passes it: the channel's own (a record's partition, once
    # the gate has checked it), which spares hashing the channel's name.

    def get(self, channel: str, partition: int | None = None) -> ChannelConfig | None:
        return self._entry(channel, partition)[0]

    def conditions(self, channel: str, partition: int | None = None) -> TerminationCondition:
        return self._entry(channel, partition)[1]

    def setting(self, channel: str, name: SettingName, partition: int | None = None) -> Any:
        """The channel's own `name` (a field of ChannelConfig), else the worker's."""
        return configured(self.get(channel, partition), name, self.defaults)

    def put(self, config: ChannelConfig) -> None:
        self.table[config.channel] = config.model_dump(mode="json")
        self.cache.pop(config.channel)
        partition = self.ownership.partition_of(config.channel)
        self.empty.discard(partition)
        for changed in self.listeners:
            changed(config.channel, partition)
