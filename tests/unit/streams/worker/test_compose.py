"""streams.worker.compose: which stage combinations build, and what each build holds.

No broker: building a worker registers agents, timers and views on its Faust app and
connects nothing.
"""

from __future__ import annotations

from collections.abc import Collection

import pytest

from streams.settings import Settings
from streams.worker.compose import EVERY_STAGE, Stage, Worker, build_worker
from streams.worker.runtime import Role
from streams.worker.stages.summaries import Summariser


def _build(stages: Collection[Stage] | None = EVERY_STAGE, role: Role = "fold") -> Worker:
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    return build_worker(settings, broker="127.0.0.1:1", stages=stages, role=role)


def test_every_stage_by_default() -> None:
    worker = _build()
    assert worker.folder is not None
    assert worker.summariser is not None
    assert worker.recapper is None and worker.recaps is not None  # the context role's


def test_the_fold_only_worker_has_no_summaries_or_recaps() -> None:
    worker = _build(("config", "fold"))
    assert worker.folder is not None
    assert worker.summariser is None
    assert worker.recapper is None


def test_a_worker_without_the_fold_stage_has_no_folder() -> None:
    worker = _build(("config", "summaries", "recaps"))
    assert worker.folder is None
    assert worker.summariser is not None and worker.recaps is not None


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


def test_the_fold_role_reads_summaries_and_recaps_and_does_no_text_work() -> None:
    worker = _build(None)
    app = worker.runtime.app
    assert app.conf.id == "chorus" and app.conf.web_port == 6066
    assert not isinstance(worker.summariser, Summariser)  # the read side only
    # Recaps are the context role's: the views read them from it, nothing is kept here.
    assert worker.recapper is None and worker.recaps is not None
    assert set(app.agents) == {"channel-config", "fold-messages", "record-summaries"}
    assert "summary-pending" not in app.tables and "fold-positions" in app.tables
    assert "recap-status" not in app.tables


def test_the_context_role_is_an_app_of_its_own_without_fold_tables() -> None:
    worker = _build(None, role="context")
    app = worker.runtime.app
    assert app.conf.id == "chorus-context" and app.conf.web_port == 6067
    assert worker.folder is None and worker.feed is not None
    assert isinstance(worker.summariser, Summariser)
    assert worker.recapper is not None and "recap-status" in app.tables
    assert "fold-messages" not in app.agents and "feed-messages" in app.agents
    assert "summary-state-changes" not in app.agents  # it reads the log once, no driver event
    assert not worker.runtime.folds and not any(name.startswith("fold-") for name in app.tables)
    assert str(app.conf.datadir).endswith("context")


def test_the_context_role_refuses_the_fold_stages() -> None:
    with pytest.raises(ValueError, match=r"unknown stages \['fold'\] for the context role"):
        _build(("config", "fold"), role="context")
