"""streams.interfaces.control against the test broker: channel config merges, the manual
summary keeps the state part."""

from __future__ import annotations

import pytest

from streams.interfaces.control import configure_channel, latest_value, set_summary
from streams.ops.topics import create_topics
from streams.settings import Settings
from streams.topology import CHANNEL_CONFIG, SUMMARIES

pytestmark = pytest.mark.kafka


async def test_changes_merge_into_the_current_config(chorus_settings: Settings) -> None:
    await create_topics(chorus_settings)
    await configure_channel(chorus_settings, "team/a", summary_after_messages=5)
    config = await configure_channel(
        chorus_settings, "team/a", recap_debounce_seconds=10.0, summary_after_messages=None
    )
    assert (config.summary_after_messages, config.recap_debounce_seconds) == (5, 10.0)
    stored = await latest_value(chorus_settings, CHANNEL_CONFIG, "team/a")
    assert stored["summary_after_messages"] == 5 and stored["recap_debounce_seconds"] == 10.0


async def test_an_unknown_condition_is_refused_before_it_is_written(
    chorus_settings: Settings,
) -> None:
    await create_topics(chorus_settings)
    with pytest.raises(ValueError, match="unknown termination condition"):
        await configure_channel(chorus_settings, "team/b", termination=["sometimes"])
    assert await latest_value(chorus_settings, CHANNEL_CONFIG, "team/b") is None


async def test_a_manual_summary_replaces_the_narrative(chorus_settings: Settings) -> None:
    await create_topics(chorus_settings)
    record = await set_summary(chorus_settings, "team/c", "We ship on Friday.", "user:ann")
    assert record.narrative == "We ship on Friday."
    assert record.text.startswith("We ship on Friday.")
    assert record.updated_by == "user:ann"
    stored = await latest_value(chorus_settings, SUMMARIES, "team/c")
    assert stored["narrative"] == "We ship on Friday."
