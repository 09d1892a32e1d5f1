"""streams.ops.broker.maven with fake `java` and `mvn`: resolving the Kafka jars once,
atomically, with clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams.ops.broker import BrokerError, ensure_kafka_jars
from tests.fakes.broker_tools import write_fake_java, write_script


def test_missing_maven_is_reported(tmp_path: Path, bin_dir: Path) -> None:
    write_fake_java(bin_dir)
    with pytest.raises(BrokerError) as err:
        ensure_kafka_jars(tmp_path / "home", "4.1.1")
    message = str(err.value)
    assert "Maven (mvn) is required" in message
    assert "apt-get install maven" in message
    assert "CHORUS_BOOTSTRAP_SERVERS" in message


def test_maven_failure_shows_its_output_and_leaves_nothing(tmp_path: Path, bin_dir: Path) -> None:
    write_fake_java(bin_dir)
    write_script(
        bin_dir / "mvn",
        "print('[ERROR] Failed to execute goal: Could not resolve dependencies')\n"
        "print('[ERROR] org.apache.kafka:kafka_2.13:jar:9.9.9 was not found')\n"
        "sys.exit(1)",
    )
    home = tmp_path / "home"
    with pytest.raises(BrokerError) as err:
        ensure_kafka_jars(home, "9.9.9")
    message = str(err.value)
    assert "could not be resolved from Maven Central" in message
    assert "kafka_2.13:jar:9.9.9 was not found" in message
    assert not (home / "kafka-9.9.9").exists()
    assert not [p for p in home.iterdir() if p.is_dir()]  # no half download left behind


def test_maven_runs_once_and_the_result_appears_atomically(tmp_path: Path, bin_dir: Path) -> None:
    write_fake_java(bin_dir)
    calls = tmp_path / "mvn-calls"
    write_script(
        bin_dir / "mvn",
        "import pathlib\n"
        f"pathlib.Path({str(calls)!r}).open('a').write('x')\n"
        "out = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('-DoutputDirectory='))\n"
        "assert any(a == '-Dkafka.version=9.9.9' for a in sys.argv)\n"
        "pathlib.Path(out).mkdir(parents=True)\n"
        "(pathlib.Path(out) / 'kafka_2.13-9.9.9.jar').write_text('jar')\n",
    )
    home = tmp_path / "home"
    lib = ensure_kafka_jars(home, "9.9.9")
    assert lib == home / "kafka-9.9.9" / "lib"
    assert (lib / "kafka_2.13-9.9.9.jar").is_file()
    marker = json.loads((home / "kafka-9.9.9" / ".complete").read_text())
    assert marker["jars"] == ["kafka_2.13-9.9.9.jar"]
    assert ensure_kafka_jars(home, "9.9.9") == lib
    assert calls.read_text() == "x"


def test_unfinished_cache_is_replaced(tmp_path: Path, bin_dir: Path) -> None:
    write_fake_java(bin_dir)
    write_script(
        bin_dir / "mvn",
        "import pathlib\n"
        "out = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('-DoutputDirectory='))\n"
        "pathlib.Path(out).mkdir(parents=True)\n"
        "(pathlib.Path(out) / 'kafka_2.13-9.9.9.jar').write_text('jar')\n",
    )
    stale = tmp_path / "home" / "kafka-9.9.9" / "lib"
    stale.mkdir(parents=True)
    (stale / "half.jar").write_text("")
    lib = ensure_kafka_jars(tmp_path / "home", "9.9.9")
    assert sorted(p.name for p in lib.iterdir()) == ["kafka_2.13-9.9.9.jar"]
