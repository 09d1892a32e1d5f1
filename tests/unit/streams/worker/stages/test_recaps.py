"""The recap stage's pure helpers and the watch view, without Kafka."""

from datetime import UTC, datetime, timedelta

import orjson
from rich.console import Console

from projections.commitments import CommitmentProjection
from projections.model import ActorType, Message, MessageType
from projections.projection import fold
from projections.recap import RecapPhase
from projections.recap.title import channel_title
from projections.summarise.llm import Completion
from streams.interfaces.watch import render, status_line
from streams.worker.stages.recaps import (
    RECAP_CODEC,
    ChannelRecap,
    channel_commitments,
    with_message,
    write_recap,
)

NOW = datetime(2026, 6, 1, 10, tzinfo=UTC)
CHANNEL = "store/age"  # on partition 0 of the offline worker's topic


def msg(content: str | None, kind: MessageType = MessageType.STATUS, **extra: object) -> Message:
    return Message.model_validate(
        {"channel": "c", "sender": "ann", "type": kind, "content": content, **extra}
    )


def test_messages_arm_the_countdown_and_fill_the_window() -> None:
    recap = with_message(ChannelRecap(), msg("Plan the release train"), 0, 30, NOW)
    assert recap.status.phase is RecapPhase.PENDING
    assert recap.status.due_at == NOW + timedelta(seconds=30)
    assert recap.title is None  # not read per message: when a recap or a view asks
    assert channel_title(recap.messages(), recap.opening) == "Plan the release train"
    assert recap.message_count == 1 and len(recap.window) == 1
    typing = msg(None, MessageType.EVENT, payload={"kind": "typing"})
    later = with_message(recap, typing, 1, 30, NOW + timedelta(seconds=10))
    assert later.status.due_at == NOW + timedelta(seconds=40)  # activity restarts it
    assert later.message_count == 1 and len(later.window) == 1  # but is not conversation


def test_window_is_bounded_and_tools_are_listed() -> None:
    recap = ChannelRecap()
    for i in range(50):
        recap = with_message(recap, msg(f"m{i}"), i, 30, NOW)
    tool = msg("x" * 500, actor_type=ActorType.TOOL, sender="grep")
    recap = with_message(recap, tool, 50, 30, NOW)
    assert len(recap.window) == 20 and recap.tools == ["grep"]
    assert recap.window_offsets == list(range(31, 51))  # what the stage stores
    last = recap.messages()[-1]
    assert last.sender == "grep" and last.content == "x" * 299 + "…"  # cut, and says so
    assert with_message(recap, msg("dup"), 50, 30, NOW) is recap  # replayed offset


def test_the_title_follows_what_the_channel_is_about_not_its_first_message() -> None:
    lines = [
        "Hmm hmm hmm .",
        "So the remote control needs fewer buttons.",
        "Yeah.",
        "The remote control could have a rubber case.",
        "Okay.",
        "A rubber case and fewer buttons, then, for the remote control.",
    ]
    recap = ChannelRecap()
    for offset, line in enumerate(lines):
        recap = with_message(recap, msg(line), offset, 30, NOW)
        found = channel_title(recap.messages(), recap.opening)
        assert found is None or len(found) <= 60
    found = channel_title(recap.messages(), recap.opening)
    assert found is not None and found.startswith("Remote control")
    assert "rubber case" in found and "button" in found
    assert recap.opening == "So the remote control needs fewer buttons."


def test_the_opening_is_stored_as_the_title_it_stands_in_for() -> None:
    """The record is written with every message: it keeps the opening's title (at most 60
    characters), not 300 characters of the message; backchannel sets none."""
    long = "Shall we move the invoice queue to the new cluster before Friday? " * 5
    recap = with_message(ChannelRecap(), msg("yeah"), 0, 30, NOW)
    assert recap.opening is None
    recap = with_message(recap, msg(long), 1, 30, NOW)
    assert recap.opening is not None and len(recap.opening) <= 60
    assert recap.opening.startswith("Shall we move the invoice queue")
    assert channel_title([], recap.opening) == recap.opening
    # A record of an older format (300 characters of the message) reads as the same title.
    older = recap.model_copy(update={"opening": long[:300]})
    assert channel_title([], older.opening) == recap.opening


def test_a_channel_of_backchannel_has_no_title() -> None:
    recap = ChannelRecap()
    for offset, line in enumerate(["Hmm hmm hmm .", "yeah", "okay", "I think so, yeah."]):
        recap = with_message(recap, msg(line), offset, 30, NOW)
    assert channel_title(recap.messages(), recap.opening) is None


def test_a_message_costs_no_keyphrase_counts_and_old_records_still_read() -> None:
    recap = ChannelRecap()
    for offset in range(200):
        recap = with_message(
            recap, msg(f"The invoice queue {offset} needs sharding."), offset, 30, NOW
        )
    stored = RECAP_CODEC.encode(recap)
    assert "keyphrases" not in stored and stored["title"] is None
    assert len(orjson.dumps(stored)) < 1500  # positions and a few fields, whatever the count
    # A record of the older format (keyphrase counts, a title kept per message) reads fine;
    # its title stands until the next recap, and its counts are not written back.
    old = {**stored, "title": "Invoice queue", "keyphrases": {"invoice queue": [200, 0]}}
    read = RECAP_CODEC.decode(old)
    assert read.title == "Invoice queue" and read.message_count == 200
    assert "keyphrases" not in RECAP_CODEC.encode(with_message(read, msg("more"), 200, 30, NOW))


def test_channel_commitments_read_the_fold_as_dicts_with_excerpts_from_the_window() -> None:
    opener = msg("review it", MessageType.COMMAND, correlation_id="k1", target="role:reviewer")
    state = fold(CommitmentProjection(), [opener]).model_dump(mode="json")
    (found,) = channel_commitments(state, [opener])
    assert found.asked == "review it" and found.obligor == "role:reviewer"
    assert found.line().startswith("reviewer owes ann: “review it” (open since ")
    # A fold that already carries the excerpt (the commitments projection's own field) wins.
    commitment = next(iter(state["commitments"].values()))
    commitment["excerpt"] = "review the parser split"
    (found,) = channel_commitments(state, [])
    assert found.asked == "review the parser split"
    assert channel_commitments(None, [opener]) == []


class FakeClient:
    model = "tiny"

    def __init__(self, text: str) -> None:
        self.text = text
        self.prompts: list[tuple[str, str]] = []

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        self.prompts.append((system, user))
        return Completion(self.text, "tiny", 120, 30, 15)


async def test_write_recap_with_a_model_cleans_and_costs() -> None:
    client = FakeClient("- We are splitting the parser.\nNext: write docs.")
    owed = channel_commitments(
        fold(
            CommitmentProjection(),
            [msg("add docs", MessageType.COMMAND, correlation_id="9f8e7d6c5b4a3f2e1d0c")],
        ).model_dump(mode="json"),
        [],
    )
    text, cost = await write_recap(client, [msg("split parser")], "Summary so far", owed)
    assert text == "We are splitting the parser. Next: write docs."
    assert cost == {
        "tier": "synthesised",
        "model": "tiny",
        "tokens_in": 120,
        "tokens_out": 30,
        "latency_ms": 15,
    }
    system, user = client.prompts[0]
    assert "40" in system and "80" in system
    assert "Summary so far" in user and "ann: split parser" in user
    # What was asked comes from the commitment's excerpt (the ring holds no message here).
    assert "- someone owes ann: “add docs” (open since" in user
    assert "9f8e7d6c5b4a" not in user


async def test_write_recap_without_a_model_is_extractive() -> None:
    text, cost = await write_recap(
        None, [msg("ship the release notes", MessageType.COMMAND, correlation_id="z")], None, []
    )
    assert text.startswith("Goal (ann): ship the release notes.") and cost == {"tier": "extractive"}


def test_watch_renders_status_lines_and_recaps() -> None:
    view = {
        "channel": "pairing/refactor",
        "model": "gpt-5.4",
        "message_count": 2,
        "title": "Recaps help…",
        "tools": ["read_file", "grep", "edit"],
        "label": "3s",
        "activity": "idle",
        "text": "Recaps keep shared context.",
    }
    assert status_line(view) == "- | gpt-5.4 | #2 | Recaps help… | read_file,+2 | 3s | idle"
    decided = {**view, "decision": {"decision": "COMPLETE", "detail": None, "offset": 4}}
    assert status_line(decided).startswith("COMPLETE | gpt-5.4 | #2")
    console = Console(record=True, width=120)
    console.print(render([view]))
    out = console.export_text()
    assert "pairing/refactor  - | gpt-5.4 | #2 | Recaps help… | read_file,+2 | 3s | idle" in out
    assert "> Recaps keep shared context." in out
    console = Console(record=True, width=120)
    console.print(render([], "cannot reach the worker"))
    assert "cannot reach the worker" in console.export_text()


async def test_a_view_reads_the_title_from_the_summary_and_the_window_once_per_change() -> None:
    """The stage keeps no keyphrase counts: in the context role a view reads the title from
    the latest summary and the window in memory, once per window and summary; without the
    window in memory it shows the title stored with the latest recap."""
    from unittest.mock import patch

    from streams.records import RecapRecord
    from streams.settings import Settings
    from streams.worker.compose import build_worker
    from streams.worker.runtime import Runtime

    class NoFolds:  # the context role reads folds from the fold role: none here
        async def folded(self, channel: str, name: str) -> None:
            return None

    worker = build_worker(
        Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1"),
        broker="127.0.0.1:1",
        role="context",
        stages=("summaries", "recaps"),
        fold_state=NoFolds(),
    )
    chorus, recapper = worker.runtime, worker.recapper
    assert recapper is not None
    summary = "Key terms: invoice, queue\nDiscussed:\n- [bob] Shard the invoice queue by region."
    recapper.narrative = lambda channel: summary

    async def discard(*_: object, **__: object) -> None:
        return None

    async def publish(*_: object, **__: object) -> list[object]:
        return []

    lines = ["Lunch at noon?", "The invoice queue is slow again.", "Sure, noon works."]
    with patch("faust.topics.Topic.send", discard), patch.object(Runtime, "publish", publish):
        async with chorus.app.agents["feed-messages"].test_context() as agent:
            for line in lines:
                value = {"channel": CHANNEL, "sender": "ann", "type": "STATUS", "content": line}
                await agent.put(orjson.dumps(value), key=CHANNEL.encode())
        view = recapper.view(CHANNEL, NOW)
        assert view["title"] == "Invoice queue, noon"  # the summary and the window
        assert recapper.titles[CHANNEL][0] == 3
        with patch("streams.worker.stages.recaps.channel_title") as read:
            assert recapper.view(CHANNEL, NOW)["title"] == "Invoice queue, noon"
            read.assert_not_called()  # once per window and summary
        done = RecapRecord(channel=CHANNEL, text="Recap.", phase=RecapPhase.COMPLETED)
        async with chorus.app.agents["record-recaps"].test_context() as agent:
            await agent.put(done.to_bytes(), key=CHANNEL.encode())
    assert recapper.recap_of(CHANNEL).title == "Invoice queue, noon"  # stored with the recap
    # After a restart memory has neither the window nor the title read from it.
    recapper.titles.clear()
    recapper.bodies.memory.drop_through(CHANNEL, 10)
    restarted = recapper.recap_of(CHANNEL).model_copy(update={"window": []})
    assert recapper.window_in_memory(CHANNEL, restarted) is None
    assert recapper.title_of(CHANNEL, restarted) == "Invoice queue, noon"
    untitled = restarted.model_copy(update={"title": None})
    assert recapper.title_of(CHANNEL, untitled) == "Lunch at noon?"  # the opening


def test_titles_are_kept_for_at_most_titles_kept_channels() -> None:
    """The per-channel title cache is bounded: the least recently asked channel is
    forgotten first (its title is read again when asked)."""
    from unittest.mock import patch

    from streams.settings import Settings
    from streams.worker.compose import build_worker
    from streams.worker.stages import recaps

    class NoFolds:
        async def folded(self, channel: str, name: str) -> None:
            return None

    worker = build_worker(
        Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1"),
        broker="127.0.0.1:1",
        role="context",
        stages=("summaries", "recaps"),
        fold_state=NoFolds(),
    )
    recapper = worker.recapper
    assert recapper is not None
    recapper.narrative = lambda channel: None
    recap = ChannelRecap(opening="hello", window=[{"x": 1}])
    with (
        patch.object(recaps, "TITLES_KEPT", 3),
        patch.object(recapper, "window_in_memory", lambda channel, recap: []),
        patch.object(recaps, "channel_title", lambda window, opening, summary: opening),
    ):
        for channel in ("a/1", "a/2", "a/3"):
            recapper.title_of(channel, recap)
        recapper.title_of("a/1", recap)  # asked again: the most recent
        recapper.title_of("a/4", recap)
    assert list(recapper.titles) == ["a/3", "a/1", "a/4"]
