"""Every text view of the demo's channels (the multi-agent scenario, the chitchat conversation
a fresh machine streams, and the QMSum meeting when ../shared/data is there) and the titles
and keyphrases of 20 chitchat conversations, as a person reads them: no filler, laughter,
reporting verb or stopword among titles, keyphrases and key terms; no entry said twice; every
quote and bracket a view opens closed. Built offline as the stages build them: the digest
through `summary simulate`'s batching, the extractive recap with the state part rendered
from the fold, the title, the budgeted context."""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
from collections import Counter
from datetime import UTC, datetime

import pytest

from projections.commitments import CommitmentProjection
from projections.context import (
    ChannelHeader,
    RecapPart,
    RecentMessage,
    SummaryPart,
    assemble_context,
)
from projections.model import Message, MessageType
from projections.projection import fold
from projections.readable import commitment_views
from projections.recap import extractive_recap, with_recap_state
from projections.recap.title import channel_keyphrases, channel_title
from projections.summarise.state import state_part, with_state
from projections.text.keyphrases import top_keyphrases
from projections.text.lines import is_balanced
from projections.text.titles import title
from streams.conversations import (
    Conversation,
    as_messages,
    chitchat_conversations,
    qmsum_meetings,
    shared_data_dir,
)
from streams.interfaces.demo import scenario_messages
from streams.settings import Settings
from streams.worker.summary_simulation import simulate

START = datetime(2026, 12, 4, 9, tzinfo=UTC)
# What is never a subject: written independently of the stopword list it checks.
FILLERS = frozenset(
    re.findall(
        r"\w+",
        """haha hahaha hehe lol lmao yeah yep yup okay ok hmm um uh oh wow cool sure right well
        like just really actually thing things stuff asked said told replied answered ask says
        thats its im ive ill dont doesnt didnt cant wont isnt whats youre theyre dude thanks
        know think mean guess gonna wanna kinda sorta yes no not the and but""",
    )
)
_DRAWN_OUT = re.compile(r"(\w)\1\1")
_KEY_TERMS = "Key terms: "


def fillers_in(phrases: list[str]) -> list[str]:
    return [
        word
        for phrase in phrases
        for word in re.findall(r"[\w']+", phrase.lower())
        if word in FILLERS or _DRAWN_OUT.search(word)
    ]


@functools.cache
def chats() -> list[Conversation]:
    pytest.importorskip("chitchat_dataset")
    return list(itertools.islice(chitchat_conversations(), 20))


def demo_channels() -> dict[str, list[Message]]:
    """The channels `make run` streams: the scenario, then a real conversation's 40 turns
    (the chat a fresh machine streams; the meeting too when ../shared/data is there)."""
    found = {"demo/release-notes": scenario_messages(START, 2.0)}
    chat = next(c for c in chats() if len(c.turns) >= 40)
    found["demo/chat"] = as_messages(chat, "demo/chat", START)[:40]
    root = shared_data_dir()
    if root is not None and (root / "qmsum").is_dir():
        meeting = next(m for m in qmsum_meetings(root) if len(m.turns) >= 40)
        found["demo/meeting"] = as_messages(meeting, "demo/meeting", START)[:40]
    return found


def digest_of(messages: list[Message]) -> str:
    settings = Settings(_env_file=None, summary_after_messages=10)  # type: ignore[call-arg]
    records = asyncio.run(simulate(messages, settings))
    return records[messages[0].channel].text


def views_of(channel: str, messages: list[Message]) -> dict[str, str]:
    """What a person reads of the channel once it went quiet: the summary with its state
    part, the recap with its state part, the title, the context for anyone and for the
    scenario's late agent."""
    narrative = digest_of(messages)
    commitments = fold(CommitmentProjection(), messages)
    views = commitment_views(commitments)
    spoken = [m for m in messages if m.type is not MessageType.EVENT]
    recap = extractive_recap(spoken, channel_keyphrases(spoken, narrative), narrative)
    shown_recap = with_recap_state(recap, views)
    last = len(messages) - 1
    header = ChannelHeader(
        channel=channel,
        decision={"decision": "CONTINUE", "detail": None, "offset": last},
        offset=last,
        at=messages[-1].created_at,
        message_count=len(messages),
    )
    recent = [RecentMessage.of(m, offset) for offset, m in enumerate(messages)][-40:]
    contexts = {
        f"context within {budget}{' for worker-a' if agent else ''}": assemble_context(
            budget,
            header=header,
            commitments=views,
            summary=SummaryPart(narrative, 0, last - 5),
            recap=RecapPart(recap, last),
            messages=recent,
            for_agent=agent,
        ).text
        for budget, agent in ((300, None), (250, "worker-a"), (1000, None))
    }
    opening = title({}, fallback=next(m.content for m in spoken if m.content))
    return {
        "summary": with_state(narrative, state_part(commitments)),
        "recap": shown_recap,
        "title": channel_title(spoken, opening, narrative) or "",
        **contexts,
    }


def test_titles_keyphrases_and_key_terms_are_never_fillers() -> None:
    for conversation in chats():
        messages = as_messages(conversation, "chat/one", START)
        narrative = digest_of(messages)
        counts = channel_keyphrases(messages, narrative)
        shown = [
            *top_keyphrases(counts, 6),
            channel_title(messages, None, narrative) or "",
            *next(
                (
                    line.removeprefix(_KEY_TERMS).split(", ")
                    for line in narrative.splitlines()
                    if line.startswith(_KEY_TERMS)
                ),
                [],
            ),
        ]
        assert not fillers_in(shown), (conversation.name, shown)
    for channel, messages in demo_channels().items():
        title_shown = views_of(channel, messages)["title"]
        assert title_shown and not fillers_in([title_shown.split(":")[0]]), title_shown


def test_no_view_says_an_entry_twice() -> None:
    for channel, messages in demo_channels().items():
        for name, text in views_of(channel, messages).items():
            lines = [line for line in text.splitlines() if line.strip()]
            repeated = [line for line, n in Counter(lines).items() if n > 1]
            assert not repeated, (channel, name, repeated)
            if name == "recap":
                said = [s for s in re.split(r"(?<=[.?!])\s+", text) if s]
                assert len(said) == len(set(said)), (channel, said)
                for view in commitment_views(fold(CommitmentProjection(), messages)):
                    asked = (view.asked or "")[:30]
                    assert not asked or text.count(asked) <= 1, (channel, asked, text)


def test_every_quote_and_bracket_a_view_opens_is_closed() -> None:
    for channel, messages in demo_channels().items():
        # A message that is unbalanced itself ('on"?') cannot be shown balanced whole.
        balanced = [m for m in messages if m.content is None or is_balanced(m.content)]
        for name, text in views_of(channel, balanced).items():
            assert is_balanced(text), (channel, name, text)
