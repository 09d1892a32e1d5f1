"""Topic configs: every compacted topic rolls segments small enough for the cleaner to keep up."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from streams.settings import Settings
from streams.topology import changelog_config, changelog_specs, topic_specs


def settings(**values: object) -> Settings:
    return Settings(bootstrap_servers="x:1", **values)  # type: ignore[arg-type]


def test_every_compacted_topic_and_changelog_rolls_at_the_segment_bound() -> None:
    chosen = settings(compacted_segment_bytes=4 * 1024 * 1024, compacted_segment_ms=60_000)
    compacted = [
        spec.config
        for spec in topic_specs(chosen) + changelog_specs(chosen, ["app-fold-x-v1-changelog"])
        if spec.config["cleanup.policy"] == "compact"
    ]
    assert len(compacted) == 4  # summaries, recaps, channel-config and the changelog
    assert {config["segment.bytes"] for config in compacted} == {str(4 * 1024 * 1024)}
    # Tiny records (fold positions: a few keys written every batch) fill no segment for
    # hours; a segment also rolls after this long.
    assert {config["segment.ms"] for config in compacted} == {"60000"}
    # What Faust is given for the tables it creates itself.
    assert changelog_config(chosen)["segment.bytes"] == str(4 * 1024 * 1024)
    assert changelog_config(chosen)["segment.ms"] == "60000"


def test_deleting_topics_keep_the_brokers_segment_size() -> None:
    deleting = [s.config for s in topic_specs(settings()) if s.config["cleanup.policy"] == "delete"]
    assert len(deleting) == 3
    assert all("segment.bytes" not in config for config in deleting)
    assert all("segment.ms" not in config for config in deleting)


def test_a_segment_smaller_than_the_largest_record_is_refused_at_start() -> None:
    # The broker refuses a record batch larger than a segment: such a topic could not take a
    # full-size message, so the setting is refused before anything is created.
    with pytest.raises(
        ValidationError, match=r"compacted_segment_bytes \(1048576\) must be at least 1114112"
    ):
        settings(compacted_segment_bytes=1024 * 1024)
    assert settings(compacted_segment_bytes=1024 * 1024 + 64 * 1024).compacted_segment_bytes
    with pytest.raises(ValidationError, match="at least 2162688"):
        settings(max_message_bytes=2 * 1024 * 1024, compacted_segment_bytes=2 * 1024 * 1024)
