"""The extractive recap: history only (what the channel is about, what was done, its points,
the next step someone said); the state part is `projections.recap.state`'s."""

from __future__ import annotations

from projections.model import ActorType, Message, MessageType
from projections.recap import extractive_recap
from tests.unit.projections.recap.support import make

# --------------------------------------------------------------------------- extractive


def test_extractive_recap_is_history_what_was_done_and_said_next() -> None:
    messages = [
        make(MessageType.COMMAND, sender="alice", actor=ActorType.HUMAN, content="Migrate auth"),
        make(MessageType.RESPONSE, sender="alice", actor=ActorType.HUMAN, content="Okta"),
        make(MessageType.DONE, sender="coder", content="schema migrated"),
        make(MessageType.STATUS, sender="coder", content="Next we should test the login flow"),
        make(MessageType.EVENT, content=None),
    ]
    recap = extractive_recap(messages)
    assert "Done: coder schema migrated." in recap
    assert "Planned (coder): Next we should test the login flow." in recap
    # What was asked, and whether it is open, is the state part's (rendered when read).
    assert "Migrate auth" not in recap
    assert not any(word in recap for word in ("Goal", "Open:", "owes", "Nothing is open"))


def test_extractive_recap_reports_the_setback_after_the_last_result() -> None:
    messages = [
        make(MessageType.DONE, sender="coder", content=None),
        make(MessageType.DECLINE, sender="qa", content="no staging access to run the suite"),
    ]
    recap = extractive_recap(messages)
    assert "Done: coder finished." in recap
    assert "qa declined: no staging access to run the suite." in recap


def test_an_entry_said_twice_is_merged_and_a_point_never_repeats() -> None:
    twice = [make(MessageType.DONE, sender="instance:ana", content="docs/changelog.md")] * 2
    assert "Done: ana docs/changelog.md (twice)." in extractive_recap(twice)
    said = "The release train leaves on Friday with the parser changes."
    echoed = [make(MessageType.STATUS, sender=name, content=said) for name in ("ann", "bob", "ann")]
    recap = extractive_recap(echoed)
    assert recap.count("The release train leaves") == 1, recap


def test_extractive_recap_ignores_system_messages() -> None:
    messages = [
        make(MessageType.STATUS, sender="cron", actor=ActorType.SYSTEM, content="rotate logs"),
    ]
    assert extractive_recap(messages) == "Nothing to recap yet."


def test_extractive_recap_scrubs_ids_and_backchannel() -> None:
    uuid_id = "3f2b8c1e-9a4d-4e7b-8c2a-1d3e5f7a9b0c"
    messages = [
        make(MessageType.STATUS, sender=f"worker-{uuid_id}", content=f"deploy {uuid_id} went out"),
        make(MessageType.STATUS, sender="bob", content="Hmm hmm hmm ."),
        make(MessageType.STATUS, sender="ann", content="yeah"),
    ]
    recap = extractive_recap(messages)
    assert uuid_id not in recap
    assert "Hmm" not in recap and "yeah" not in recap


def test_extractive_recap_fills_to_the_lower_bound_from_the_summary() -> None:
    messages = [make(MessageType.STATUS, sender="ann", content="the parser handles unicode now")]
    summary = (
        "- The team agreed to split the parser module into lexer and grammar files.\n"
        "- Benchmarks of the lexer showed a regression on long unicode inputs."
    )
    bare = extractive_recap(messages)
    filled = extractive_recap(messages, summary=summary)
    # Short of 40 words, the summary's points fill it while they last.
    assert len(bare.split()) < len(filled.split()) <= 80
    assert filled.count("Earlier:") == 2


def test_extractive_recap_is_one_bounded_line() -> None:
    long_point = "please " * 200 + "\nand more"
    messages = [make(MessageType.STATUS, sender="alice", content=long_point)]
    recap = extractive_recap(messages)
    assert "\n" not in recap
    assert len(recap.split()) <= 80
    assert len(recap) <= 600


def test_what_a_recap_quotes_is_cached_only_for_short_texts() -> None:
    from projections.recap import extractive as recap_module

    short = Message(channel="c", sender="ann", type=MessageType.STATUS, content="ship the parser")
    long = short.model_copy(update={"content": "ship the parser " * 100})  # 1,600 characters
    recap_module._said_text.cache_clear()

    assert recap_module._said(short) == recap_module._said(short) == "ship the parser"
    assert recap_module._said(long) == recap_module._said(long)
    info = recap_module._said_text.cache_info()
    # asked twice, kept once; the long text never entered
    assert (info.misses, info.currsize) == (1, 1)
    assert info.maxsize == recap_module.SAID_CACHED
