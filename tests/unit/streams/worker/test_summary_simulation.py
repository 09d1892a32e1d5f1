"""The summaries stage offline: the stage's own batching and records, no Kafka."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from projections.model import Message, MessageType
from streams.settings import Settings
from streams.worker.summary_simulation import simulate
from tests.factories import numbered

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)


def chat(n: int, kind: MessageType = MessageType.STATUS, **fields: object) -> Message:
    return numbered(n, kind, start=T0, every=timedelta(seconds=1), **fields)


async def test_simulate_gives_the_records_the_stage_publishes_narrative_only() -> None:
    """Whether a request is open and how it ended is the fold's to say (rendered when a view
    is read): a record, offline as on the topic, tells what was asked as history only."""
    ask = chat(
        0, MessageType.COMMAND, content="Port the lexer", correlation_id="c1", target="role:w"
    )
    declined = chat(
        1, MessageType.DECLINE, sender="w", content="No", correlation_id="c1", in_reply_to="m0"
    )
    records = await simulate([ask, declined, chat(2)], Settings(summary_after_messages=3))
    record = records["team/plan"]
    assert record.text == record.narrative and record.state_offset is None
    assert (record.first_offset, record.last_offset, record.total_messages) == (0, 2, 3)
    assert "[planner] asked w: Port the lexer" in record.text and "Open (" not in record.text
    assert "declined" not in record.text.lower()


async def test_simulate_follows_the_settings_thresholds() -> None:
    messages = [chat(n) for n in range(45)]  # a second apart: none falls due by time
    records = await simulate(messages, Settings(summary_after_messages=10))
    assert records["team/plan"].first_offset == 40
    records = await simulate(messages, Settings(summary_after_messages=50))
    assert records["team/plan"].first_offset == 0  # one batch, due at the end
