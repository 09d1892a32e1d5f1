"""The budgeted agent context (v2): never over budget, the header and the open commitments
first, every line that names a commitment says its status as the fold holds it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.commitments import CommitmentProjection, CommitmentsState, expiry_event
from projections.context import (
    MAX_CONTEXT_TOKENS,
    TRUNCATED,
    ChannelContext,
    ChannelHeader,
    RecapPart,
    RecentMessage,
    SummaryPart,
    assemble_context,
    budget_refusal,
)
from projections.model import Message, MessageType
from projections.readable import OUTCOME_WORDS, CommitmentView, commitment_views
from projections.summarise import default_summariser, estimate_tokens
from projections.summarise.pending import as_narrated, summarisable
from projections.text.lines import is_balanced
from tests.context_checks import contradictions as text_contradictions
from tests.context_checks import ended_outcomes

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)
PROJECTION = CommitmentProjection()


def message(
    index: int,
    kind: MessageType,
    cid: str | None = None,
    *,
    sender: str = "planner",
    target: str | None = None,
    content: str | None = "",
    reply_to: str | None = None,
    deadline: datetime | None = None,
) -> Message:
    text = content if content != "" else f"message {index} about the parser"
    return Message(
        id=f"m{index:04d}",
        channel="team/plan",
        sender=sender,
        type=kind,
        content=text,
        correlation_id=cid,
        in_reply_to=reply_to,
        target=target,
        deadline=deadline,
        created_at=T0 + timedelta(minutes=index),
    )


def scripted() -> list[Message]:
    """Known outcomes: fulfilled, declined, failed, expired, handed off and still open,
    asked and still open."""
    due = T0 + timedelta(minutes=5)
    return [
        message(
            0, MessageType.COMMAND, "c-ok", target="role:worker-a", content="Write the user docs"
        ),
        message(
            1, MessageType.COMMAND, "c-no", target="role:worker-b", content="Port the lexer to Rust"
        ),
        message(
            2, MessageType.COMMAND, "c-fail", target="role:worker-a", content="Run the load test"
        ),
        message(
            3,
            MessageType.QUERY,
            "c-late",
            target="role:worker-b",
            content="Which cache wins",
            deadline=due,
        ),
        message(
            4, MessageType.COMMAND, "c-hand", target="role:worker-a", content="Review the grammar"
        ),
        message(
            5, MessageType.QUERY, "c-open", target="role:reviewer", content="Is the API frozen"
        ),
        message(
            6, MessageType.DONE, "c-ok", sender="worker-a", reply_to="m0000", content="Docs written"
        ),
        message(
            7,
            MessageType.DECLINE,
            "c-no",
            sender="worker-b",
            reply_to="m0001",
            content="No Rust here",
        ),
        message(
            8,
            MessageType.FAILURE,
            "c-fail",
            sender="worker-a",
            reply_to="m0002",
            content="Cluster down",
        ),
        message(
            9,
            MessageType.HANDOFF,
            "c-hand",
            sender="worker-a",
            reply_to="m0004",
            target="role:worker-b",
            content="Over to you",
        ),
        expiry_event("team/plan", "c-late", T0 + timedelta(minutes=10)),
    ]


def fold(messages: Sequence[Message]) -> CommitmentsState:
    state = PROJECTION.identity()
    for one in messages:
        state = PROJECTION.apply(state, one)
    return state


def recent(messages: Sequence[Message]) -> list[RecentMessage]:
    return [
        RecentMessage.of(m, offset)
        for offset, m in enumerate(messages)
        if m.type is not MessageType.EVENT
    ]


def header(offset: int = 10, decision: str = "ESCALATE") -> ChannelHeader:
    return ChannelHeader(
        channel="team/plan",
        decision={
            "decision": decision,
            "detail": "1 commitment expired (threshold: 0)",
            "offset": offset,
        },
        offset=offset,
        at=T0 + timedelta(minutes=offset),
        message_count=offset + 1,
    )


SUMMARY = SummaryPart(
    "Participants: planner, worker-a\nDiscussed:\n- [worker-a] Docs written.", 0, 6
)
RECAP = RecapPart("Goal: finish the parser. Next: worker-b to review the grammar.", 10)


def context(max_tokens: int, **overrides: object) -> ChannelContext:
    messages = scripted()
    parts: dict[str, object] = {
        "header": header(),
        "commitments": commitment_views(fold(messages)),
        "summary": SUMMARY,
        "recap": RECAP,
        "messages": recent(messages),
    }
    parts.update(overrides)
    return assemble_context(max_tokens, **parts)  # type: ignore[arg-type]


def contradictions(found: ChannelContext, views: Sequence[CommitmentView]) -> list[str]:
    return text_contradictions(found.text, views)


def test_a_budget_is_refused_below_0_and_above_the_maximum_in_one_line() -> None:
    assert budget_refusal(0) is None and budget_refusal(MAX_CONTEXT_TOKENS) is None
    assert budget_refusal(-1) == f"max_tokens must be between 0 and {MAX_CONTEXT_TOKENS}, got -1"
    assert budget_refusal(MAX_CONTEXT_TOKENS + 1) == (
        f"max_tokens must be between 0 and {MAX_CONTEXT_TOKENS}, got {MAX_CONTEXT_TOKENS + 1}"
    )


def test_a_large_budget_shows_every_part_in_the_order_a_late_agent_needs() -> None:
    found = context(10_000)
    text = found.text
    order = [
        "Channel team/plan: ESCALATE (1 commitment expired",
        "Open commitments (2, newest first):",
        "Ended without being fulfilled (4, most recent first; 1 fulfilled):",
        "Messages after partition offset 6 (3 of 3, oldest first):",
        "Summary of what was said (through partition offset 6):",
        "Recap (at partition offset 10):",
        "Fulfilled (1, most recent first):",
        "Earlier messages, through partition offset 6 (7 of 7, oldest first):",
    ]
    positions = [text.index(heading) for heading in order]
    assert positions == sorted(positions)
    assert "reviewer owes planner an answer: “Is the API frozen” (open since" in text
    assert "worker-b owes planner: “Review the grammar” (open since" in text
    assert "declined: “Port the lexer to Rust” (owed by worker-b to planner" in text
    assert "failed: “Run the load test”" in text and "expired: “Which cache wins”" in text
    assert "delegated to worker-b: “Review the grammar”" in text
    assert TRUNCATED not in text and found.tokens <= 10_000
    assert (
        found.decision["decision"] == "ESCALATE" and found.as_json()["decision"] == found.decision
    )
    assert contradictions(found, commitment_views(fold(scripted()))) == []


def test_the_header_states_the_decision_offset_time_and_count() -> None:
    line = context(10_000).text.splitlines()[0]
    assert line == (
        "Channel team/plan: ESCALATE (1 commitment expired (threshold: 0)). "
        "11 messages; state as of partition offset 10, 2026-03-02 09:10:00 UTC."
    )
    one = ChannelHeader("team/a", {"decision": "CONTINUE"}, 0, None, 1)
    assert one.line() == "Channel team/a: CONTINUE. 1 message; state as of partition offset 0."


def test_messages_that_name_a_commitment_say_its_status_now() -> None:
    text = context(10_000, summary=None).text
    assert "planner (COMMAND → worker-b): Port the lexer to Rust [commitment declined]" in text
    assert "worker-a (HANDOFF → worker-b): Over to you [commitment open]" in text
    assert "planner (QUERY → reviewer): Is the API frozen [commitment open]" in text


def test_a_tight_budget_keeps_the_header_and_the_newest_open_commitments() -> None:
    whole = context(10_000)
    header_only = estimate_tokens(whole.text.split("\n\n")[0])
    found = context(header_only + 40)
    assert found.text.startswith("Channel team/plan: ESCALATE")
    part = found.parts["commitments"]
    assert part["total"] == 2 and len(part["shown"]) == 1 and part["omitted"] == 1
    # The newest (the hand-off's new commitment) is not starved by the older one.
    assert part["shown"][0]["correlation_id"] == "c-hand"
    assert "- … and 1 more [truncated]" in found.text
    assert found.parts["ended"]["shown"] == [] and found.parts["summary"]["text"] is None
    assert found.tokens <= header_only + 40


def test_every_open_commitment_is_named_from_400_tokens_and_the_ended_at_1500() -> None:
    views = commitment_views(fold(scripted()))
    assert any(v.is_open for v in views)
    for budget in (150, 400, 1500):
        found = context(budget)
        assert found.tokens <= budget
        assert contradictions(found, views) == []
        if budget >= 400:
            assert all(v.asked in found.text for v in views if v.is_open)
        if budget >= 1500:
            for asked, outcomes in ended_outcomes(views).items():
                for outcome in outcomes - {"fulfilled", "delegated"}:
                    assert f"{outcome}: “{asked}”" in found.text
                if "delegated" in outcomes:
                    assert f"delegated to worker-b: “{asked}”" in found.text


def test_only_messages_after_the_summary_are_shown() -> None:
    found = context(10_000)
    offsets = [m["offset"] for m in found.parts["messages"]["shown"]]
    assert offsets and min(offsets) > SUMMARY.last_offset  # type: ignore[operator]
    assert found.parts["messages"]["after_offset"] == 6


def test_a_recap_written_before_the_last_fold_or_not_newer_than_the_summary_is_left_out() -> None:
    assert context(10_000).parts["recap"]["covered_offset"] == 10
    assert context(10_000, recap=RecapPart("Nothing is open.", 9)).parts["recap"] is None
    old = SummaryPart("Discussed.", 0, 10)
    assert context(10_000, recap=RecapPart("Recap.", 10), summary=old).parts["recap"] is None
    assert "Nothing is open" not in context(10_000, recap=RecapPart("Nothing is open.", 9)).text


def test_a_context_for_an_agent_puts_what_it_owes_and_is_owed_first() -> None:
    found = context(10_000, for_agent="worker-b")
    text = found.text
    assert text.index("Yours, worker-b (1 open") < text.index("Open commitments (1 more")
    assert "worker-b owes planner: “Review the grammar”" in text.split("Open commitments")[0]
    assert "Messages to worker-b (" in text
    ended = found.parts["ended"]["shown"]
    # Those worker-b owed or was handed come first.
    assert {e["correlation_id"] for e in ended[:3]} == {"c-no", "c-late", "c-hand"}
    assert found.as_json()["for_agent"] == "worker-b"


def test_a_young_channel_without_summary_gets_its_messages() -> None:
    messages = [message(0, MessageType.STATUS), message(1, MessageType.STATUS)]
    found = assemble_context(
        400, header=header(1, "CONTINUE"), commitments=[], messages=recent(messages)
    )
    assert "Recent messages (2 of 2, oldest first):" in found.text
    assert found.parts["summary"] is None and found.parts["recap"] is None


def test_a_newest_message_too_long_for_the_budget_is_cut_and_marked() -> None:
    long = recent([message(0, MessageType.STATUS, content="word " * 400)])
    head = estimate_tokens(header(0, "CONTINUE").line())
    found = assemble_context(head + 40, header=header(0, "CONTINUE"), commitments=[], messages=long)
    assert found.parts["messages"]["truncated"] is True and found.text.endswith(TRUNCATED)
    assert found.tokens <= head + 40


def test_a_larger_budget_shows_more_while_there_is_more() -> None:
    # The summary covers every message: what a larger budget adds is more of the narrative,
    # what was fulfilled and the recent messages the summary condenses.
    covering = SummaryPart(narrative(scripted()), 0, 10)
    used = [context(budget, summary=covering, recap=None).tokens for budget in (150, 300, 450)]
    assert used == sorted(set(used))
    whole = context(5000, summary=covering, recap=None)
    assert whole.tokens > used[-1] and TRUNCATED not in whole.text
    assert "[planner] Asked worker-b: Port the lexer to Rust" in whole.parts["summary"]["text"]
    assert "fulfilled: “Write the user docs”" in whole.text
    assert whole.parts["earlier"]["total"] == 10 and whole.parts["earlier"]["omitted"] == 0
    assert "Earlier messages, through partition offset 10 (10 of 10, oldest first):" in whole.text
    assert context(5000, summary=covering, recap=None, messages=[]).parts["earlier"]["total"] == 0


def test_a_narrative_is_shown_without_blank_lines_or_bare_type_tags() -> None:
    old = SummaryPart("- [planner] COMMAND\n\n- [w] on it\n- [planner] QUERY\n\n- [w] done", 0, 6)
    shown = context(10_000, summary=old).parts["summary"]["text"]
    assert shown == "- [w] on it\n- [w] done"


def test_the_answer_says_the_smallest_budget_that_shows_the_header_whole() -> None:
    found = context(5)
    assert found.as_json()["min_tokens"] == estimate_tokens(header().line()) > 5
    assert estimate_tokens(context(found.min_tokens).text) == found.min_tokens
    assert context(found.min_tokens).text == header().line()


def test_zero_budget_is_empty_and_negative_is_refused() -> None:
    assert context(0).text == ""
    try:
        context(-1)
    except ValueError as error:
        assert "max_tokens" in str(error)
    else:
        raise AssertionError("a negative budget must be refused")


# --------------------------------------------------------------------------- property

REPLIES = [
    MessageType.STATUS,
    MessageType.DONE,
    MessageType.RESPONSE,
    MessageType.DECLINE,
    MessageType.FAILURE,
    MessageType.HANDOFF,
    MessageType.QUERY,
]
steps = st.lists(
    st.tuples(
        st.sampled_from(["ask", "reply", "expire", "chat", "summary"]),
        st.integers(0, 5),
        st.sampled_from(REPLIES),
    ),
    min_size=1,
    max_size=40,
)


def play(plan: list[tuple[str, int, MessageType]]) -> tuple[list[Message], SummaryPart | None]:
    """A channel from a random plan: requests (each a distinct ask), replies to them of any
    kind, expiries, chatter; a summary cut at random points (its narrative, as the stage
    writes it and the context shows it) covers the log up to there."""
    log: list[Message] = []
    summary: SummaryPart | None = None
    asked = 0
    for kind, which, reply in plan:
        at = T0 + timedelta(minutes=len(log))
        index = len(log)
        cid = f"c{which}"
        if kind == "ask":
            asked += 1
            log.append(
                message(
                    index,
                    MessageType.COMMAND,
                    cid,
                    target=f"role:w{which}",
                    content=f"task {asked} zeta{asked}q",
                    deadline=at + timedelta(minutes=3),
                )
            )
        elif kind == "reply":
            if reply is MessageType.QUERY:
                reply = MessageType.RESPONSE
            content = "on it" if reply is not MessageType.HANDOFF else "passing it on"
            log.append(
                message(
                    index,
                    reply,
                    cid,
                    sender=f"w{which}",
                    reply_to="m0000",
                    target="role:w9" if reply is MessageType.HANDOFF else None,
                    content=content,
                )
            )
        elif kind == "expire":
            log.append(expiry_event("team/plan", cid, at + timedelta(minutes=5)))
        elif kind == "chat":
            log.append(message(index, MessageType.STATUS, content="chatter about the parser"))
        elif log:
            summary = SummaryPart(narrative(log), 0, len(log) - 1)
    return log, summary


def narrative(log: Sequence[Message]) -> str:
    """What the summaries stage would write for `log`: its messages told as a narrative
    tells them (`as_narrated`), in batches the verbatim tier and the digest summarise."""
    said = [as_narrated(m) for m in log if summarisable(m)]

    async def run() -> str:
        summariser = default_summariser(None)
        result = None
        for start in range(0, len(said), 5):
            result = await summariser.summarise(said[start : start + 5], result)
        return result.text if result is not None else ""

    return asyncio.run(run())


@settings(max_examples=200, deadline=None)
@given(
    plan=steps,
    budget=st.sampled_from([0, 40, 150, 400, 1500]),
    agent=st.none() | st.sampled_from(["w0", "role:w1"]),
)
def test_the_context_never_contradicts_the_fold(
    plan: list[tuple[str, int, MessageType]], budget: int, agent: str | None
) -> None:
    log, summary = play(plan)
    views = commitment_views(fold(log))
    found = assemble_context(
        budget,
        header=header(len(log) - 1, "CONTINUE"),
        commitments=views,
        summary=summary,
        recap=RecapPart("Nothing is open.", len(log) - 2),
        messages=recent(log)[-20:],
        for_agent=agent,
    )
    assert estimate_tokens(found.text) <= budget
    assert contradictions(found, views) == []
    shown = {c["correlation_id"] for c in found.parts["commitments"]["shown"]}
    assert all(
        v.is_open
        for v in views
        if v.correlation_id in shown and v.id in {c.id for c in views if c.is_open}
    )
    for line in found.text.splitlines():
        status = re.search(r"\[commitment (\w+)\]$", line)
        if status:
            assert status.group(1) in {*OUTCOME_WORDS.values(), "open", "acknowledged"}
    if budget >= 1500:
        assert all(v.asked in found.text for v in views if v.is_open)


def test_the_checker_finds_an_ended_commitment_said_to_be_open() -> None:
    views = commitment_views(fold(scripted()))
    stale = "Open (1):\n- worker-b owes planner: “Port the lexer to Rust” (open since today)"
    assert text_contradictions(stale, views) == [stale.splitlines()[1]]
    silent = "Discussed:\n- [planner] Port the lexer to Rust"
    assert text_contradictions(silent, views) == [silent.splitlines()[1]]
    said = "Ended (1):\n- declined: “Port the lexer to Rust” (owed by worker-b to planner)"
    assert text_contradictions(said, views) == []
    # Told as history it is true whatever came of it, but never under an open heading.
    history = "Discussed:\n- [planner] Asked worker-b: Port the lexer…"
    assert text_contradictions(history, views) == []
    listed = "Open (1):\n- [planner] asked worker-b: Port the lexer to Rust"
    assert text_contradictions(listed, views) == [listed.splitlines()[1]]


def test_a_cut_message_closes_the_quote_it_cut_inside() -> None:
    quoted = "He wrote “" + "word " * 400 + "” and left"
    long = recent([message(0, MessageType.STATUS, content=quoted)])
    head = estimate_tokens(header(0, "CONTINUE").line())
    found = assemble_context(head + 40, header=header(0, "CONTINUE"), commitments=[], messages=long)
    shown = found.parts["messages"]["shown"][0]["content"]
    assert shown.endswith("…” [truncated]") and is_balanced(found.text)
