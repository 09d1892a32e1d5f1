"""streams.ops.broker.java: finding Java 17+ and the errors when there is none."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.ops.broker import BrokerError, ensure_kafka_jars
from streams.ops.broker.java import check_java, parse_java_major
from tests.unit.streams.ops.broker.fake_tools import write_fake_java


def test_missing_java_is_reported(tmp_path: Path, bin_dir: Path) -> None:
    with pytest.raises(BrokerError, match=r"Java 17\+ is required .* found none"):
        ensure_kafka_jars(tmp_path / "home", "4.1.1")


def test_old_java_is_reported(tmp_path: Path, bin_dir: Path) -> None:
    write_fake_java(bin_dir, '"1.8.0_392"')
    with pytest.raises(BrokerError, match=r"Java 17\+ is required .* found Java 8"):
        ensure_kafka_jars(tmp_path / "home", "4.1.1")


def test_java_home_wins_over_path(
    tmp_path: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_fake_java(bin_dir, '"11.0.20"')
    java_home = tmp_path / "jdk21"
    (java_home / "bin").mkdir(parents=True)
    write_fake_java(java_home / "bin", '"21.0.1"')
    monkeypatch.setenv("JAVA_HOME", str(java_home))
    assert check_java() == str(java_home / "bin" / "java")
    # Java is fine, so the next problem is the missing Maven.
    with pytest.raises(BrokerError, match="Maven"):
        ensure_kafka_jars(tmp_path / "home", "4.1.1")


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('Picked up JAVA_TOOL_OPTIONS: -Xss1m\nopenjdk version "25-ea" 2025-09-16', 25),
        ("garbage", None),
    ],
)
def test_parse_java_major(output: str, major: int | None) -> None:
    assert parse_java_major(output) == major
