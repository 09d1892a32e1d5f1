"""streams.ops.broker.java with fake `java` executables: an old Java is reported,
JAVA_HOME wins over PATH."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.ops.broker import BrokerError, ensure_kafka_jars
from streams.ops.broker.java import check_java
from tests.fakes.broker_tools import write_fake_java


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
