"""What `chorus summary`, `recap`, `state` and `channels` print for a person, from the
worker's answers: sentences, times to the second, plurals, partition offsets, and none of
the annotations chorus keeps for itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from projections.commitments import CommitmentProjection, expiry_event
from projections.model import Message, MessageType
from projections.overview import ChannelOverviewProjection
from projections.projection import dump_state
from streams.interfaces.cli.show import (
    channels_text,
    recap_text,
    spoken_duration,
    state_text,
    summary_text,
    topic_line,
)
from streams.topology import TopicSpec

T0 = datetime(2026, 12, 1, 9, 0, 5, tzinfo=UTC)


def said(n: int, kind: MessageType, sender: str, content: str, **fields: Any) -> Message:
    return Message(
        id=f"m{n}",
        channel="team/plan",
        sender=sender,
        type=kind,
        content=content,
        created_at=T0 + timedelta(seconds=n),
        **fields,
    )


def channel() -> list[Message]:
    due = T0 + timedelta(seconds=3)
    return [
        said(
            0,
            MessageType.COMMAND,
            "planner",
            "Write the docs",
            correlation_id="a",
            target="role:worker-a",
        ),
        said(
            1,
            MessageType.QUERY,
            "planner",
            "Which cache wins?",
            correlation_id="b",
            target="role:worker-b",
            deadline=due,
        ),
        said(2, MessageType.DONE, "worker-a", "Docs written", correlation_id="a", in_reply_to="m0"),
        said(3, MessageType.COMMAND, "planner", "Port the lexer", correlation_id="c"),
        expiry_event("team/plan", "b", T0 + timedelta(seconds=9)),
    ]


def state_view(config: dict[str, Any] | None = None) -> dict[str, Any]:
    folds: dict[str, Any] = {}
    for projection in (CommitmentProjection(), ChannelOverviewProjection()):
        state = projection.identity()
        for message in channel():
            state = projection.apply(state, message)  # type: ignore[attr-defined]
        folds[projection.name] = {
            "version": projection.version,
            "offset": 4,
            "state": dump_state(state),
        }
    folds["mine"] = {"version": 3, "offset": 4, "state": {"x": 1}}
    return {
        "channel": "team/plan",
        "decision": {
            "decision": "ESCALATE",
            "detail": "1 commitment expired (threshold: 0)",
            "offset": 4,
        },
        "projections": folds,
        "config": config,
    }


def test_state_says_where_the_channel_stands_in_sentences() -> None:
    text = state_text(state_view())
    lines = text.splitlines()
    assert lines[0] == (
        "Channel team/plan: ESCALATE (1 commitment expired (threshold: 0)). 5 messages; "
        "state as of partition offset 4, 2026-12-01 09:00:14 UTC."
    )
    assert "Participants (2, by messages): planner 3, worker-a 1." in lines
    assert "Commitments: 3 opened, 1 open, 2 ended (1 fulfilled, 1 expired)." in lines
    assert lines[lines.index("Open (1, newest first):") + 1] == (
        "- someone owes planner: “Port the lexer” (open since 2026-12-01 09:00:08 UTC)"
    )
    ended = lines.index("Ended (the last 2, most recent first):")
    assert lines[ended + 1].startswith("- expired: “Which cache wins?” (owed by worker-b")
    assert lines[ended + 2].startswith("- fulfilled: “Write the docs” (owed by worker-a")
    assert lines[-2] == (
        "Termination: all-commitments-resolved | fail-on-failure:0 | escalate-on-expiry:0 "
        "(the default)."
    )
    assert lines[-1] == "Other projections (their states with --json): mine v3."
    assert "{" not in text


def test_state_at_the_active_commitments_cap_says_what_it_did_not_track() -> None:
    view = state_view()
    commitments = view["projections"]["commitments"]["state"]
    commitments["untracked"] = 14_900
    lines = state_text(view).splitlines()
    assert "Commitments: 3 opened, 1 open, 2 ended (1 fulfilled, 1 expired)." in lines
    assert (
        "14,900 more requests were not tracked: the channel was at its cap of active "
        "commitments (CHORUS_COMMITMENTS_MAX_ACTIVE); none of them is listed here."
    ) in lines


def test_state_names_a_configured_termination() -> None:
    text = state_text(state_view({"termination": ["max-messages:3"]}))
    assert "Termination: max-messages:3." in text.splitlines()


def test_a_summary_says_what_it_covers_then_its_text_without_annotations() -> None:
    view = {
        "channel": "team/plan",
        "content": "Discussed:\n- [planner] asked worker-a: Write the docs\n\nOpen (1):\n- …",
        "annotations": {"tier": "digest", "digestTerms": "docs:3", "digestPool": "[]"},
        "total_messages": 1,
        "last_offset": 41,
        "updated_at": "2026-12-01T10:02:05.123456+00:00",
        "updated_by": "system:summariser",
    }
    text = summary_text(view)
    assert text.splitlines()[0] == (
        "Summary of team/plan (1 message through partition offset 41; "
        "updated 2026-12-01 10:02:05 UTC; tier digest):"
    )
    assert text.endswith(view["content"])
    assert "digestTerms" not in text and "digestPool" not in text
    by_hand = summary_text({**view, "updated_by": "user:cli", "total_messages": 2})
    assert "2 messages through partition offset 41" in by_hand and "set by user:cli" in by_hand
    assert summary_text({"channel": "team/plan", "content": None}) == (
        "No summary of team/plan yet."
    )


def test_a_summary_says_when_the_next_one_comes() -> None:
    none_yet = {"channel": "team/plan", "content": None}
    due = {"after_messages": 10, "after_seconds": 300.0, "pending": 3}
    assert summary_text({**none_yet, "next": due}) == (
        "No summary of team/plan yet. The first comes after 7 more messages (3 of 10 so far) "
        "or 5 min after the first of them, whichever is first."
    )
    written = {**none_yet, "content": "Said.", "total_messages": 10}
    assert summary_text({**written, "next": {**due, "pending": 0}}).splitlines()[-1] == (
        "The next comes once 10 more messages arrive, or 5 min after the first of them."
    )
    assert summary_text({**written, "next": {**due, "pending": 12}}).splitlines()[-1] == (
        "The next is due now: 12 messages are waiting for it."
    )
    # Without a worker: the thresholds only, as this command's settings have them.
    assert summary_text({**none_yet, "next": {**due, "pending": None}}) == (
        "No summary of team/plan yet. The first comes after 10 messages or 5 min after the "
        "first of them, whichever is first (the defaults; the channel's config may change them)."
    )


def test_a_topic_is_said_in_words() -> None:
    kept = TopicSpec("chorus.messages", 4, 1, {"cleanup.policy": "delete", "retention.ms": "-1"})
    assert topic_line(kept, created=True) == "chorus.messages: created; 4 partitions, kept forever"
    week = TopicSpec(
        "chorus.driver-events",
        4,
        1,
        {"cleanup.policy": "delete", "retention.ms": "604800000", "max.message.bytes": "1114112"},
    )
    assert topic_line(week, created=False) == (
        "chorus.driver-events: already there; 4 partitions, kept 7 days, "
        "records up to 1,114,112 bytes"
    )
    latest = TopicSpec("chorus.recaps", 1, 3, {"cleanup.policy": "compact"})
    assert topic_line(latest, created=True) == (
        "chorus.recaps: created; 1 partition, 3 replicas, compacted (the latest record of "
        "each channel is kept)"
    )
    assert [spoken_duration(s) for s in (5, 90, 300, 5400, 7200, 86400)] == [
        "5 s",
        "90 s",
        "5 min",
        "90 min",
        "2 h",
        "1 day",
    ]


def test_a_recap_says_when_the_next_is_due_and_when_the_latest_was_written() -> None:
    record = {
        "generated_at": "2026-12-01T10:02:05+00:00",
        "tier": "extractive",
        "covered_offset": 41,
        "error": None,
    }
    view = {
        "channel": "team/plan",
        "phase": "PENDING",
        "label": "3s",
        "title": "lexer port",
        "text": "Goal (planner): port the lexer.",
        "recap": record,
        "decision": {"decision": "CONTINUE", "detail": None},
    }
    assert recap_text(view).splitlines() == [
        "Recap of team/plan, “lexer port”: the next is due in 3s of quiet.",
        "Decision: CONTINUE.",
        "Latest recap (2026-12-01 10:02:05 UTC, tier extractive, at partition offset 41):",
        "Goal (planner): port the lexer.",
    ]
    failed = {**view, "phase": "ERROR", "recap": {**record, "error": "model timed out"}}
    assert recap_text(failed).splitlines()[0].endswith(": failed: model timed out.")
    # From chorus.recaps without a worker: no countdown, no title, no decision.
    assert recap_text({"channel": "team/plan", "phase": "IDLE", "text": None}).splitlines() == [
        "Recap of team/plan: idle.",
        "No recap yet.",
    ]


def test_channels_are_listed_one_a_line_with_their_decision() -> None:
    decisions = {
        "team/plan": {"decision": "ESCALATE", "detail": "1 commitment expired (threshold: 0)"},
        "a/b": {"decision": "CONTINUE", "detail": None},
    }
    assert channels_text(decisions).splitlines() == [
        "a/b        CONTINUE",
        "team/plan  ESCALATE (1 commitment expired (threshold: 0))",
    ]
    assert channels_text({}) == "No channels folded yet."
