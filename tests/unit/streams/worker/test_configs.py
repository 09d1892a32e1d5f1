"""streams.worker.configs: channel configs parsed once, and dropped when they change."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from projections.termination import Complete, Continue, TerminationContext
from streams.memory import ByteCache
from streams.records import ChannelConfig
from streams.settings import Settings
from streams.worker.configs import NO_CONFIG_BYTES, ChannelConfigs, parse_config
from streams.worker.store import encoded_key


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


class OnePartition:
    def partition_of(self, channel: str) -> int:
        return 0


def configs_of(table: dict[str, Any], settings: Settings | None = None) -> ChannelConfigs:
    cache: ByteCache[str, Any] = ByteCache("configs", 100_000)
    return ChannelConfigs(table, settings or Settings(), cache, OnePartition())  # type: ignore[arg-type]


def test_a_channel_is_read_once_until_it_changes_or_its_partition_moves() -> None:
    table = CountingTable({"c": {"channel": "c", "termination": ["max-messages:2"]}})
    configs = configs_of(table)
    done = configs.conditions("c").evaluate(TerminationContext(message_count=2))
    assert isinstance(done, Complete)
    assert configs.get("c") is not None and configs.get("other") is None
    going = configs.conditions("other").evaluate(TerminationContext(message_count=9))
    assert isinstance(going, Continue)
    assert table.reads == 2  # once per channel, a miss included

    configs.put(ChannelConfig(channel="c", termination=["max-messages:5"]))
    found = configs.conditions("c").evaluate(TerminationContext(message_count=2))
    assert not isinstance(found, Complete)
    assert table.reads == 3
    table["other"] = {"channel": "other", "summary_after_messages": 3}  # e.g. recovery
    assert configs.get("other") is None  # still the cached miss
    configs.cache.forget_partitions([0])  # the partition moved
    config = configs.get("other")
    assert config is not None and config.summary_after_messages == 3


def test_configs_are_cached_within_a_byte_bound() -> None:
    table = CountingTable()
    configs = configs_of(table)
    configs.cache.budget = 2 * NO_CONFIG_BYTES
    for channel in ("a/1", "a/2", "a/3", "a/1"):
        configs.get(channel)
    assert table.reads == 4 and configs.cache.keys() == ["a/3", "a/1"]


def test_a_channel_setting_is_its_own_else_the_workers() -> None:
    own = ChannelConfig(channel="team/a", recap_debounce_seconds=5, summary_after_messages=3)
    configs = configs_of(
        {"team/a": own.model_dump(mode="json")},
        Settings(recap_debounce_seconds=40, summary_after_messages=20, summary_after_seconds=9),
    )
    assert configs.setting("team/a", "recap_debounce_seconds") == 5
    assert configs.setting("team/a", "summary_after_messages") == 3
    assert configs.setting("team/a", "summary_after_seconds") == 9  # not set for the channel
    assert configs.setting("team/b", "recap_debounce_seconds") == 40  # no config at all


class CountingDatabase:
    """A partition's store (RocksDB's `get` and `iter`), counting reads."""

    def __init__(self, rows: dict[bytes, bytes]) -> None:
        self.rows = rows
        self.reads = 0

    def get(self, key: bytes) -> bytes | None:
        self.reads += 1
        return self.rows.get(key)

    def iter(self) -> Any:
        keys = sorted(self.rows)
        return SimpleNamespace(seek_to_first=lambda: None, valid=lambda: bool(keys))


class RocksTable(dict[str, Any]):
    """A Faust table over RocksDB, as `TableStore` reads it: one store per partition."""

    def __init__(self, databases: dict[int, CountingDatabase]) -> None:
        super().__init__()
        self.data = SimpleNamespace(_db_for_partition=databases.__getitem__)


class ChannelPartitions:
    """Channels named "<partition>/<name>"; `recovering` as `Ownership` has it."""

    recovering = True

    def partition_of(self, channel: str) -> int:
        return int(channel.split("/")[0])


def test_a_partition_without_any_config_reads_no_store_for_its_channels_once_recovered() -> None:
    configured = {encoded_key("1/a"): orjson.dumps({"channel": "1/a", "termination": []})}
    databases = {0: CountingDatabase({}), 1: CountingDatabase(configured)}
    table = RocksTable(databases)
    cache: ByteCache[str, Any] = ByteCache("configs", 100_000)
    ownership = ChannelPartitions()
    configs = ChannelConfigs(table, Settings(), cache, ownership)  # type: ignore[arg-type]
    both = frozenset({0, 1})

    configs.moved(frozenset(), both, both)  # assigned: the stores are not recovered yet
    assert configs.get("0/x") is None and databases[0].reads == 1
    ownership.recovering = False
    configs.moved(frozenset(), both, both)  # recovered
    assert configs.empty == {0}
    for name in ("0/y", "0/z", "0/y"):
        assert configs.get(name) is None and configs.conditions(name) is configs.default
    assert databases[0].reads == 1 and "0/y" not in cache  # no read, no entry
    assert configs.get("1/a") is not None and databases[1].reads == 1

    configs.put(ChannelConfig(channel="0/y", summary_after_messages=3))  # the config stage
    databases[0].rows[encoded_key("0/y")] = orjson.dumps({"channel": "0/y"})
    assert configs.empty == set()
    assert configs.get("0/y") is not None and databases[0].reads == 2

    databases[0].rows.clear()
    configs.moved(frozenset({0}), frozenset(), frozenset({1}))  # gone
    ownership.recovering = True
    configs.moved(frozenset(), frozenset({0}), both)  # taken over again: not known yet
    assert configs.empty == set()
    ownership.recovering = False
    configs.moved(frozenset(), frozenset({0}), both)
    assert configs.empty == {0}
