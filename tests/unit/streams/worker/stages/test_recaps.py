"""The recap stage's pure helpers (the context role) and the watch view, without Kafka."""

import logging
from datetime import UTC, datetime, timedelta
from unittest.mock import AsyncMock, patch

import orjson
import pytest
from rich.console import Console

from projections.model import ActorType, Message, MessageType
from projections.recap import RecapPhase
from projections.recap.title import channel_title
from projections.recap.window import windowed_message
from projections.summarise.llm import Completion
from streams.interfaces.watch import render, status_line
from streams.worker.stages.recaps import (
    RECAP_CODEC,
    ChannelRecap,
    with_message,
    write_recap,
)

NOW = datetime(2026, 6, 1, 10, tzinfo=UTC)
CHANNEL = "store/age"  # on partition 0 of the offline worker's topic


def msg(content: str | None, kind: MessageType = MessageType.STATUS, **extra: object) -> Message:
    return Message.model_validate(
        {"channel": "c", "sender": "ann", "type": kind, "content": content, **extra}
    )


def folded(messages: list[Message]) -> tuple[ChannelRecap, list[Message]]:
    """The recap after `messages` (offsets 0, 1, ...) and its window's messages as the stage
    keeps them (cut, at the window's offsets)."""
    recap = ChannelRecap()
    for offset, message in enumerate(messages):
        recap = with_message(recap, message, offset, 30, NOW)
    return recap, [windowed_message(messages[offset]) for offset in recap.window_offsets]


def test_messages_arm_the_countdown_and_fill_the_window() -> None:
    recap, window = folded([msg("Plan the release train")])
    assert recap.status.phase is RecapPhase.PENDING
    assert recap.status.due_at == NOW + timedelta(seconds=30)
    assert channel_title(window, recap.opening) == "Plan the release train"
    assert recap.message_count == 1 and recap.window_offsets == [0]
    typing = msg(None, MessageType.EVENT, payload={"kind": "typing"})
    later = with_message(recap, typing, 1, 30, NOW + timedelta(seconds=10))
    assert later.status.due_at == NOW + timedelta(seconds=40)  # activity restarts it
    assert later.message_count == 1 and later.window_offsets == [0]  # but is not conversation


def test_window_is_bounded_and_cut() -> None:
    tool = msg("x" * 500, actor_type=ActorType.TOOL, sender="grep")
    recap, window = folded([*(msg(f"m{i}") for i in range(50)), tool])
    assert recap.window_offsets == list(range(31, 51))  # what the stage stores
    last = window[-1]
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
    for count in range(1, len(lines) + 1):
        recap, window = folded([msg(line) for line in lines[:count]])
        found = channel_title(window, recap.opening)
        assert found is None or len(found) <= 60
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
    lines = ["Hmm hmm hmm .", "yeah", "okay", "I think so, yeah."]
    recap, window = folded([msg(line) for line in lines])
    assert channel_title(window, recap.opening) is None


def test_a_message_costs_no_keyphrase_counts_and_old_records_still_read() -> None:
    recap = ChannelRecap()
    for offset in range(200):
        recap = with_message(
            recap, msg(f"The invoice queue {offset} needs sharding."), offset, 30, NOW
        )
    stored = RECAP_CODEC.encode(recap)
    assert not {"keyphrases", "title", "tools", "last_message_at"} & set(stored)
    assert len(orjson.dumps(stored)) < 1500  # positions and a few fields, whatever the count
    # A record of an older format (keyphrase counts, a title, the tools, for views this
    # role no longer serves) reads fine, and those fields are not written back.
    old = {
        **stored,
        "title": "Invoice queue",
        "keyphrases": {"invoice queue": [200, 0]},
        "tools": ["grep"],
        "last_message_at": NOW.isoformat(),
    }
    read = RECAP_CODEC.decode(old)
    assert read.message_count == 200
    again = RECAP_CODEC.encode(with_message(read, msg("more"), 200, 30, NOW))
    assert not {"keyphrases", "title", "tools"} & set(again)


class FakeClient:
    model = "tiny"

    def __init__(self, text: str) -> None:
        self.text = text
        self.prompts: list[tuple[str, str]] = []

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        self.prompts.append((system, user))
        return Completion(self.text, "tiny", 120, 30, 15)


async def test_write_recap_with_a_model_cleans_and_costs() -> None:
    client = FakeClient("- We are splitting the parser.\nThe lexer is done.")
    said = [msg("split parser 9f8e7d6c5b4a3f2e1d0c")]
    text, cost = await write_recap(client, said, "Summary so far")
    assert text == "We are splitting the parser. The lexer is done."
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
    assert "9f8e7d6c5b4a" not in user
    # Told no commitments: where they stand is rendered beside the recap when it is read.
    assert "commitments" not in user.lower() and "Do not say what is still open" in system


async def test_write_recap_without_a_model_is_extractive_history() -> None:
    said = [
        msg("ship the release notes", MessageType.COMMAND, correlation_id="z"),
        msg("release notes drafted", MessageType.DONE, correlation_id="z", in_reply_to="m0"),
    ]
    text, cost = await write_recap(None, said, None)
    assert cost == {"tier": "extractive"}
    assert "Done: ann release notes drafted." in text
    assert "ship the release notes" not in text  # what was asked is the state part's


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


class CountingModel:
    """A recap model that answers at once and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        self.calls += 1
        return Completion(
            text="A recap by the model.",
            model="fake",
            prompt_tokens=1,
            completion_tokens=1,
            latency_ms=1.0,
        )


async def test_channels_going_quiet_together_are_recapped_within_the_llm_budget() -> None:
    """The furnace, bounded and visible: a tick takes at most a lot (the newest activity
    first; the rest wait in the index), the model writes at most
    CHORUS_RECAP_LLM_PER_MINUTE recaps a minute, the others are extractive, and every
    channel gets its recap, its window read back from the log together with its lot's."""
    import asyncio
    from typing import Any
    from unittest.mock import patch

    from projections.model import encode_message
    from streams.kafka.batches import Published
    from streams.records import RecapRecord, key_partition
    from streams.worker.runtime import Runtime
    from streams.worker.stages.recaps import RECAP_LOT, LlmBudget
    from tests.unit.streams.worker.offline import TopicRecords, offline_worker

    worker = offline_worker("context", stages=("summaries", "recaps"))
    chorus, recapper = worker.runtime, worker.recapper
    assert recapper is not None
    chorus.ownership.owned_partitions = lambda: frozenset(range(4))  # type: ignore[method-assign]
    model = CountingModel()
    recapper.client = model  # type: ignore[assignment]
    recapper.budget = LlmBudget(5, clock=lambda: 0.0)  # five, and the minute never passes
    recapper.clock = lambda: NOW
    log = TopicRecords()
    recapper.bodies.reader = log  # type: ignore[assignment]
    channels = [f"quiet/c{n}" for n in range(3 * RECAP_LOT)]
    offsets = dict.fromkeys(range(4), 0)
    for channel in channels:
        partition = key_partition(channel.encode(), 4)
        said = msg(f"about {channel}", channel=channel)
        log.records[(partition, offsets[partition])] = (channel.encode(), encode_message(said))
        await recapper.on_message(said, partition, offsets[partition])
        offsets[partition] += 1
    recapper.bodies.memory.cache.clear()  # as after a restart: windows are read back
    recaps = TopicRecords()
    recapper.latest.reader = recaps  # type: ignore[assignment]
    published: list[RecapRecord] = []

    async def publish(_: Runtime, topic: Any, records: Any) -> Published:
        published.extend(RecapRecord.model_validate_json(value) for _, value, _ in records)
        return Published(list(range(len(records))), [])

    def written() -> set[str]:
        return {r.channel for r in published if r.phase is RecapPhase.COMPLETED}

    later = NOW + timedelta(minutes=5)
    with patch.object(Runtime, "publish", publish):
        assert await recapper.check_deadlines(later) == RECAP_LOT  # the rest wait
        assert chorus.meter.recaps_deferred._value.get() >= 1
        recapper.clock = lambda: later  # the records are read back when they are due
        while len(written()) < len(channels):
            await recapper.check_deadlines(later)
            await asyncio.gather(*recapper.lots.running)
            for record in [r for r in published if r.channel in recapper.generating]:
                partition = key_partition(record.channel.encode(), 4)
                offset = len(recaps.records)  # the agent reads it back, at its offset
                recaps.records[(partition, offset)] = (record.channel.encode(), record.to_bytes())
                recapper.on_recap(record.channel.encode(), record.to_bytes(), partition, offset)
    assert sorted(r.channel for r in published if r.phase is RecapPhase.COMPLETED) == sorted(
        channels
    )  # every one, once
    assert model.calls == 5
    tiers = [r.tier for r in published if r.phase is RecapPhase.COMPLETED]
    assert tiers.count("synthesised") == 5 and tiers.count("extractive") == len(channels) - 5
    assert chorus.meter.recaps_over_budget._value.get() == len(channels) - 5
    # Each lot's windows were read back together: a read or two a lot, not one a channel.
    assert len(log.reads) <= 4 * 3


async def test_a_recap_generating_when_its_partition_moved_is_recapped_when_it_is_back() -> None:
    """Issue 40: a generation in flight when its partition moved away stayed in flight for
    ever here, so once the partition came back the channel was never recapped again."""
    from streams.records import RecapRecord, key_partition
    from tests.unit.streams.worker.offline import offline_worker

    worker = offline_worker("context", stages=("summaries", "recaps"))
    chorus, recapper = worker.runtime, worker.recapper
    assert recapper is not None
    channel = "moving/c1"
    partition = key_partition(channel.encode(), 4)
    owned = {partition}
    chorus.ownership.owned_partitions = lambda: frozenset(owned)  # type: ignore[method-assign]
    recapper.clock = lambda: NOW
    await recapper.on_message(msg("hello", channel=channel), partition, 0)
    later = NOW + timedelta(minutes=1)
    writing = patch.object(recapper, "write_lot", AsyncMock())
    with writing:  # the writer never runs: the worker gives the channel up meanwhile
        assert await recapper.check_deadlines(later) == 1  # taken: in flight here
    generation = recapper.recap_of(channel, partition).status.generation
    started = RecapRecord(
        channel=channel, text=None, phase=RecapPhase.GENERATING, generation=generation
    )
    recapper.clock = lambda: later
    recapper.on_recap(channel.encode(), started.to_bytes(), partition, 0)  # read back
    assert recapper.recap_of(channel, partition).status.phase is RecapPhase.GENERATING
    owned.clear()
    chorus.ownership.assigned(frozenset())  # moved away ...
    owned.add(partition)
    chorus.ownership.assigned(frozenset(owned))  # ... and back
    orphaned = later + recapper.orphaned_after + timedelta(seconds=1)
    with patch.object(recapper, "write_lot", AsyncMock()):
        assert await recapper.check_deadlines(orphaned) == 1  # found orphaned, taken again


def test_a_recap_whose_key_names_another_channel_than_its_record_is_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The follower checks a record's partition by its key (Kafka's partitioner reads the
    key); the stage files a recap by the channel its record names. A record whose two
    disagree could be filed under a partition its channel is not on."""
    from streams.records import RecapRecord, key_partition
    from tests.unit.streams.worker.offline import offline_worker

    worker = offline_worker("context", stages=("summaries", "recaps"))
    recapper = worker.recapper
    assert recapper is not None
    key = "team/plan"
    partition = key_partition(key.encode(), 4)
    other = next(
        f"other/c{n}" for n in range(100) if key_partition(f"other/c{n}".encode(), 4) != partition
    )
    record = RecapRecord(channel=other, text="done", phase=RecapPhase.COMPLETED, generation=1)
    with caplog.at_level("WARNING"):
        recapper.on_recap(key.encode(), record.to_bytes(), partition, 0)
    assert recapper.recap_of(other, partition).latest is None
    assert f"{other!r}" in caplog.text
    named = record.model_copy(update={"channel": key})
    recapper.on_recap(key.encode(), named.to_bytes(), partition, 1)
    assert recapper.recap_of(key, partition).latest == [partition, 1]


async def test_recaps_in_flight_are_bounded_and_a_tick_skips_them_without_reading() -> None:
    """A million channels going quiet together: a tick takes none while RECAPS_IN_FLIGHT
    are in flight, passes over those in flight without reading their status, and gives the
    event loop back while it reads the others."""
    from streams.records import key_partition
    from streams.worker.deadlines import DUE_ENTRIES_PER_SLICE
    from streams.worker.stages.recaps import RECAPS_IN_FLIGHT
    from tests.unit.streams.worker.offline import offline_worker, turns_given

    worker = offline_worker("context", stages=("summaries", "recaps"))
    chorus, recapper = worker.runtime, worker.recapper
    assert recapper is not None
    chorus.ownership.owned_partitions = lambda: frozenset(range(4))  # type: ignore[method-assign]
    recapper.clock = lambda: NOW
    quiet = [f"quiet/c{n}" for n in range(4 * DUE_ENTRIES_PER_SLICE)]
    for offset, channel in enumerate(quiet):
        said = msg(f"about {channel}", channel=channel)
        await recapper.on_message(said, key_partition(channel.encode(), 4), offset)
    later = NOW + timedelta(minutes=5)
    read: list[str] = []
    recap_of = recapper.recap_of
    recapper.recap_of = lambda c, p: read.append(c) or recap_of(c, p)  # type: ignore[method-assign, func-returns-value]

    for n in range(RECAPS_IN_FLIGHT):  # in flight, as taken by earlier ticks
        recapper.generating[f"other/c{n}"] = 0
    assert await recapper.check_deadlines(later) == 0 and read == []
    assert chorus.meter.recaps_deferred._value.get() == 1
    del recapper.generating["other/c0"], recapper.generating["other/c1"]
    with patch.object(recapper, "write_lot", AsyncMock()):
        assert await recapper.check_deadlines(later) == 2  # up to the bound, not a lot past it
    assert len(recapper.generating) == RECAPS_IN_FLIGHT
    recapper.generating.clear()
    read.clear()
    in_flight = quiet[: len(quiet) // 2]
    for channel in in_flight:
        recapper.generating[channel] = 0
    with patch.object(recapper, "write_lot", AsyncMock()):
        taken, turns = await turns_given(recapper.check_deadlines(later))
    assert taken == len(quiet) - len(in_flight)
    assert not set(read) & set(in_flight)
    assert turns >= len(read) // DUE_ENTRIES_PER_SLICE >= 2


async def test_recaps_being_written_as_the_role_stops_are_stopped_before_its_producer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 40: a lot of recaps still being written when the role stopped published after
    Faust had stopped its producer: 64 "Producer service not yet started" tracebacks at a
    restart. The role's stop cancels them first, quietly, and none starts after; the
    channels stay due in the index, so the next start recaps them."""
    from streams.records import key_partition
    from tests.unit.streams.worker.offline import offline_worker, stopped_while_publishing

    worker = offline_worker("context", stages=("summaries", "recaps"))
    chorus, recapper = worker.runtime, worker.recapper
    assert recapper is not None
    chorus.ownership.owned_partitions = lambda: frozenset(range(4))  # type: ignore[method-assign]
    recapper.clock = lambda: NOW
    channels = ["stopping/c1", "stopping/c2"]
    for offset, channel in enumerate(channels):
        said = msg(f"about {channel}", channel=channel)
        await recapper.on_message(said, key_partition(channel.encode(), 4), offset)
    later = NOW + timedelta(minutes=5)
    taken = await stopped_while_publishing(
        chorus, lambda: recapper.check_deadlines(later), recapper.outbox
    )
    assert taken == len(channels) and not recapper.lots
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    recapper.generating.clear()  # as if nothing were in flight: still none taken
    assert await recapper.check_deadlines(later + timedelta(seconds=1)) == 0
    assert not recapper.generating
    for channel in channels:  # still due: taken again by the next start
        partition = key_partition(channel.encode(), 4)
        assert [e.channel for e in recapper.index.due(partition, later, 10)] == [channel]
