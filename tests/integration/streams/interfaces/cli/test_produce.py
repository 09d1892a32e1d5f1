"""`chorus produce` to the real broker: a reply built from the printed JSON closes the
request."""

from __future__ import annotations

import orjson
import pytest

from streams.kafka.consume import read_topic
from streams.ops.topics import create_topics
from streams.settings import Settings
from streams.topology import MESSAGES
from tests.integration.test_foundation import chorus

BASE = ["produce", "--channel", "team/plan", "--sender", "planner"]


@pytest.mark.kafka
async def test_a_reply_built_from_the_printed_json_closes_the_request_on_the_real_broker(
    chorus_env: dict[str, str], chorus_settings: Settings
) -> None:
    await create_topics(chorus_settings)
    ask = chorus(chorus_env, *BASE, "--type", "query", "--content", "who?", "--json")
    assert ask.returncode == 0, ask.stderr
    asked = orjson.loads(ask.stdout)
    answer = chorus(
        chorus_env,
        "produce",
        "--channel",
        "team/plan",
        "--sender",
        "bob",
        "--type",
        "response",
        "--content",
        "me",
        "--in-reply-to",
        asked["id"],
        "--correlation-id",
        asked["correlation_id"],
        "--json",
    )
    assert answer.returncode == 0, answer.stderr
    answered = orjson.loads(answer.stdout)
    assert (answered["partition"], answered["offset"]) == (asked["partition"], 1)
    logged = [r.value async for r in read_topic(chorus_settings, chorus_settings.topic(MESSAGES))]
    assert [(m["type"], m["correlation_id"]) for m in logged] == [
        ("QUERY", asked["correlation_id"]),
        ("RESPONSE", asked["correlation_id"]),
    ]
    assert logged[1]["in_reply_to"] == asked["id"]
