"""The replay's functional core: the hot loop against the worker's own step, cut-offs,
comparisons, diffs, changelog records and rebuild plans. No Kafka."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from faust.serializers import codecs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.channel import MAX_STATE_BYTES, step
from projections.commitments import CommitmentProjection
from projections.model import Message, MessageError, MessageType, encode_message
from projections.overview import ChannelOverviewProjection
from projections.projection import Folded, dump_state, fold, fold_at, load_state
from projections.summarise import batch, default_summariser, summarise_batches
from streams.interfaces.cli.replay import recompute_summary, replay_command
from streams.records import key_partition, validate_record
from streams.replay import Difference, Rec, Replayer, render_diff
from streams.replay.compare import (
    compare_channel,
    live_folds,
    sample_channels,
    snapshot_folds,
    verify_limits,
)
from streams.replay.core import state_view
from streams.replay.tables import RebuildMarker, changelog_record, plan_rebuild
from streams.settings import get_settings
from tests.factories import conversation
from tests.replay_projections import PairsProjection, TallyV1, TallyV2, message_sequences
from tests.sample_projections import WordCountProjection

MAX = 1024 * 1024
CHANNELS = ["team/alpha", "team/beta", "ops/x"]
COMMITMENTS = CommitmentProjection()
BUILTINS: list[Any] = [COMMITMENTS, ChannelOverviewProjection()]
ALL: list[Any] = [*BUILTINS, WordCountProjection(), PairsProjection(), TallyV1()]


def records_of(messages: list[Message], junk_every: int = 0) -> list[Rec]:
    """The log: each message keyed by its channel, with invalid records mixed in."""
    records: list[Rec] = []
    for message in messages:
        if junk_every and len(records) % junk_every == junk_every - 1:
            records.append(Rec(len(records), message.channel.encode(), b"{not json"))
            records.append(Rec(len(records), b"wrong/key", encode_message(message)))
        stamp = int(message.created_at.timestamp() * 1000)
        records.append(Rec(len(records), message.channel.encode(), encode_message(message), stamp))
    return records


def worker_fold(
    projections: list[Any], records: list[Rec], max_state_bytes: int = MAX_STATE_BYTES
) -> dict[str, dict[str, Folded]]:
    """What `streams.worker.stages.fold.Folder.fold` leaves in rocksdb tables: `step` per record,
    every applied fold stored as JSON and read back for the next record."""
    tables: dict[str, dict[str, bytes]] = {p.name: {} for p in projections}
    for record in records:
        try:
            message = validate_record(record.key, record.value, MAX, partition=0, partitions=1)
        except MessageError:
            continue
        channel = message.channel
        stored = {
            name: Folded.model_validate(orjson.loads(table[channel])) if channel in table else None
            for name, table in tables.items()
        }
        for done in step(
            projections, stored, message, record.offset, max_state_bytes=max_state_bytes
        ):
            if done.applied:
                tables[done.projection.name][channel] = orjson.dumps(
                    done.folded.model_dump(mode="json")
                )
    result: dict[str, dict[str, Folded]] = {}
    for name, table in tables.items():
        for channel, raw in table.items():
            result.setdefault(channel, {})[name] = Folded.model_validate(orjson.loads(raw))
    return result


def dumped(folds: dict[str, Folded]) -> dict[str, Any]:
    return {name: f.model_dump(mode="json") for name, f in folds.items()}


def replayed(replayer: Replayer) -> dict[str, dict[str, Any]]:
    return {c: dumped(replayer.folds(c)) for c in replayer.channels if replayer.folds(c)}


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


# --- comparing and rendering ------------------------------------------------------------------


def folded(offset: int, state: Any, version: int = 1, name: str = "overview") -> Folded:
    return Folded(projection=name, version=version, offset=offset, state=state)


def test_compare_channel_kinds() -> None:
    live = {
        "a": folded(3, {"n": 1}),
        "b": folded(3, {"n": 1}),
        "c": folded(3, {"n": 1}),
        "d": folded(3, {"n": 1}, version=2),
        "e": folded(3, {"n": 1}),
    }
    replay = {
        "a": folded(3, {"n": 1}),
        "b": folded(3, {"n": 2}),
        "c": folded(2, {"n": 1}),
        "d": folded(3, {"n": 1}),
        "f": folded(1, {}),
    }
    kinds = {d.projection: d.kind for d in compare_channel("ch", live, replay, "abcdefg")}
    assert kinds == {
        "b": "state",
        "c": "offset",
        "d": "version",
        "e": "missing-replay",
        "f": "missing-live",
    }


def test_hash_comparison_ignores_key_order() -> None:
    live = {"x": folded(1, {"b": 1, "a": [1, {"y": 2, "x": 1}]})}
    replay = {"x": folded(1, {"a": [1, {"x": 1, "y": 2}], "b": 1})}
    assert compare_channel("ch", live, replay, ["x"]) == []


def test_render_diff_shows_the_changed_lines() -> None:
    difference = Difference(
        "team/a",
        "overview",
        "state",
        folded(5, {"message_count": 999, "topics": ["general"]}),
        folded(5, {"message_count": 6, "topics": ["general"]}),
    )
    text = render_diff(difference)
    assert text.splitlines()[0] == "--- live team/a [overview]"
    assert text.splitlines()[1] == "+++ replay team/a [overview]"
    assert '-    "message_count": 999,' in text
    assert '+    "message_count": 6,' in text
    assert "states differ" in difference.describe()
    assert "v1@5" in difference.describe()


def test_render_diff_of_a_missing_fold_and_truncation() -> None:
    missing = Difference("c", "p", "missing-live", None, folded(2, {"k": list(range(200))}))
    text = render_diff(missing, max_lines=20)
    assert text.count("\n") == 20
    assert text.endswith("more diff lines)")
    assert all(line.startswith(("+", "-", "@", ".")) for line in text.splitlines())


def test_live_folds_reads_the_state_view_and_round_trips() -> None:
    folds = {"overview": folded(4, {"n": 1}), "tally": folded(2, {"ann": 1}, name="tally")}
    view = orjson.loads(orjson.dumps(state_view("team/a", folds)))
    assert view["channel"] == "team/a"
    assert live_folds(view) == folds
    assert live_folds(None) == {}


def test_verify_limits() -> None:
    projections: list[Any] = [TallyV1(), *BUILTINS]
    live = {"known": {"tally": folded(7, {}, name="tally"), "overview": folded(9, {})}}
    limit_for = verify_limits(projections, live, {0: 5, 1: 12})
    # present → its own offset; absent → furthest known (max of folds and committed - 1)
    assert limit_for("known", 0) == [7, 9, 9]
    assert limit_for("known", 1) == [7, 11, 9]
    assert limit_for("unknown", 1) == [11, 11, 11]
    assert limit_for("unknown", 3) == [-1, -1, -1]


def test_sample_and_snapshot() -> None:
    channels = [f"c{i}" for i in range(10)]
    sample = sample_channels(channels, 3, random.Random(1))
    assert len(sample) == 3 and sample == sorted(sample) and set(sample) <= set(channels)
    assert sample_channels(channels[:2], 5, random.Random(1)) == ["c0", "c1"]
    tables = {
        "overview": {"c1": folded(3, {"n": 1}).model_dump(mode="json")},
        "commitments": {},
    }

    def read(channel: str, name: str) -> Folded | None:
        raw = tables[name].get(channel)
        return Folded.model_validate(raw) if raw is not None else None

    assert snapshot_folds(read, tables, ["c1", "c2"]) == {
        "c1": {"overview": folded(3, {"n": 1})},
        "c2": {},
    }


# --- rebuild ----------------------------------------------------------------------------------


def test_changelog_record_is_what_fausts_json_codec_writes() -> None:
    fold_ = folded(3, {"participants": {"ann": 1}, "when": "2026-01-01T00:00:00Z"})
    key, value = changelog_record("team/a", fold_)
    assert key == codecs.dumps("json", "team/a")
    assert orjson.loads(value) == orjson.loads(codecs.dumps("json", fold_.model_dump(mode="json")))
    assert Folded.model_validate(codecs.loads("json", value)) == fold_


def marker(status: str = "built", ends: dict[int, int] | None = None) -> RebuildMarker:
    return RebuildMarker(
        app_id="app",
        projection="tally",
        version=2,
        table="fold-tally-v2",
        changelog="app-fold-tally-v2-changelog",
        status=status,
        through={0: 10, 1: 4},
        changelog_end=ends if ends is not None else {0: 3, 1: 2},
    )


def test_rebuild_plans() -> None:
    p = TallyV2()
    assert plan_rebuild(p, None, None).mode == "full"
    assert plan_rebuild(p, {0: 0, 1: 0}, None).mode == "full"
    assert plan_rebuild(p, None, None, deployed=False).mode == "not-needed"
    assert plan_rebuild(p, {0: 3, 1: 2}, marker()).mode == "incremental"
    assert plan_rebuild(p, {0: 5, 1: 2}, marker()).mode == "live"  # a worker wrote since
    assert plan_rebuild(p, {0: 5, 1: 2}, None).mode == "live"  # a worker built it itself
    assert plan_rebuild(p, {0: 9, 1: 9}, marker("building")).mode == "full"
    assert plan_rebuild(p, {0: 0, 1: 0}, marker(ends={0: 0, 1: 0})).mode == "incremental"


def test_marker_round_trips_with_integer_partitions() -> None:
    original = marker()
    again = RebuildMarker.model_validate_json(orjson.dumps(original.model_dump(mode="json")))
    assert again.through == {0: 10, 1: 4} and again == original
    assert original.key() == b"app/fold-tally-v2"


def test_versions_of_one_projection_fold_differently() -> None:
    messages = conversation(["solo"], 20, seed=1)
    v1, v2 = Replayer([TallyV1()]), Replayer([TallyV2()])
    v1.feed(0, records_of(messages))
    v2.feed(0, records_of(messages))
    assert v1.folds("solo")["tally"].version == 1
    assert v2.folds("solo")["tally"].state == fold(TallyV2(), messages)


# --- command line (no broker needed for usage errors) -----------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--to-offset", "3", "--as-of", "2026-01-01T00:00:00Z"], "not both"),
        (["--verify", "--rebuild"], "cannot be combined"),
        (["--verify", "--to-offset", "3"], "works on the whole log"),
        (["--rebuild", "--channel", "a"], "whole tables"),
        (["--projection", "nope"], "unknown projection"),
        (["--as-of", "yesterday"], "ISO 8601"),
    ],
)
def test_usage_errors(args: list[str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORUS_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(replay_command, args)
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2, result.output
    assert message in result.output


# --- the batched reader, against a fake consumer ----------------------------------------------


class FakeConsumer:
    """Partitions of records; `getmany` hands out at most `step` records per partition."""

    def __init__(
        self, partitions: dict[int, list[Rec]], ends: dict[int, int], step: int = 4
    ) -> None:
        self.partitions = partitions
        self.ends = ends
        self.step = step
        self.positions: dict[int, int] = {}
        self.paused: set[int] = set()
        self.calls = 0

    def assign(self, tps: list[Any]) -> None:
        self.assigned = {tp.partition for tp in tps}

    def seek(self, tp: Any, offset: int) -> None:
        self.positions[tp.partition] = offset

    def pause(self, tp: Any) -> None:
        self.paused.add(tp.partition)

    async def position(self, tp: Any) -> int:
        return self.positions[tp.partition]

    async def getmany(self, *tps: Any, timeout_ms: int, max_records: int) -> dict[Any, list[Rec]]:
        self.calls += 1
        out = {}
        for tp in tps:
            if tp.partition in self.paused:
                continue
            start = self.positions[tp.partition]
            records = [r for r in self.partitions[tp.partition] if r.offset >= start][: self.step]
            if records:
                out[tp] = records
                self.positions[tp.partition] = records[-1].offset + 1
            else:  # only a gap is left: the position moves to the end offset
                self.positions[tp.partition] = self.ends[tp.partition]
        return out


def test_read_spans_stops_each_partition_at_its_span() -> None:
    import asyncio

    from streams.replay.log import Span, read_spans

    log = {
        0: [Rec(i, b"k", b"v") for i in range(10)],
        1: [Rec(i, b"k", b"v") for i in [0, 1, 2, 5, 6]],  # compacted: gaps
        2: [Rec(i, b"k", b"v") for i in range(3)],
        3: [Rec(i, b"k", b"v") for i in [0, 1]],  # offsets 2 and 3 compacted away
    }
    kafka = FakeConsumer(log, ends={0: 10, 1: 7, 2: 3, 3: 4})
    seen: dict[int, list[int]] = {}
    progress: dict[int, int] = {}

    def on_batch(partition: int, records: list[Any]) -> None:
        seen.setdefault(partition, []).extend(r.offset for r in records)

    def on_progress(partition: int, count: int) -> None:
        progress[partition] = progress.get(partition, 0) + count

    spans = [Span(0, 2, 7), Span(1, 0, 4), Span(2, 3, 3), Span(3, 0, 4)]
    total = asyncio.run(read_spans(kafka, "t", spans, on_batch, on_progress))
    assert seen == {0: [2, 3, 4, 5, 6], 1: [0, 1, 2], 3: [0, 1]}
    assert total == 10 and progress == {0: 5, 1: 3, 3: 2}
    assert kafka.paused == {0, 1, 3}


def test_run_shadow_check_samples_owned_channels_and_reports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    import streams.replay.checks as checks_module
    from streams.settings import Settings

    class Host:
        def __init__(self) -> None:
            self.settings = Settings(bootstrap_servers="127.0.0.1:1")
            self.projections: list[Any] = BUILTINS
            self.folds: dict[str, Any] = {
                "overview": {
                    "mine/a": folded(3, {"n": 1}).model_dump(mode="json"),
                    "theirs/b": folded(4, {"n": 2}).model_dump(mode="json"),
                },
                "commitments": {},
            }

        def folded(self, channel: str, name: str) -> Folded | None:
            raw = self.folds[name].get(channel)
            return Folded.model_validate(raw) if raw is not None else None

        def messages_partition(self, channel: str) -> int | None:
            return 0 if channel.startswith("mine/") else None

    checked: list[Any] = []
    found = Difference("mine/a", "overview", "state", folded(3, {"n": 1}), folded(3, {"n": 5}))

    async def fake_check(settings: Any, projections: Any, snapshot: Any) -> list[Difference]:
        checked.append(snapshot)
        return [found]

    monkeypatch.setattr(checks_module, "shadow_check", fake_check)  # where the timer finds it
    reported: list[Difference] = []

    async def report(difference: Difference) -> None:
        reported.append(difference)

    result = asyncio.run(checks_module.run_shadow_check(Host(), 5, random.Random(0), report))
    assert checked == [{"mine/a": {"overview": folded(3, {"n": 1})}}]  # only owned channels
    assert result == reported == [found]


def test_partitions_are_shared_out_evenly_and_deterministically() -> None:
    from streams.replay.log import Span
    from streams.replay.parallel import share_partitions

    spans = [Span(0, 0, 100), Span(1, 0, 10), Span(2, 0, 90), Span(3, 0, 0), Span(4, 5, 25)]
    shares = share_partitions(spans, 2)
    # Largest first into the smallest share: 100 | 90, +20 | 110, +10 → 110 | 110.
    assert shares == [[Span(0, 0, 100), Span(1, 0, 10)], [Span(2, 0, 90), Span(4, 5, 25)]]
    assert share_partitions(spans, 2) == shares
    # Never more shares than non-empty spans; an empty span is read by nobody.
    assert [len(s) for s in share_partitions(spans, 8)] == [1, 1, 1, 1]
    assert share_partitions([Span(3, 4, 4)], 2) == []
    assert share_partitions(spans, 1) == [[s for s in spans if s.size]]


def test_merged_shares_equal_one_replayer_over_every_partition() -> None:
    from streams.replay.parallel import _Part, merge_parts

    # Three channels, each in its own partition of four, with invalid records mixed in.
    by_partition = {
        key_partition(channel.encode(), 4): records_of(
            conversation([channel], 60, seed=index), junk_every=9
        )
        for index, channel in enumerate(CHANNELS)
    }
    assert sorted(by_partition) == [1, 2, 3]
    whole = Replayer(ALL, partitions=4)
    for partition, records in by_partition.items():
        whole.feed(partition, records)
    parts = []
    for share in ([1, 3], [2]):
        one = Replayer(ALL, partitions=4)
        for partition in share:
            one.feed(partition, by_partition[partition])
        parts.append(_Part(one.channels, one.stats, one.dirty))
    merged = Replayer(ALL, partitions=4)
    merge_parts(merged, parts)
    assert replayed(merged) == replayed(whole)
    assert merged.stats == whole.stats and merged.stats.invalid > 0
    assert merged.dirty == set(CHANNELS)


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


def test_fewer_collections_while_folding_and_the_thresholds_restored_after() -> None:
    import gc

    from streams.replay.parallel import fewer_collections

    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_collections(threshold=before[0] + 1234):
        assert gc.get_threshold() == (before[0] + 1234, *before[1:])
        raise RuntimeError("a failed replay")
    assert gc.get_threshold() == before
    with fewer_collections(threshold=1):  # never more often than before
        assert gc.get_threshold() == before


def test_old_versions_changelogs_include_a_split_folds_ended_table() -> None:
    from projections.commitments import CommitmentProjection
    from streams.replay.tables import old_version_changelogs

    class CommitmentsV3(CommitmentProjection):
        version = 3

    topics = [
        "app-fold-commitments-v1-changelog",
        "app-fold-commitments-v2-changelog",
        "app-fold-commitments-v2-ended-changelog",
        "app-fold-commitments-v3-changelog",
        "app-fold-commitments-v3-ended-changelog",
        "app-fold-overview-v1-changelog",
        "other-fold-commitments-v1-changelog",
    ]
    assert old_version_changelogs("app", CommitmentsV3(), topics) == [
        "app-fold-commitments-v1-changelog",
        "app-fold-commitments-v2-changelog",
        "app-fold-commitments-v2-ended-changelog",
    ]
