"""streams.ops.broker.java: the error when there is no Java, and reading `java -version`
(the tests that run a fake java are in tests/integration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.ops.broker import BrokerError, ensure_kafka_jars
from streams.ops.broker.java import parse_java_major


def test_missing_java_is_reported(tmp_path: Path, bin_dir: Path) -> None:
    with pytest.raises(BrokerError, match=r"Java 17\+ is required .* found none"):
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
