"""streams.worker.app: where each role's web server listens; every RocksDB database of a
role opens with the role's one shared budget."""

from __future__ import annotations

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
