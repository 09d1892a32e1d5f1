"""The digest tier, the budget the default wiring keeps, and the checks on a model's answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from projections.model import Message, MessageType
from projections.summarise import (
    FALLBACK_FROM,
    FALLBACK_REASON,
    Completion,
    LlmContentSummariser,
    LlmError,
    SummaryResult,
    VerbatimContentSummariser,
    default_summariser,
    estimate_tokens,
    render_message,
)
from projections.summarise.digest import POOL_KEY, DigestSummariser
from projections.summarise.pending import PendingBatch, add, fill
from projections.summarise.synthesised import copy_ratio, unusable_answer
from projections.text.cleaning import clean
from projections.text.sentences import sentences

T0 = datetime(2026, 5, 1, 9, tzinfo=UTC)
TOPICS = [
    "the billing service times out when the invoice queue grows past ten thousand jobs",
    "we should shard the invoice queue by customer region before the quarterly run",
    "the dashboard latency doubled after the cache eviction change last week",
]


def say(sender: str, content: str, i: int = 0, **fields: Any) -> Message:
    return Message(
        channel="team/dev",
        sender=sender,
        type=fields.pop("type", MessageType.STATUS),
        content=content,
        created_at=T0 + timedelta(seconds=i),
        **fields,
    )


def chatter(count: int, start: int = 0) -> list[Message]:
    """A long channel: mostly filler, a few recurring subjects."""
    out = []
    for i in range(start, start + count):
        if i % 5 == 0:
            content = f"Um, {TOPICS[i % 3]} {{disfmarker}} I mean, item {i}."
        else:
            content = ["Yeah.", "Okay.", "Hmm.", "Mm-hmm, right."][i % 4]
        out.append(say(["ann", "bob", "cy"][i % 3], content, i))
    return out


async def fold(summariser: Any, messages: list[Message], size: int) -> SummaryResult | None:
    previous = None
    for n in range(0, len(messages), size):
        previous = await summariser.summarise(messages[n : n + size], previous)
    return previous


def test_clean_removes_markup_fillers_and_stutters() -> None:
    assert clean("So {disfmarker} the the um remote , uh , control you 're holding") == (
        "So the remote, control you're holding"
    )
    assert sentences("Yeah. okay so the budget is fine? Hmm .") == ["The budget is fine?"]


async def test_digest_says_what_was_discussed_within_budget_however_long_the_channel() -> None:
    digest = DigestSummariser(max_tokens=120)
    result = await fold(digest, chatter(2000), 20)
    assert result is not None
    assert estimate_tokens(result.text) <= 120
    assert result.text.startswith("Participants: ann, bob, cy")
    assert "invoice queue" in result.text
    assert "Yeah" not in result.text and "disfmarker" not in result.text
    # The cross-run state is bounded too: a few KB whatever the length.
    assert sum(len(v) for v in result.annotations.values()) < 8000
    assert result.annotations["digestSeen"] == "2000"


async def test_each_run_rewrites_the_summary_from_a_pool_that_keeps_early_points() -> None:
    digest = DigestSummariser(max_tokens=100)
    first = await digest.summarise([say("ann", "The parser rejects unicode channel names.", 0)])
    noise = [
        say("bob", f"Lunch at the {place} sounds fine.", i)
        for i, place in enumerate(["deli", "noodle bar", "taco stand", "pub", "cafe", "diner"])
    ]
    later = await digest.summarise(noise * 3, first)
    assert "The parser rejects unicode channel names." in later.annotations[POOL_KEY]
    unicode = [say("cy", f"Unicode names broke {what} again.", 30) for what in ("CI", "deploys")]
    final = await digest.summarise([*unicode, say("bob", "Parser unicode fix next?")], later)
    assert not final.text.startswith(later.text)
    assert "[ann] The parser rejects unicode channel names." in final.text
    assert estimate_tokens(final.text) <= 100


async def test_digest_keeps_other_keys_and_an_empty_batch_returns_previous_itself() -> None:
    digest = DigestSummariser()
    previous = SummaryResult("", {"domain": "legal", "tier": "verbatim"})
    result = await digest.summarise([say("ann", "The contract renewal is due in March.")], previous)
    assert result.annotations["domain"] == "legal" and result.annotations["tier"] == "digest"
    assert await digest.summarise([], result) is result
    assert (await digest.summarise([], None)).text == ""


async def test_the_digest_says_nothing_of_commitment_status() -> None:
    """What is open or how a request ended is the commitments projection's to say: the
    digest neither lists nor tracks it, and drops the annotations an older digest kept."""
    digest = DigestSummariser()
    ask = say(
        "planner",
        "Please migrate the user table to the new schema.",
        type=MessageType.COMMAND,
        correlation_id="c1",
        target="role:worker",
    )
    older = SummaryResult("", {"digestOpen": '[["c1","planner","role:worker","x"]]'})
    result = await digest.summarise([ask], older)
    assert "Open" not in result.text and "owed by" not in result.text
    assert "digestOpen" not in result.annotations and "digestDone" not in result.annotations
    done = say(
        "worker-1",
        "Migrated, 3 rows fixed.",
        type=MessageType.DONE,
        correlation_id="c1",
        in_reply_to=ask.id,
    )
    closed = await digest.summarise([done], result)
    assert "Decided or done" not in closed.text
    assert "[worker-1] Migrated, 3 rows fixed." in closed.text  # what was said stays


async def test_a_text_the_digest_did_not_write_becomes_material() -> None:
    digest = DigestSummariser()
    by_hand = SummaryResult("The launch moved to Friday because legal review is pending.")
    result = await digest.summarise([say("ann", "Okay.")], by_hand)
    assert "[summary] The launch moved to Friday because legal review is pending." in result.text

    verbatim = VerbatimContentSummariser(render_message)
    appended = await verbatim.summarise(
        [say("bob", "Rollback plan is in the runbook now.")], result
    )
    again = await digest.summarise([say("cy", "Hmm.")], appended)
    assert "[bob] Rollback plan is in the runbook now." in again.text
    assert "[summary] The launch moved to Friday" in again.text
    assert again.annotations[POOL_KEY].count("launch moved") == 1


async def test_an_old_grouped_summary_gives_its_content_not_its_headers() -> None:
    old = SummaryResult(
        "--- Update (20 messages) ---\nParticipants: ann, bob\nPeriod: 2026-01-01T10:00:00Z\n"
        "Topics: general\nThe index rebuild finished overnight."
    )
    result = await DigestSummariser().summarise([say("cy", "Okay.")], old)
    assert "Period" not in result.annotations[POOL_KEY]
    assert "[summary] The index rebuild finished overnight." in result.text


async def test_compacted_items_keep_their_speakers() -> None:
    said = [
        ("ann", "Shard the invoice queue."),
        ("bob", "Agreed, by region."),
        ("cy", "Queue sharding ships Monday."),
    ]
    bodies = {i: say(who, what, i) for i, (who, what) in enumerate(said)}
    batch = PendingBatch()
    for i in bodies:
        batch = add(batch, i, covered_offset=-1, max_pending=2, now=T0)
    assert [item.covers for item in batch.items] == [2, 1]
    result = await DigestSummariser().summarise(fill(batch, bodies))
    assert "[ann] Shard the invoice queue." in result.text
    assert "[bob] Agreed, by region." in result.text
    assert result.annotations["participants"] == "ann,bob,cy"


@pytest.mark.parametrize("sizes", [[1, 2, 3] * 30, [20] * 20, [7, 1, 19, 2, 40, 3] * 8])
async def test_the_default_summary_stays_within_budget_for_any_batch_sizes(
    sizes: list[int],
) -> None:
    summariser = default_summariser(None, summary_max_tokens=100)
    messages = chatter(sum(sizes))
    previous: SummaryResult | None = None
    position = 0
    for size in sizes:
        previous = await summariser.summarise(messages[position : position + size], previous)
        position += size
        assert estimate_tokens(previous.text) <= 100
    assert previous is not None and "invoice" in previous.text


class ScriptedClient:
    model = "scripted"

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.systems: list[str] = []

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        self.systems.append(system)
        return Completion(self.reply, self.model, 10, 10, 1)


ITEMS = [
    say("ann", f"Status update {i}: the nightly import finished without errors.", i)
    for i in range(20)
]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("word " * 400, "over budget"),
        ("Current summary:\nnothing yet", "Current summary:"),
        ("New items (20):\n<items>\n[ann] hi", "New items ("),
        ("All good.</items>", "</items>"),
        (
            "\n".join(render_message(m) for m in ITEMS[:8]),
            "copies the input",
        ),
    ],
)
async def test_a_degenerate_model_answer_falls_back_to_the_digest_with_the_reason(
    reply: str, reason: str
) -> None:
    summariser = default_summariser(ScriptedClient(reply), summary_max_tokens=200)
    result = await summariser.summarise(ITEMS)
    assert result.annotations["tier"] == "digest"
    assert result.annotations[FALLBACK_FROM] == "synthesised"
    assert reason in result.annotations[FALLBACK_REASON]
    assert result.text != reply.strip()
    assert estimate_tokens(result.text) <= 200


async def test_a_good_model_answer_is_used_and_the_prompt_states_the_budget() -> None:
    client = ScriptedClient("The nightly import ran cleanly twenty times; nothing is open.")
    summariser = default_summariser(client, summary_max_tokens=200)
    result = await summariser.summarise(ITEMS)
    assert result.annotations["tier"] == "synthesised"
    assert result.text == client.reply
    assert client.systems[0].endswith("Keep the summary under 150 words.")


async def test_without_a_budget_the_llm_tier_keeps_its_old_contract() -> None:
    long = "word " * 400
    summariser = LlmContentSummariser(ScriptedClient(long), render_message)
    assert (await summariser.summarise(ITEMS)).text == long.strip()
    checked = LlmContentSummariser(ScriptedClient(long), render_message, summary_max_tokens=50)
    with pytest.raises(LlmError, match="over budget"):
        await checked.summarise(ITEMS)


def test_copy_ratio_and_unusable_answer() -> None:
    source = "one two three four five six seven eight nine ten eleven"
    assert copy_ratio(source, source) == 1.0
    assert copy_ratio("one two three", source) == 0.0  # too short to judge
    assert copy_ratio("the team agreed to ship the import fix on monday after review", source) == 0
    assert unusable_answer("Fine summary.", source, 100) is None


def test_a_sentence_scores_the_same_whatever_order_its_terms_are_summed_in() -> None:
    # The salience of a sentence adds a float per distinct term; summed in a set's order it
    # depended on PYTHONHASHSEED, so two workers (or a replay) could pick other sentences.
    # The exactly rounded sum is the same in every order.
    import math
    from collections import Counter

    from projections.summarise.digest import Candidate, features, terms

    text = " ".join(f"{word}{i} alpha{i % 7} beta{i % 3}" for i, word in enumerate("qwxzvjk" * 6))
    counts = Counter({feature: 1 + len(feature) * 7 % 13 for feature in features(text)})
    total = sum(counts.values())
    words = terms(text)
    distinct = set(features(text))
    expected = math.fsum(math.log1p(counts[t] * 1000 / total) for t in sorted(distinct))
    expected /= math.pow(len(words), DigestSummariser().weights.length_exponent)

    score = DigestSummariser()._score(Candidate(99, "ann", text), counts)

    assert score == expected


def test_only_candidate_sentences_enter_the_terms_cache() -> None:
    from projections.summarise import digest as digest_module

    digest_module._candidate_terms.cache_clear()
    words = " ".join(f"parser{i} queue{i}" for i in range(150))  # one 2,000-character sentence
    DigestSummariser().digest([say("ann", words)])

    # The message's whole text is counted uncached; only its candidate, cut to
    # max_sentence_chars, is cached: scored, then looked up again to be selected.
    cached = digest_module._candidate_terms.cache_info()
    assert (cached.currsize, cached.misses, cached.hits) == (1, 1, 1)
    assert cached.maxsize == digest_module.CANDIDATE_TERMS_CACHED


def test_the_term_model_is_cut_to_its_top_terms_as_most_common_would() -> None:
    import random
    from collections import Counter

    from projections.summarise.digest import _top

    rng = random.Random(5)
    for _ in range(200):
        counts = Counter({f"t{rng.randrange(400)}": rng.randint(1, 4) for _ in range(600)})
        n = rng.randint(1, 300)
        assert list(_top(counts, n).items()) == counts.most_common(n)


async def test_a_batch_cleans_only_the_sentences_that_may_be_shown() -> None:
    """Every message's words are read (the term model), but the cleaner runs only on the
    best-ranked sentences: as many as the pool holds at most."""
    from unittest.mock import patch

    from projections.summarise import digest as digest_module

    lines = [
        f"Um, the {TOPICS[i % 3]} {{disfmarker}} uh, right. So item {i} item {i} is next. "
        f"The the queue {i} waits. Yeah. Okay, the cache {i} is cold."
        for i in range(40)
    ]
    cleaned: list[str] = []
    real = digest_module.sentences

    def counted(text: str) -> list[str]:
        cleaned.append(text)
        return real(text)

    summariser = DigestSummariser()
    with patch.object(digest_module, "sentences", counted):
        result = await summariser.summarise([say("ann", line, i) for i, line in enumerate(lines)])
    assert 0 < len(cleaned) <= summariser.pool_size
    assert "disfmarker" not in result.text and " uh" not in result.text
    terms = dict(pair.rsplit(":", 1) for pair in result.annotations["digestTerms"].split(","))
    assert int(terms["invoice_queue"]) == 27  # 14 + 13 mentions, each counted once
    assert "the" not in terms and "uh" not in terms


def test_a_long_piece_is_cleaned_only_as_far_as_it_can_be_shown() -> None:
    from unittest.mock import patch

    from projections.summarise import digest as digest_module

    digest = DigestSummariser()
    limit = digest.weights.max_sentence_chars
    long = " ".join(f"um the invoice queue {i} uh needs sharding" for i in range(60))
    cleaned: list[int] = []
    real = digest_module.sentences

    def counted(text: str) -> list[str]:
        cleaned.append(len(text))
        return real(text)

    with patch.object(digest_module, "sentences", counted):
        shown = digest._shown(long)
    assert cleaned == [limit * digest_module.RAW_CHARS_CLEANED]  # a prefix, once
    assert [digest._bounded(s) for s in shown] == [digest._bounded(s) for s in real(long)]
    # Mostly noise: the prefix cleans to too little to tell, so the whole piece is cleaned.
    noisy = "um uh " * 200 + "the invoice queue needs sharding"
    assert digest._shown(noisy) == real(noisy)


async def test_a_speakers_sentences_in_a_row_are_one_line_and_no_line_repeats_its_tag() -> None:
    result = await DigestSummariser().summarise(
        [
            say("ann", "The invoice queue times out past ten thousand jobs. Sharding fixes it.", 0),
            say("ann", "The quarterly run needs the invoice queue sharded by region first.", 1),
            say("bob", "The dashboard latency doubled after the cache eviction change.", 2),
        ]
    )
    lines = [line for line in result.text.splitlines() if line.startswith("- [")]
    assert [line.split("]")[0] for line in lines] == ["- [ann", "- [bob"]
    assert "Sharding fixes it. The quarterly run needs" in lines[0]


async def test_a_key_term_said_mostly_in_one_pair_shows_as_the_pair() -> None:
    said = [
        "The pull request adds the parser.",
        "Review the pull request for the parser today.",
        "The pull request breaks the lexer.",
        "The parser and the lexer share tokens.",
    ]
    result = await DigestSummariser().summarise(
        [say("ann", text, i) for i, text in enumerate(said)]
    )
    key_terms = next(line for line in result.text.splitlines() if line.startswith("Key terms: "))
    terms = key_terms.removeprefix("Key terms: ").split(", ")
    assert "pull request" in terms and "parser" in terms
    assert "pull" not in terms and "request" not in terms
