"""The broker's unit tests run with an otherwise empty PATH they put fake tools on."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.ops.broker import java


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH is only this (initially empty) folder; no JAVA_HOME; no cached java check."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(java, "_JAVA_CHECKED", set())
    return path
