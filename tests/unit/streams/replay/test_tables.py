"""streams.replay.tables: changelog records as Faust writes them, rebuild markers and plans.
No Kafka."""

from __future__ import annotations

import orjson
from faust.serializers import codecs

from projections.projection import Folded
from streams.replay.tables import RebuildMarker, changelog_record, plan_rebuild
from tests.replay_projections import TallyV2
from tests.unit.streams.replay.support import folded


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
    # A worker serves it, although it has not written its changelog yet (its checkpoint).
    assert plan_rebuild(p, {0: 3, 1: 2}, marker("served")).mode == "live"
    assert plan_rebuild(p, None, marker("served")).mode == "live"


def test_marker_round_trips_with_integer_partitions() -> None:
    original = marker()
    again = RebuildMarker.model_validate_json(orjson.dumps(original.model_dump(mode="json")))
    assert again.through == {0: 10, 1: 4} and again == original
    assert original.key() == b"app/fold-tally-v2"


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
