"""Fake `java` and `mvn` executables for the broker's unit tests."""

from __future__ import annotations

import sys
from pathlib import Path


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
