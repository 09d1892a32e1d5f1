"""streams.ops.topics against the test broker: topics are created once, failures named."""

from __future__ import annotations

import pytest

from streams.ops.topics import TopicCreationError, create_topics
from streams.settings import Settings
from streams.topology import MESSAGES, topic_specs

pytestmark = pytest.mark.kafka


async def test_missing_topics_are_created_once(chorus_settings: Settings) -> None:
    created = await create_topics(chorus_settings)
    assert sorted(created) == sorted(spec.name for spec in topic_specs(chorus_settings))
    assert chorus_settings.topic(MESSAGES) in created
    assert await create_topics(chorus_settings) == []


async def test_a_topic_the_broker_refuses_is_named(chorus_settings: Settings) -> None:
    # One broker cannot hold three replicas.
    impossible = chorus_settings.model_copy(update={"replication_factor": 3})
    with pytest.raises(TopicCreationError, match=f"could not create topics: .*{MESSAGES}"):
        await create_topics(impossible)
