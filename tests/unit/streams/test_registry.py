"""streams.registry: the built-in projections and those named by import path."""

from __future__ import annotations

import pytest

from projections.commitments import CommitmentProjection
from projections.overview import ChannelOverviewProjection
from streams.registry import ProjectionImportError, load_projection, registered_projections
from streams.settings import Settings
from tests.sample_projections import WordCountProjection

# A string has no name, version, identity() or apply().
NOT_A_PROJECTION = "tests.unit.streams.test_registry:NOT_A_PROJECTION"


def test_the_built_ins_come_first_with_default_bounds() -> None:
    commitments, overview = registered_projections([])
    assert isinstance(commitments, CommitmentProjection)
    assert isinstance(overview, ChannelOverviewProjection)
    assert [commitments.name, overview.name] == ["commitments", "overview"]
    assert commitments.max_active == CommitmentProjection().max_active


def test_the_built_ins_take_their_bounds_from_the_settings() -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        commitments_keep_terminal=3,
        commitments_max_active=4,
        overview_max_participants=5,
        overview_max_topics=6,
    )
    commitments, overview = registered_projections([], settings)
    assert isinstance(commitments, CommitmentProjection)
    assert isinstance(overview, ChannelOverviewProjection)
    assert (commitments.keep_terminal, commitments.max_active) == (3, 4)
    assert (overview.max_participants, overview.max_topics) == (5, 6)


def test_a_class_path_is_instantiated_and_appended() -> None:
    projections = registered_projections(["tests.sample_projections:WordCountProjection"])
    assert [p.name for p in projections] == ["commitments", "overview", "word-count"]
    assert isinstance(projections[-1], WordCountProjection)


def test_an_instance_is_used_as_it_is() -> None:
    assert load_projection("tests.unit.streams.test_registry:AN_INSTANCE") is AN_INSTANCE


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("tests.sample_projections", "must look like 'package.module:Name'"),
        (":WordCountProjection", "must look like 'package.module:Name'"),
        ("tests.no_such_module:Name", "cannot import projection"),
        ("tests.sample_projections:NoSuchName", "cannot import projection"),
        (NOT_A_PROJECTION, "is not a ChannelProjection"),
    ],
)
def test_bad_paths_say_what_is_wrong(path: str, reason: str) -> None:
    with pytest.raises(ProjectionImportError, match=reason):
        load_projection(path)


def test_names_must_be_unique() -> None:
    path = "tests.sample_projections:WordCountProjection"
    with pytest.raises(ProjectionImportError, match=r"repeated: \['word-count'\]"):
        registered_projections([path, path])


AN_INSTANCE = WordCountProjection()
