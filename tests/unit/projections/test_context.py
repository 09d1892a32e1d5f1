"""The budgeted agent context: never over budget, parts in priority order, cuts marked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.context import TRUNCATED, RecentMessage, assemble_context
from projections.readable import OpenCommitment
from projections.summarise import estimate_tokens

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)


def owed(i: int) -> OpenCommitment:
    return OpenCommitment(
        correlation_id=f"c{i}",
        kind="COMMAND",
        state="OPEN",
        requester="planner",
        obligor=f"role:worker-{i}",
        asked=f"task number {i}: rerun the migration example",
        since=T0 + timedelta(minutes=i),
    )


def said(i: int, text: str = "") -> RecentMessage:
    return RecentMessage("worker-a", "STATUS", text or f"message {i} " * 5, T0)


SUMMARY = "The team split the parser into lexer and grammar; benchmarks pending. " * 3
RECAP = "Goal: ship the parser split. Open: worker-a owes planner the benchmark."
PARTS = {
    "summary": SUMMARY,
    "commitments": [owed(i) for i in range(3)],
    "recap": RECAP,
    "messages": [said(i) for i in range(10)],
}


def context(max_tokens: int, **overrides: object):  # type: ignore[no-untyped-def]
    parts = {**PARTS, **overrides}
    return assemble_context("c", max_tokens, **parts)  # type: ignore[arg-type]


def test_a_large_budget_shows_everything_in_order() -> None:
    found = context(10_000)
    text = found.text
    assert text.index("Summary:") < text.index("Open commitments (3):")
    assert text.index("Open commitments") < text.index("Latest recap:")
    assert text.index("Latest recap:") < text.index("Recent messages (10 of 10, oldest first):")
    assert "worker-0 owes planner: “task number 0: rerun the migration example” (open since" in text
    assert TRUNCATED not in text
    assert found.as_json()["parts"]["messages"]["omitted"] == 0
    assert found.tokens == estimate_tokens(text) <= 10_000


def test_a_small_budget_keeps_the_summary_and_marks_the_cut() -> None:
    found = context(20)
    assert found.text.startswith("Summary:\nThe team split") and found.text.endswith(TRUNCATED)
    parts = found.as_json()["parts"]
    assert parts["summary"]["truncated"] is True
    assert parts["commitments"]["shown"] == [] and parts["messages"]["shown"] == []
    assert parts["recap"] == {"text": None, "truncated": True}


def test_commitments_that_do_not_all_fit_say_how_many_are_left() -> None:
    whole = estimate_tokens(context(10_000, recap=None, messages=[]).text)
    found = context(whole - 10, recap=None, messages=[])
    assert "- … and 1 more [truncated]" in found.text
    assert found.commitments["omitted"] == 1 and len(found.commitments["shown"]) == 2


def test_messages_fill_the_rest_newest_first_shown_oldest_first() -> None:
    without = estimate_tokens(context(10_000, messages=[]).text)
    found = context(without + 40)
    shown = found.messages["shown"]
    assert 0 < len(shown) < 10
    assert shown[-1]["content"] == PARTS["messages"][-1].content  # the newest is kept
    lines = [line for line in found.text.splitlines() if line.startswith("[")]
    assert lines[-1].endswith(" ".join(said(9).content.split()))  # type: ignore[union-attr]


def test_a_young_channel_without_summary_gets_its_messages() -> None:
    found = assemble_context(
        "c", 200, summary=None, commitments=[], recap=None, messages=[said(0), said(1)]
    )
    assert found.text.startswith("Recent messages (2 of 2, oldest first):")
    assert found.summary is None and found.recap is None


def test_a_newest_message_too_long_for_the_budget_is_cut_and_marked() -> None:
    long = said(0, "word " * 400)
    found = assemble_context("c", 60, summary=None, commitments=[], recap=None, messages=[long])
    assert found.messages["truncated"] is True and found.text.endswith(TRUNCATED)
    assert found.tokens <= 60


def test_zero_budget_is_empty_and_negative_is_refused() -> None:
    assert context(0).text == ""
    try:
        context(-1)
    except ValueError as error:
        assert "max_tokens" in str(error)
    else:
        raise AssertionError("a negative budget must be refused")


texts = st.text(st.characters(codec="utf-8"), max_size=400)
ORDER = ["Summary:", "Open commitments", "Latest recap:", "Recent messages"]


@settings(max_examples=300, deadline=None)
@given(
    max_tokens=st.integers(min_value=0, max_value=600),
    summary=st.none() | texts,
    n_owed=st.integers(0, 6),
    recap=st.none() | texts,
    bodies=st.lists(texts, max_size=12),
)
def test_never_over_budget_and_parts_in_priority_order(
    max_tokens: int, summary: str | None, n_owed: int, recap: str | None, bodies: list[str]
) -> None:
    found = assemble_context(
        "c",
        max_tokens,
        summary=summary,
        commitments=[owed(i) for i in range(n_owed)],
        recap=recap,
        messages=[said(i, body) for i, body in enumerate(bodies)],
    )
    assert estimate_tokens(found.text) <= max_tokens
    parts = found.as_json()["parts"]
    present = [
        parts["summary"] is not None and parts["summary"]["text"] is not None,
        bool(parts["commitments"].get("shown")) or "Open commitments" in found.text,
        parts["recap"] is not None and parts["recap"]["text"] is not None,
        bool(parts["messages"]["shown"]),
    ]
    cut = [
        parts["summary"] is not None and parts["summary"]["truncated"],
        parts["commitments"].get("omitted", 0) > 0,
        parts["recap"] is not None and parts["recap"]["truncated"],
    ]
    # A part is shown only when every non-empty part before it was shown whole.
    for later in range(1, 4):
        if present[later]:
            assert not any(cut[:later])
    positions = [found.text.find(h) for h, shown in zip(ORDER, present, strict=True) if shown]
    assert positions == sorted(positions)
