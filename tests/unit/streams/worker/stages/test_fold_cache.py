"""The fold step with states kept in memory gives exactly what re-loading them gives."""

from typing import Any

import orjson

from projections.channel import step
from projections.projection import Folded
from streams.records import DriverEvent, ProjectionChange
from streams.registry import registered_projections
from tests.factories import conversation


def test_in_memory_states_fold_like_reloaded_ones() -> None:
    projections = registered_projections([])
    reloaded: dict[str, Folded | None] = {}
    cached: dict[str, Folded | None] = {}
    states: dict[str, Any] = {}
    for offset, message in enumerate(conversation(["a"], 300, seed=5)):
        plain = step(projections, reloaded, message, offset)
        fast = step(projections, cached, message, offset, states)
        for slow, quick in zip(plain, fast, strict=True):
            assert slow.folded == quick.folded and slow.state == quick.state
            reloaded[slow.projection.name] = slow.folded
            cached[quick.projection.name] = quick.folded
            states[quick.projection.name] = quick.state
            assert Folded.model_validate(quick.folded.as_record()) == quick.folded


def test_driver_event_bytes_match_the_schema() -> None:
    event = DriverEvent(
        source="channel:a",
        channel="a",
        message_id="m",
        partition=1,
        offset=2,
        projections={"p": ProjectionChange(version=1, changes={"k": [2]}, live={"k": [1, 2]})},
        decision={"decision": "CONTINUE"},
        errors={"q": "ValueError: no"},
    )
    assert DriverEvent.model_validate(orjson.loads(event.to_bytes())) == event
    assert orjson.loads(event.to_bytes())["event_version"] == 3
