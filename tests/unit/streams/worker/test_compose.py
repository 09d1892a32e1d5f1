"""streams.worker.compose: which stage combinations build, and what each build holds.

No broker: building a worker registers agents, timers and views on its Faust app and
connects nothing.
"""

from __future__ import annotations

from collections.abc import Collection

import pytest

from streams.settings import Settings
from streams.worker.compose import EVERY_STAGE, Stage, Worker, build_worker


def _build(stages: Collection[Stage] = EVERY_STAGE) -> Worker:
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    return build_worker(settings, broker="127.0.0.1:1", stages=stages)


def test_every_stage_by_default() -> None:
    worker = _build()
    assert worker.folder is not None
    assert worker.summariser is not None
    assert worker.recapper is not None


def test_the_fold_only_worker_has_no_summaries_or_recaps() -> None:
    worker = _build(("config", "fold"))
    assert worker.folder is not None
    assert worker.summariser is None
    assert worker.recapper is None


def test_a_worker_without_the_fold_stage_has_no_folder() -> None:
    worker = _build(("config", "summaries", "recaps"))
    assert worker.folder is None
    assert worker.summariser is not None and worker.recapper is not None


@pytest.mark.parametrize(
    ("stages", "reason"),
    [
        (("fold", "replicate"), r"unknown stages \['replicate'\]"),
        (("fold", "recaps"), "the recaps stage reads the summaries stage"),
        (("fold", "summaries", "http"), "the http stage serves summaries and recaps"),
    ],
)
def test_impossible_combinations_are_refused(stages: tuple[str, ...], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        _build(stages)  # type: ignore[arg-type]
