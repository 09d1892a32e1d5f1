"""The fold agent through Faust's test harness: no Kafka, sends captured."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import orjson

from streams.app import Chorus
from streams.records import DeadLetter, DriverEvent
from streams.settings import Settings


async def test_fold_agent_writes_state_before_it_wakes_drivers() -> None:
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    chorus = Chorus(settings, broker="127.0.0.1:1").install()
    sent: list[tuple[str, Any]] = []

    async def capture(topic: Any, key: bytes | None = None, value: bytes = b"", **_: Any) -> None:
        name = topic.get_topic_name()
        if name.endswith("driver-events"):
            event = DriverEvent.model_validate_json(value)
            assert set(event.states) == {"commitments", "overview"}  # one event, every state
            for projection, carried in event.states.items():
                stored = chorus.folds[projection].get(event.channel)
                assert stored is not None and stored["state"] == carried.state  # state first
        sent.append((name, value))

    message = {"channel": "off/line", "sender": "ann", "type": "STATUS", "content": "hi"}
    with patch("faust.topics.Topic.send", capture):
        async with chorus.app.agents["fold-messages"].test_context() as agent:
            await agent.put(orjson.dumps(message), key=b"off/line")
            await agent.put(b"\x00not json", key=b"off/line")

    # One batch: the dead letter goes out as the record is read, the driver event after
    # the batch's table writes.
    assert sorted(name for name, _ in sent) == ["offline.dead-letters", "offline.driver-events"]
    letter = DeadLetter.model_validate_json(next(v for n, v in sent if n.endswith("letters")))
    assert "not valid UTF-8 JSON" in letter.reason and letter.offset == 1
    overview = chorus.folds["overview"].get("off/line")
    assert overview["offset"] == 0 and overview["state"]["participants"] == {"ann": 1}


def test_worker_settings_reach_faust() -> None:
    settings = Settings(
        store="memory://",
        bootstrap_servers="x:1",
        producer_linger_ms=7,
        producer_batch_bytes=65_536,
        standby_replicas=0,
    )
    conf = Chorus(settings, broker="127.0.0.1:1").app.conf
    assert conf.producer_linger == 0.007
    assert conf.producer_max_batch_size == 65_536
    assert conf.table_standby_replicas == 0

    # A produce batch must fit the smallest topic limit (max_message_bytes + 64 KiB).
    small = Settings(store="memory://", bootstrap_servers="x:1", max_message_bytes=25_000)
    assert Chorus(small, broker="127.0.0.1:1").app.conf.producer_max_batch_size == 25_000
