"""Fake `java` and `mvn` executables for the broker's tests, and `bin_dir`: a PATH that
holds only the fakes a test puts there (both tiers' conftests of streams.ops.broker use it)."""

from __future__ import annotations

import sys
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


def write_script(path: Path, body: str) -> Path:
    """An executable Python script at path running body (with sys imported)."""
    path.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    path.chmod(0o755)
    return path


def write_fake_java(bin_dir: Path, version: str = '"17.0.2" 2022-01-18') -> None:
    write_script(
        bin_dir / "java",
        f"sys.stderr.write('openjdk version {version}\\nOpenJDK Runtime Environment\\n')",
    )
