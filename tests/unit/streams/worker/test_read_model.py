"""The worker's read model without a worker: what the state, summary, recap and context
views answer from the fold and the latest records, the budget and channel-name rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

import pytest

from projections.channel import ChannelStanding, standing, step
from projections.commitments import CommitmentProjection
from projections.context import DEFAULT_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS, budget_refusal
from projections.model import Message, MessageType
from projections.overview import ChannelOverviewProjection
from projections.projection import Folded
from projections.recap import RecapPhase
from projections.termination import parse_conditions
from streams.memory import ByteCache
from streams.records import RecapRecord, SummaryRecord
from streams.worker.followed import Current, Latest
from streams.worker.read_model import (
    TITLE_BYTES,
    Titles,
    UnknownChannel,
    channel_context,
    context_budget,
    recap_answer,
    state_answer,
    summary_answer,
)
from streams.worker.stages.recent import Recent

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)
PROJECTIONS: list[Any] = [CommitmentProjection(), ChannelOverviewProjection()]


class FakeRuntime:
    """The part of `Runtime` the read model uses, over folds made by the shared step."""

    def __init__(self, messages: list[Message]) -> None:
        stored: dict[str, Folded | None] = {}
        for offset, message in enumerate(messages):
            stored = {
                s.projection.name: s.folded for s in step(PROJECTIONS, stored, message, offset)
            }
        self.stored = stored
        self.configs = SimpleNamespace(get=lambda channel: None)

    def folds_of(self, channel: str) -> dict[str, Folded | None]:
        return dict(self.stored) if channel == "team/plan" else {}

    def standing(self, channel: str) -> ChannelStanding | None:
        if channel != "team/plan":
            return None
        return standing(PROJECTIONS, self.stored, parse_conditions([]))


def conversation() -> list[Message]:
    ask = Message(
        id="m0",
        channel="team/plan",
        sender="planner",
        type=MessageType.COMMAND,
        content="Run the load test",
        correlation_id="c1",
        target="role:worker",
        created_at=T0,
    )
    failed = Message(
        id="m1",
        channel="team/plan",
        sender="worker",
        type=MessageType.FAILURE,
        content="The cluster is down",
        correlation_id="c1",
        in_reply_to="m0",
        created_at=T0 + timedelta(minutes=1),
    )
    return [ask, failed]


def test_the_state_view_carries_the_decision_and_every_fold() -> None:
    found = state_answer(FakeRuntime(conversation()), "team/plan")  # type: ignore[arg-type]
    assert found is not None
    assert found["decision"] == {
        "decision": "FAILED",
        "detail": "1 commitment failed (threshold: 0)",
        "offset": 1,
    }
    assert set(found["projections"]) == {"commitments", "overview"}
    assert found["projections"]["commitments"]["offset"] == 1
    assert state_answer(FakeRuntime([]), "nobody/here") is None  # type: ignore[arg-type]


def test_the_budget_rule() -> None:
    assert context_budget(None) == DEFAULT_CONTEXT_TOKENS and context_budget("0") == 0
    assert context_budget(str(MAX_CONTEXT_TOKENS)) == MAX_CONTEXT_TOKENS
    for bad in (-1, MAX_CONTEXT_TOKENS + 1):
        with pytest.raises(ValueError) as raised:
            context_budget(str(bad))
        assert str(raised.value) == budget_refusal(bad)
    with pytest.raises(ValueError, match="max_tokens must be an integer, got 'many'"):
        context_budget("many")


def test_an_unknown_channel_says_so() -> None:
    assert str(UnknownChannel("a/b")) == "no messages folded for channel 'a/b'"


# --- the views' answers from what this process holds -------------------------------------


def expired_request() -> list[Message]:
    """A request with a deadline, and the expiry the timer wrote into the log."""
    from projections.commitments import expiry_event

    ask = Message(
        id="m0",
        channel="team/plan",
        sender="planner",
        type=MessageType.QUERY,
        content="Who can review the release notes?",
        correlation_id="c1",
        target="role:reviewer",
        deadline=T0 + timedelta(minutes=5),
        created_at=T0,
    )
    return [ask, expiry_event("team/plan", "c1", T0 + timedelta(minutes=6))]


def standing_of(messages: list[Message]) -> ChannelStanding:
    found = FakeRuntime(messages).standing("team/plan")
    assert found is not None
    return found


def latest_of(record: Any, offset: int | None = 3) -> Latest[Any]:
    return Latest(record, Current("t.recaps", 1, offset, False))


def test_a_recap_written_while_a_request_was_open_says_it_expired_once_it_did() -> None:
    """Issue 31: a recap written before the expiry kept saying "Open: reviewer owes
    planner …. Next: reviewer to deliver …" beside a state that said EXPIRED."""
    written = RecapRecord(
        channel="team/plan",
        text="The channel is about release notes.",
        narrative="The channel is about release notes.",
        phase=RecapPhase.COMPLETED,
        covered_offset=0,
        model="tiny",
    )
    messages = expired_request()
    before = recap_answer(
        "team/plan",
        standing_of(messages[:1]),
        latest_of(written),
        Recent([], (0, 1_000), 1_000),
        title="Release notes",
        debounce=5,
        model="extractive",
        now=T0,
    )
    # A question, owed an answer (issue 42): "Open: planner asked reviewer “…”, no answer yet".
    assert "Open: planner asked reviewer “" in before["text"]
    assert "no answer yet" in before["text"]
    after = recap_answer(
        "team/plan",
        standing_of(messages),
        latest_of(written),
        Recent([], (0, 1_000), 1_000),
        title="Release notes",
        debounce=5,
        model="extractive",
        now=T0,
    )
    text = after["text"]
    assert "owes" not in text and "no answer yet" not in text, text
    assert "(expired)" in text and "Nothing is open (1 expired)." in text
    assert text.count("The channel is about release notes.") == 1
    assert after["decision"]["decision"] == "ESCALATE" and after["model"] == "tiny"
    assert after["phase"] == "COMPLETED" and after["label"] == "done"
    assert after["current_at"] == {
        "topic": "t.recaps",
        "partition": 1,
        "read_through": 3,
        "restoring": False,
    }


def test_the_recap_phase_is_pending_once_the_conversation_moved_past_the_latest_recap() -> None:
    at_ms = int(T0.timestamp() * 1000)
    written = RecapRecord(
        channel="team/plan", text="t", narrative="t", phase=RecapPhase.COMPLETED, covered_offset=0
    )
    found = recap_answer(
        "team/plan",
        standing_of(conversation()),
        latest_of(written),
        Recent([], (1, at_ms), at_ms),
        title=None,
        debounce=30,
        model="extractive",
        now=T0 + timedelta(seconds=10),
    )
    assert found["phase"] == "PENDING" and found["label"] == "20s"
    assert found["activity"] == "idle" and found["message_count"] == 2
    nothing = recap_answer(
        "team/plan",
        standing_of(conversation()),
        latest_of(None, None),
        Recent([]),
        title=None,
        debounce=30,
        model="extractive",
        now=T0,
    )
    assert nothing["phase"] == "IDLE" and nothing["text"] is None and nothing["recap"] is None
    # A record written before recaps were narratives shows only the state part now.
    old = RecapRecord(
        channel="team/plan", text="Open: worker owes planner …", phase=RecapPhase.COMPLETED
    )
    shown = recap_answer(
        "team/plan",
        standing_of(conversation()),
        latest_of(old),
        Recent([]),
        title=None,
        debounce=30,
        model="extractive",
        now=T0,
    )
    assert "owes" not in shown["text"] and "(failed)" in shown["text"]


def test_the_summary_view_renders_the_state_part_from_the_fold_now() -> None:
    record = SummaryRecord(channel="team/plan", text="What was said.", narrative="What was said.")
    runtime = FakeRuntime(conversation())
    found = summary_answer(
        "team/plan",
        runtime.folds_of("team/plan").get("commitments"),
        Latest(record, Current("t.summaries", 1, 9, False)),
    )
    assert found["content"].startswith("What was said.\n\nEnded (the last 1")
    assert "failed: “Run the load test”" in found["content"]
    assert found["narrative"] == "What was said." and found["state_offset"] == 1
    assert found["current_at"]["read_through"] == 9
    none = summary_answer("team/plan", None, Latest(None, Current("t.summaries", 1, None, True)))
    assert none["content"] is None and none["current_at"]["restoring"] is True


def test_a_context_takes_the_standing_it_is_given_and_the_narratives_only() -> None:
    summary = SummaryRecord(
        channel="team/plan",
        text="Earlier: the cluster was slow.\n\nOpen (1):\n- worker owes planner: “Run …”",
        narrative="Earlier: the cluster was slow.",
        first_offset=0,
        last_offset=0,
    )
    recap = RecapRecord(
        channel="team/plan",
        text="The channel is about load tests.",
        narrative="The channel is about load tests.",
        phase=RecapPhase.COMPLETED,
        covered_offset=1,
    )
    found = channel_context(
        standing_of(conversation()),
        summary,
        recap,
        Recent(
            [(1, conversation()[1])],
        ),
        "team/plan",
        2000,
    )
    assert "Earlier: the cluster was slow." in found.text
    assert "Open (1):" not in found.text  # the record's old state part is never shown
    assert "The channel is about load tests." in found.text
    assert found.parts["header"]["decision"]["decision"] == "FAILED"


def test_titles_are_read_again_only_when_the_window_or_summary_changed_and_are_bounded() -> None:
    said = Message(channel="team/plan", sender="ann", type=MessageType.STATUS, content="Lunch?")
    kept = ByteCache[Any, Any]("titles", 2 * TITLE_BYTES)
    titles = Titles(kept)
    window = Recent([(0, said)])
    with patch("streams.worker.read_model.channel_title", return_value="Lunch") as read:
        assert titles.of("a/1", 0, window, None, None) == "Lunch"
        assert titles.of("a/1", 0, window, None, None) == "Lunch"
        assert read.call_count == 1
        titles.of("a/2", 1, window, None, None)
        titles.of("a/3", 2, window, None, None)
    assert kept.keys() == ["a/2", "a/3"]
    assert titles.of("b/1", 3, Recent([]), None, "From the recap") == "From the recap"
