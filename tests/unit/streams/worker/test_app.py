"""streams.worker.app: where each role's web server listens; every RocksDB database of a
role opens with the role's one shared budget."""

from __future__ import annotations

import time
from pathlib import Path

import rocksdict

from streams.settings import Settings
from streams.worker.app import SharedRocksDB, role_url, role_web_port
from tests.unit.streams.worker.offline import offline_worker


def test_the_context_role_listens_beside_the_fold_role_on_this_host() -> None:
    settings = Settings(web_port=7000)
    assert (role_web_port(settings, "fold"), role_web_port(settings, "context")) == (7000, 7001)
    assert role_url(settings, "fold") == "http://127.0.0.1:7000"
    assert role_url(Settings(web_host="::", web_port=7000), "context") == "http://127.0.0.1:7001"
    assert role_url(Settings(web_host="10.0.0.5", web_port=7000), "fold") == "http://10.0.0.5:7000"


def test_rocksdb_databases_share_one_cache_and_one_write_buffer_budget() -> None:
    shared = SharedRocksDB(64 * 1024 * 1024)
    first, second = shared.as_options(), shared.as_options()
    assert first is not second  # options per database, one cache and manager behind them
    assert shared.write_buffers.get_buffer_size() == 32 * 1024 * 1024
    assert shared.write_buffers.enabled()


def test_a_role_shares_its_budget_between_rocksdb_and_its_caches() -> None:
    worker = offline_worker(memory_mb=100)
    chorus = worker.runtime
    assert chorus.memory.total == 100 * 1024 * 1024
    shares = sum(chorus.memory.share(name) for name in chorus.memory.shares)
    assert abs(shares - chorus.memory.total) <= len(chorus.memory.shares)
    held = {cache.name: cache.budget for cache in chorus.caches}
    assert held["folds"] == chorus.memory.share("folds")
    assert sum(held.values()) <= chorus.memory.total - chorus.memory.share("rocksdb")


def test_each_role_s_deadline_index_opens_with_a_time_index_s_options(tmp_path: Path) -> None:
    for role in ("fold", "context"):
        chorus = offline_worker(role, store="rocksdb://", data_dir=str(tmp_path)).runtime
        options = {t.table.name: t.table.data.rocksdb_options for t in chorus.checkpoint.tables}
        assert options.pop("deadlines").compacts_deletions
        assert options and not any(o.compacts_deletions for o in options.values())


def _newest_due(database: rocksdict.Rdict, skippable: int) -> tuple[int, bool]:
    """How many of the 64 newest keys a scan from the end found, and whether it found them
    stepping over at most `skippable` entries (deleted ones, versions they hide)."""
    options = rocksdict.ReadOptions()
    options.set_max_skippable_internal_keys(skippable)
    iterator = database.iter(options)
    iterator.seek_for_prev(b'"recap|9')
    found = 0
    while iterator.valid() and found < 64:
        found += 1
        iterator.prev()
    try:
        iterator.status()
    except Exception:  # rocksdict raises "Result incomplete: Too many internal keys skipped"
        return found, False
    return found, True


def test_a_time_index_scan_steps_over_few_of_the_entries_it_deleted(tmp_path: Path) -> None:
    # A time index deletes an entry as each fires, and a scan for what is due next steps
    # over every deletion not compacted away yet: at 1,000,000 channels, half a second.
    shared = SharedRocksDB(64 * 1024 * 1024)
    index = shared.for_a_time_index()
    assert index.cache is shared.cache and index.write_buffers is shared.write_buffers
    fired, live, skippable = 100_000, 10, 40_000

    def fire_all_but_the_oldest(options: rocksdict.Options, name: str) -> rocksdict.Rdict:
        database = rocksdict.Rdict(str(tmp_path / name), options=options)
        keys = [f'"recap|{at:015d}|c{at}"'.encode() for at in range(fired + live)]
        for key in keys:
            database[key] = b"null"
        for key in reversed(keys[live:]):  # newest first, as recaps fire
            del database[key]
        return database

    table = fire_all_but_the_oldest(shared.as_options(), "table")
    assert _newest_due(table, skippable) == (0, False)  # every deletion still in its memtable
    table.close()
    database = fire_all_but_the_oldest(index.as_options(), "index")
    deadline = time.monotonic() + 30
    while _newest_due(database, skippable) != (live, True):  # compacted in the background
        assert time.monotonic() < deadline, "the deletions were never compacted away"
        time.sleep(0.05)
    database.close()
