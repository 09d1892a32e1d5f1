"""streams.replay.core: the hot loop against the worker's own step, cut-offs by offset
and time, limits, seeds and kept messages. No Kafka."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.model import Message, MessageError, MessageType
from projections.projection import Folded, dump_state, fold, fold_at, load_state
from projections.summarise import batch, default_summariser, summarise_batches
from streams.interfaces.cli.replay import recompute_summary
from streams.records import key_partition, validate_record
from streams.replay import Rec, Replayer
from streams.replay.tables import changelog_record
from tests.factories import conversation
from tests.replay_projections import PairsProjection, TallyV1, TallyV2, message_sequences
from tests.sample_projections import WordCountProjection
from tests.unit.streams.replay.support import (
    ALL,
    BUILTINS,
    CHANNELS,
    COMMITMENTS,
    MAX,
    dumped,
    records_of,
    replayed,
    worker_fold,
)


def test_hot_loop_equals_the_workers_step_on_a_long_conversation() -> None:
    messages = conversation(CHANNELS, 400, seed=5)
    records = records_of(messages, junk_every=25)
    fast = Replayer(ALL)
    fast.feed(0, records)
    exact = Replayer(ALL, exact=True)
    exact.feed(0, records)
    expected = {c: dumped(f) for c, f in worker_fold(ALL, records).items()}
    assert replayed(fast) == expected
    assert replayed(exact) == expected
    assert fast.stats.invalid == 2 * (len(records) - len(messages)) // 2
    assert fast.stats.folded == len(messages)


def own_part(state: dict[str, Any]) -> dict[str, Any]:
    """A state without the field the step joins in (the overview's open count)."""
    return {k: v for k, v in state.items() if k != "open_commitments"}


def test_hot_loop_states_equal_the_pure_fold() -> None:
    messages = conversation(CHANNELS, 300, seed=9)
    replayer = Replayer(BUILTINS)
    replayer.feed(0, records_of(messages))
    for channel in CHANNELS:
        mine = [m for m in messages if m.channel == channel]
        folds = replayer.folds(channel)
        for projection in BUILTINS:
            expected = dump_state(fold(projection, mine))
            assert own_part(folds[projection.name].state) == own_part(expected)
            assert folds[projection.name].version == projection.version
        commitments = load_state(COMMITMENTS, folds["commitments"].state)
        assert folds["overview"].state["open_commitments"] == commitments.open_count()


def test_hot_loop_equals_fold_at_chain_per_projection() -> None:
    messages = conversation(["solo"], 120, seed=3)
    replayer = Replayer(BUILTINS)
    replayer.feed(0, records_of(messages))
    for projection in BUILTINS:
        folded = None
        for offset, message in enumerate(messages):
            folded, _ = fold_at(projection, folded, message, offset)
        assert folded is not None
        replayed_fold = replayer.folds("solo")[projection.name]
        assert own_part(replayed_fold.state) == own_part(folded.state)
        assert replayed_fold.offset == folded.offset


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_hot_loop_equals_worker_for_random_sequences(data: st.DataObject) -> None:
    messages = data.draw(message_sequences(CHANNELS, max_size=60))
    records = records_of(messages, junk_every=data.draw(st.sampled_from([0, 4, 7])))
    replayer = Replayer(ALL)
    replayer.feed(0, records)
    assert replayed(replayer) == {c: dumped(f) for c, f in worker_fold(ALL, records).items()}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_as_of_offset_k_is_the_fold_of_the_first_k_messages(data: st.DataObject) -> None:
    messages = data.draw(message_sequences(CHANNELS, max_size=50))
    k = data.draw(st.integers(0, len(messages)))
    replayer = Replayer(BUILTINS, to_offset=k)
    replayer.feed(0, records_of(messages))
    assert replayer.stats.beyond == len(messages) - k
    for channel in CHANNELS:
        first_k = [m for m in messages[:k] if m.channel == channel]
        folds = replayer.folds(channel)
        if not first_k:
            assert folds == {}
            continue
        for projection in BUILTINS:
            expected = dump_state(fold(projection, first_k))
            assert own_part(folds[projection.name].state) == own_part(expected)
            last = max(i for i, m in enumerate(messages[:k]) if m.channel == channel)
            assert folds[projection.name].offset == last


def test_to_offset_counts_records_not_messages() -> None:
    """Invalid records take offsets too: N is a log position, not a message count."""
    messages = conversation(["solo"], 20, seed=1)
    records = records_of(messages, junk_every=3)
    replayer = Replayer(BUILTINS, to_offset=10)
    replayer.feed(0, records)
    valid = [m for r in records[:10] for m in [_try(r)] if m is not None]
    overview = replayer.folds("solo")["overview"]
    assert overview.state["message_count"] == len(valid)
    assert overview.offset == max(r.offset for r in records[:10] if _try(r) is not None)


def _try(record: Rec) -> Message | None:
    try:
        return validate_record(record.key, record.value, MAX, partition=0, partitions=1)
    except MessageError:
        return None


def test_as_of_time_is_a_prefix_of_each_channel() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def status(i: int, minutes: int, channel: str = "a") -> Message:
        return Message(
            id=f"m{i}",
            channel=channel,
            sender="ann",
            type=MessageType.STATUS,
            content="x",
            created_at=t0 + timedelta(minutes=minutes),
        )

    # channel a's clock steps back after the cut-off: the later message is not folded
    messages = [status(0, 0), status(1, 5), status(2, 20), status(3, 1), status(4, 2, "b")]
    replayer = Replayer(BUILTINS, as_of=t0 + timedelta(minutes=10))
    replayer.feed(0, records_of(messages))
    assert replayer.folds("a")["overview"].state["message_count"] == 2
    assert replayer.folds("a")["overview"].offset == 1
    assert replayer.folds("b")["overview"].state["message_count"] == 1
    assert replayer.stats.after_cutoff == 2


def test_as_of_record_time_uses_the_kafka_timestamp() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    messages = conversation(["solo"], 10, seed=2)
    records = [
        Rec(i, r.key, r.value, int((t0 + timedelta(seconds=i)).timestamp() * 1000))
        for i, r in enumerate(records_of(messages))
    ]
    replayer = Replayer(BUILTINS, as_of=t0 + timedelta(seconds=4), time_field="record")
    replayer.feed(0, records)
    assert replayer.folds("solo")["overview"].state["message_count"] == 5


def test_channel_filter_compares_keys_before_decoding() -> None:
    messages = conversation(CHANNELS, 60, seed=4)
    replayer = Replayer(BUILTINS, channels=["team/beta"])
    replayer.feed(0, records_of(messages))
    assert list(replayer.channels) == ["team/beta"]
    beta = [m for m in messages if m.channel == "team/beta"]
    assert replayer.stats.filtered == len(messages) - len(beta)
    assert replayer.folds("team/beta")["overview"].state["message_count"] == len(beta)


def test_limits_stop_each_projection_at_its_own_offset() -> None:
    messages = conversation(["solo"], 30, seed=6)
    replayer = Replayer(BUILTINS, limit_for=lambda channel, partition: [9, None])
    replayer.feed(0, records_of(messages))
    folds = replayer.folds("solo")
    assert folds["commitments"].state == dump_state(fold(BUILTINS[0], messages[:10]))
    assert own_part(folds["overview"].state) == own_part(dump_state(fold(BUILTINS[1], messages)))


def test_seeded_replay_continues_exactly_like_a_full_one() -> None:
    messages = conversation(CHANNELS, 200, seed=8)
    records = records_of(messages, junk_every=9)
    full = Replayer(ALL)
    full.feed(0, records)
    first = Replayer(ALL)
    first.feed(0, records[:100])
    resumed = Replayer(ALL)
    for channel in first.channels:
        stored = {
            n: Folded.model_validate_json(changelog_record(channel, f)[1])
            for n, f in first.folds(channel).items()
        }
        resumed.seed(channel, 0, stored)
    resumed.feed(0, records[100:])
    assert replayed(resumed) == replayed(full)
    # redelivered records are ignored, as fold_at ignores them
    again = Replayer(ALL)
    for channel in full.channels:
        again.seed(channel, 0, full.folds(channel))
    assert again.feed(0, records[150:]) > 0
    assert replayed(again) == replayed(full)


def test_a_projection_that_always_raises_leaves_no_fold() -> None:
    boom = [
        Message(channel="solo", sender="ann", type=MessageType.STATUS, content="boom")
        for _ in range(3)
    ]
    replayer = Replayer([WordCountProjection(), *BUILTINS])
    replayer.feed(0, records_of(boom))
    assert "word-count" not in replayer.folds("solo")
    assert replayer.stats.errors["word-count"] == 3
    assert replayer.folds("solo")["overview"].state["message_count"] == 3


def test_plain_states_are_normalised_like_the_table_round_trip() -> None:
    messages = conversation(["solo"], 12, seed=2)
    replayer = Replayer([PairsProjection()])
    replayer.feed(0, records_of(messages))
    state = replayer.folds("solo")["pairs"].state
    assert isinstance(state["seen"], list) and all(isinstance(p, list) for p in state["seen"])
    assert replayed(replayer) == {
        c: dumped(f) for c, f in worker_fold([PairsProjection()], records_of(messages)).items()
    }


def test_keep_messages_and_recomputed_summary() -> None:
    messages = conversation(["solo"], 45, seed=12)
    replayer = Replayer(BUILTINS, keep_messages=True)
    replayer.feed(0, records_of(messages))
    kept = replayer.messages_of("solo")
    assert kept == messages

    async def direct() -> Any:
        items = [m for m in kept if m.type is not MessageType.EVENT]
        last = None
        async for result in summarise_batches(default_summariser(None, 3, 15), batch(items, 20)):
            last = result
        return last

    import asyncio

    summary = asyncio.run(recompute_summary(kept, 20, 3, 15))
    expected = asyncio.run(direct())
    assert summary is not None and summary["text"] == expected.text
    assert summary["annotations"] == expected.annotations
    assert asyncio.run(recompute_summary(kept, 20, 3, 15)) == summary  # deterministic
    assert asyncio.run(recompute_summary([], 20, 3, 15)) is None


def test_versions_of_one_projection_fold_differently() -> None:
    messages = conversation(["solo"], 20, seed=1)
    v1, v2 = Replayer([TallyV1()]), Replayer([TallyV2()])
    v1.feed(0, records_of(messages))
    v2.feed(0, records_of(messages))
    assert v1.folds("solo")["tally"].version == 1
    assert v2.folds("solo")["tally"].state == fold(TallyV2(), messages)


def test_records_without_id_or_time_take_them_from_their_position_as_in_the_worker() -> None:
    from projections.model import LogPosition

    stamp = 1_767_225_600_000
    bare = orjson.dumps({"channel": "team/alpha", "sender": "ann", "type": "STATUS"})
    no_time = orjson.dumps({"id": "m9", "channel": "team/alpha", "sender": "bo", "type": "STATUS"})
    deep = orjson.dumps({"channel": "team/alpha", "sender": "ann", "type": "EVENT", "payload": {}})
    deep = deep.replace(b"{}", b'{"a":' * 70 + b"1" + b"}" * 70)  # too deep, and no id
    records = [
        Rec(0, b"team/alpha", bare, stamp),
        Rec(1, b"team/alpha", no_time, stamp + 1000),
        Rec(2, b"team/alpha", deep, stamp),
        Rec(3, b"team/beta", bare, stamp),  # the key is not its channel
    ]
    home = key_partition(b"team/alpha", 4)
    replayer = Replayer(BUILTINS, keep_messages=True, partitions=4)
    replayer.feed(home, records)
    expected = [
        validate_record(
            r.key,
            r.value,
            MAX,
            LogPosition(home, r.offset, r.timestamp),
            partition=home,
            partitions=4,
        )
        for r in records[:2]
    ]
    assert replayer.messages_of("team/alpha") == expected
    assert [m.id for m in expected] == [f"p{home}-o0", "m9"]
    assert replayer.stats.invalid == 2 and replayer.stats.folded == 2


def test_a_sender_outside_the_channels_writers_is_skipped_as_the_worker_dead_letters_it() -> None:
    messages = conversation(CHANNELS, 120, seed=3)
    writers = {"team/alpha": ["planner", "role:coder"]}
    replayer = Replayer(BUILTINS, writers=writers)
    replayer.feed(0, records_of(messages))
    allowed = [m for m in messages if m.channel != "team/alpha" or m.sender in ("planner", "coder")]
    expected = Replayer(BUILTINS)
    expected.feed(0, records_of(allowed))
    refused = len(messages) - len(allowed)
    assert refused > 0 and replayer.stats.refused == refused
    assert replayer.folds("team/alpha")["overview"].state == (
        expected.folds("team/alpha")["overview"].state
    )
    assert set(replayer.folds("team/alpha")["overview"].state["participants"]) <= {
        "planner",
        "coder",
    }
