"""streams.ops.broker.maven: which log4j goes with a Kafka release (resolving the jars with
a fake `mvn` is in tests/integration)."""

from __future__ import annotations

from streams.ops.broker.maven import log4j_version


def test_log4j_follows_the_kafka_release() -> None:
    assert log4j_version("4.1.1") == "2.24.3"
    assert log4j_version("4.2.0") == "2.25.3"
