"""streams.replay.run: folding chorus.messages again from the test broker."""

from __future__ import annotations

import pytest

from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.registry import registered_projections
from streams.replay.run import replay
from streams.settings import Settings
from tests.factories import conversation

pytestmark = pytest.mark.kafka


async def test_replay_folds_every_channel_of_the_log(chorus_settings: Settings) -> None:
    await create_topics(chorus_settings)
    messages = conversation(["team/a", "team/b"], 12)
    await send_messages(chorus_settings, messages)

    run = await replay(chorus_settings, registered_projections([], chorus_settings))

    assert run.records == 12
    assert run.rate > 0
    for channel in ("team/a", "team/b"):
        overview = run.replayer.folds(channel)["overview"]
        expected = sum(1 for m in messages if m.channel == channel)
        assert overview.state["message_count"] == expected


async def test_a_channel_filter_folds_only_that_channel(chorus_settings: Settings) -> None:
    await create_topics(chorus_settings)
    await send_messages(chorus_settings, conversation(["team/a", "team/b"], 6))
    run = await replay(
        chorus_settings, registered_projections([], chorus_settings), channels=["team/b"]
    )
    assert sorted(run.replayer.channels) == ["team/b"]
