"""streams.worker.store: a table's per-partition stores read directly."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
from rocksdict import Rdict

from streams.worker.store import TableStore, encoded_key


def rocksdb_table(databases: dict[int, Rdict]) -> Any:
    """A stand-in for a Faust table over RocksDB: one database per partition."""
    return SimpleNamespace(data=SimpleNamespace(_db_for_partition=databases.__getitem__))


def test_whether_a_partition_holds_any_key_is_one_seek_of_its_own_store(tmp_path: Path) -> None:
    databases = {p: Rdict(str(tmp_path / str(p))) for p in (0, 1)}
    try:
        store = TableStore(rocksdb_table(databases))
        assert not store.holds_any(0) and not store.holds_any(1)
        databases[1][encoded_key("team/a")] = orjson.dumps({"channel": "team/a"})
        assert not store.holds_any(0) and store.holds_any(1)
        assert store.get("team/a", 1) == b'{"channel":"team/a"}'
    finally:
        for database in databases.values():
            database.close()
    assert TableStore({}).holds_any(0)  # no per-partition stores: not known, so maybe
