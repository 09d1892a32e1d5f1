"""The extractive recap: goal, progress, what is open (and how the rest ended), next step."""

from __future__ import annotations

from projections.model import ActorType, Message, MessageType
from projections.readable import CommitmentView
from projections.recap import (
    extractive_recap,
)
from tests.unit.projections.recap.support import T0, make

# --------------------------------------------------------------------------- extractive


def owed(what: str, obligor: str | None = "role:coder", requester: str = "alice") -> CommitmentView:
    return CommitmentView(
        correlation_id="c9",
        kind="COMMAND",
        state="OPEN",
        requester=requester,
        obligor=obligor,
        asked=what,
        since=T0,
    )


def test_extractive_recap_says_goal_done_open_and_next() -> None:
    messages = [
        make(MessageType.COMMAND, sender="alice", actor=ActorType.HUMAN, content="Migrate auth"),
        make(MessageType.QUERY, sender="coder", content="Which identity provider should we use?"),
        make(MessageType.RESPONSE, sender="alice", actor=ActorType.HUMAN, content="Okta"),
        make(MessageType.DONE, sender="coder", content="schema migrated"),
        make(MessageType.EVENT, content=None),
    ]
    recap = extractive_recap(messages, [owed("write tests for the login flow")])
    assert recap.startswith("Goal: write tests for the login flow (asked by alice).")
    assert "Done: coder schema migrated." in recap
    assert "Open: coder owes alice “write tests for the login flow”." in recap
    assert "Next: coder to deliver “write tests for the login flow”." in recap


def test_extractive_recap_without_commitments_takes_the_latest_substantial_request() -> None:
    messages = [
        make(MessageType.COMMAND, sender="bob", content="Rename the billing module"),
        make(MessageType.QUERY, sender="alice", content="Digits?"),  # not a goal
    ]
    recap = extractive_recap(messages, [])
    assert recap.startswith("Goal (bob): Rename the billing module.")
    assert "Nothing is open." in recap


def test_extractive_recap_reports_the_setback_after_the_last_result() -> None:
    messages = [
        make(MessageType.DONE, sender="coder", content=None),
        make(MessageType.DECLINE, sender="qa", content="no staging access to run the suite"),
    ]
    recap = extractive_recap(messages, [])
    assert "Done: coder finished." in recap
    assert "qa declined: no staging access to run the suite." in recap
    assert "Next: hand the refused work to someone else or change the plan." in recap


def test_extractive_recap_ignores_system_messages() -> None:
    messages = [
        make(MessageType.COMMAND, sender="cron", actor=ActorType.SYSTEM, content="rotate logs"),
    ]
    assert extractive_recap(messages, []) == "Nothing to recap yet."


def test_extractive_recap_scrubs_ids_and_backchannel() -> None:
    uuid_id = "3f2b8c1e-9a4d-4e7b-8c2a-1d3e5f7a9b0c"
    messages = [
        make(MessageType.STATUS, sender=f"worker-{uuid_id}", content=f"deploy {uuid_id} went out"),
        make(MessageType.STATUS, sender="bob", content="Hmm hmm hmm ."),
        make(MessageType.STATUS, sender="ann", content="yeah"),
    ]
    recap = extractive_recap(messages, [owed("roll back 7f3a9b2c11d4", obligor=None)])
    assert uuid_id not in recap and "7f3a9b2c11d4" not in recap
    assert "Hmm" not in recap and "yeah" not in recap
    assert "someone owes alice “roll back”" in recap


def test_extractive_recap_fills_to_the_lower_bound_from_the_summary() -> None:
    messages = [make(MessageType.STATUS, sender="ann", content="the parser handles unicode now")]
    summary = (
        "- The team agreed to split the parser module into lexer and grammar files.\n"
        "- Benchmarks of the lexer showed a regression on long unicode inputs."
    )
    bare = extractive_recap(messages, [])
    filled = extractive_recap(messages, [], summary=summary)
    assert len(bare.split()) < 40 <= len(filled.split()) <= 80
    assert "Earlier:" in filled


def test_extractive_recap_is_one_bounded_line() -> None:
    long_goal = "please " * 200 + "\nand more"
    messages = [make(MessageType.COMMAND, sender="alice", content=long_goal)]
    commitments = [owed(f"task {i} " + "detail " * 30) for i in range(6)]
    recap = extractive_recap(messages, commitments)
    assert "\n" not in recap
    assert len(recap.split()) <= 80
    assert len(recap) <= 600
    assert "Open: coder owes alice “task 0" in recap  # a long goal cannot crowd them out
    assert "(+4 more)" in recap


def test_what_a_recap_quotes_is_cached_only_for_short_texts() -> None:
    from projections.recap import extractive as recap_module

    short = Message(channel="c", sender="ann", type=MessageType.STATUS, content="ship the parser")
    long = short.model_copy(update={"content": "ship the parser " * 100})  # 1,600 characters
    recap_module._said_text.cache_clear()

    assert recap_module._said(short) == recap_module._said(short) == "ship the parser"
    assert recap_module._said(long) == recap_module._said(long)
    info = recap_module._said_text.cache_info()
    assert (info.hits, info.misses, info.currsize) == (1, 1, 1)  # the long text never entered
    assert info.maxsize == recap_module.SAID_CACHED
