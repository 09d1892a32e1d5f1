"""projections.summarise.render: how a message reads in a summary or a prompt."""

from __future__ import annotations

from projections.model import MessageType
from projections.summarise import (
    render_message,
)
from tests.unit.projections.summarise.support import msg


def test_render_message() -> None:
    assert render_message(msg("alice", "Let's use Redis")) == "[alice] Let's use Redis"
    event = msg("ci", None, type=MessageType.EVENT, payload={"kind": "build.passed"})
    assert render_message(event) == "[ci] event build.passed"
    assert render_message(msg("ci", None, type=MessageType.EVENT)) == "[ci] event"
    # A message without words reads as what it did, never as a bare type tag.
    assert render_message(msg("bob", None)) == "[bob] gave a status update"
    done = msg("bob", " ", type=MessageType.DONE, correlation_id="c1")
    assert render_message(done) == "[bob] reported it done"
