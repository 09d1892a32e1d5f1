"""streams.replay.compare: live against replayed folds, diffs, verify limits, samples. No Kafka."""

from __future__ import annotations

import random
from typing import Any

import orjson

from projections.projection import Folded
from streams.replay import Difference, render_diff
from streams.replay.compare import (
    compare_channel,
    live_folds,
    sample_channels,
    snapshot_folds,
    verify_limits,
)
from streams.replay.core import state_view
from tests.replay_projections import TallyV1
from tests.unit.streams.replay.support import BUILTINS, folded


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

    def read(channel: str) -> dict[str, Folded | None]:
        raws = {name: table.get(channel) for name, table in tables.items()}
        return {name: Folded.model_validate(raw) if raw else None for name, raw in raws.items()}

    assert snapshot_folds(read, ["c1", "c2"]) == {
        "c1": {"overview": folded(3, {"n": 1})},
        "c2": {},
    }
