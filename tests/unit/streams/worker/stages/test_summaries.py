"""The summary stage's pure parts: what reaches a summariser and the record's narrative."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from projections.model import Message, MessageType
from projections.summarise import SummaryResult
from projections.summarise.pending import PendingBatch, PendingItem
from streams.records import SummaryRecord
from streams.worker.stages.summaries import summarise_batch
from tests.factories import numbered

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)


class Recording:
    """A summariser that says what it was given."""

    tier = "recording"

    def __init__(self) -> None:
        self.seen: list[Message] = []

    async def summarise(
        self, items: list[Message], previous: SummaryResult | None = None
    ) -> SummaryResult:
        self.seen.extend(items)
        said = " | ".join(m.content or m.type.value for m in items)
        return SummaryResult(f"{previous.text} | {said}" if previous else said)


def chat(n: int, kind: MessageType = MessageType.STATUS, **fields: object) -> Message:
    return numbered(n, kind, start=T0, every=timedelta(minutes=1), **fields)


async def test_a_request_reaches_a_summariser_as_history() -> None:
    ask = chat(
        0, MessageType.COMMAND, content="Port the lexer", correlation_id="c1", target="role:w"
    )
    recording = Recording()
    batch = PendingBatch(items=[PendingItem(offset=0), PendingItem(offset=1)])
    record = await summarise_batch(recording, "team/plan", batch, [ask, chat(1)], None)
    assert [m.content for m in recording.seen] == ["asked w: Port the lexer", "note 1"]
    assert record.narrative == record.text == "asked w: Port the lexer | note 1"


async def test_the_next_batch_builds_on_the_narrative_not_the_state_part() -> None:
    recording = Recording()
    previous = SummaryRecord(
        channel="team/plan",
        text="earlier\n\nOpen (1):\n- w owes planner: “Port the lexer”",
        narrative="earlier",
        last_offset=0,
    )
    batch = PendingBatch(items=[PendingItem(offset=1)])
    record = await summarise_batch(recording, "team/plan", batch, [chat(1)], previous)
    assert record.narrative == "earlier | note 1"
