"""Recaps and titles on real meetings and on the shipped multi-agent scenario: properties a
person would check (length, no ids, titles not the first message nor filler)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from projections.commitments import CommitmentProjection, expiry_event
from projections.model import Message
from projections.projection import fold
from projections.readable import commitment_views
from projections.recap import extractive_recap, with_recap_state
from projections.recap.title import channel_keyphrases, channel_title
from projections.text.words import is_backchannel
from streams.conversations import as_messages, qmsum_meetings, shared_data_dir
from streams.interfaces.demo import scenario_messages
from streams.worker.stages.recaps import ChannelRecap, windowed_message, with_message

NOW = datetime(2026, 1, 1, tzinfo=UTC)
IDS = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b")


def stage(messages: list[Message]) -> ChannelRecap:
    recap = ChannelRecap()
    for offset, message in enumerate(messages):
        recap = with_message(recap, message, offset, 30, NOW)
    return recap


def recap_of(
    messages: list[Message], summary: str | None = None
) -> tuple[ChannelRecap, str | None, str, str]:
    """The stage's record, the channel's title, the recap as the stage writes it when a
    recap is due (from the summary and the window), and as a view shows it (with the state
    part rendered from the fold after every message)."""
    recap = stage(messages)
    window = [windowed_message(messages[offset]) for offset in recap.window_offsets]
    text = extractive_recap(window, channel_keyphrases(window, summary), summary)
    state = fold(CommitmentProjection(), messages).model_dump(mode="json")
    shown = with_recap_state(text, commitment_views(state))
    return recap, channel_title(window, recap.opening, summary), text, shown


def meetings() -> list[list[Message]]:
    root = shared_data_dir()
    if root is None or not (root / "qmsum").is_dir():
        pytest.skip("no QMSum meetings in ../shared/data")
    found = [m for m in qmsum_meetings(root) if "val" in m.source][:12]
    return [as_messages(meeting, "demo/meeting") for meeting in found]


def test_meeting_recaps_and_titles_read_as_a_person_would_write_them() -> None:
    for messages in meetings():
        lead = " ".join(m.content or "" for m in messages)[:2000]
        _, title, text, _ = recap_of(messages, summary=lead)
        assert 40 <= len(text.split()) <= 80, text
        assert not IDS.search(text), text
        assert "Hmm hmm" not in text and "I think so, yeah" not in text
        assert title is not None and 0 < len(title) <= 60
        assert title != messages[0].content and not is_backchannel(title), title


def test_the_scenario_recap_names_the_goal_the_open_work_and_who_owes_it() -> None:
    start = datetime(2026, 3, 2, 9, tzinfo=UTC)
    messages = scenario_messages(start, rate=1.0)
    bench = next(m for m in messages if m.deadline is not None)
    expired = expiry_event(bench.channel, str(bench.correlation_id), bench.deadline)  # type: ignore[arg-type]
    at_expiry = sum(m.created_at <= expired.created_at for m in messages)
    timeline = [*messages[:at_expiry], expired, *messages[at_expiry:]]
    _, title, text, shown = recap_of(timeline)
    assert len(text.split()) <= 80 and "Done: worker-a" in text, text
    assert not IDS.search(shown), shown
    assert "Goal: Fix the sample service config" in shown and "(asked by planner)" in shown
    assert "Open: worker-a owes planner the goal." in shown and "Done: worker-a" in shown
    assert 40 <= len(shown.split()) <= 130, shown
    assert title is not None and len(title) <= 60
    assert title != messages[0].content
    assert re.search(r"guide|config|release|pull request", title, re.IGNORECASE)
    assert timedelta(0) < bench.deadline - bench.created_at  # type: ignore[operator]
