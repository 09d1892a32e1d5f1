"""streams.worker.compose: which stage combinations build, and what each build holds.

No broker: building a worker registers agents, timers and views on its Faust app and
connects nothing.
"""

from __future__ import annotations

from collections.abc import Collection

import pytest

from streams.settings import Settings
from streams.topology import Role
from streams.worker.compose import Stage, Worker, build_worker
from streams.worker.stages.summaries import Summariser


def _build(stages: Collection[Stage] | None = None, role: Role = "fold") -> Worker:
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    return build_worker(settings, broker="127.0.0.1:1", stages=stages, role=role)


def test_the_fold_role_writes_only_the_fold_and_reads_the_rest_from_the_topics() -> None:
    worker = _build()
    app = worker.runtime.app
    assert app.conf.id == "chorus" and app.conf.web_port == 6066
    assert worker.folder is not None and worker.expiry is not None
    # Summaries and recaps are the context role's: the views follow their topics (where
    # each channel's latest is, in a table; read back by position) and keep the recent
    # messages the fold hands them (the log is read once: no other reader of the messages).
    assert worker.views is not None and worker.window is not None
    assert worker.summariser is None and worker.recapper is None
    # Faust's consumer reads the messages (taken by the fold, a lot at a time) and the
    # configs (an agent); the two topics the views follow are read by consumers of their
    # own (`streams.worker.followed`).
    assert set(app.agents) == {"channel-config"} and set(app.lot_takers) == {"offline.messages"}
    assert worker.runtime.intake is not None and worker.runtime.intake.name == "fold-messages"
    views = worker.views
    followed = {views.summaries_followed.name, views.recaps_followed.name}
    assert followed == {"offline.summaries", "offline.recaps"}
    assert worker.folder.readers == [worker.window.on_record]
    assert {"fold-positions", "latest", "deadlines"} <= set(app.tables)
    assert not any(name.startswith(("summary-", "recap-")) for name in app.tables)


def test_the_fold_only_worker_has_no_views() -> None:
    worker = _build(("config", "fold"))
    assert worker.folder is not None and worker.views is None and worker.window is None
    intake = worker.runtime.intake
    assert set(worker.runtime.app.agents) == {"channel-config"}
    assert intake is not None and intake.name == "fold-messages"


@pytest.mark.parametrize(
    ("stages", "role", "reason"),
    [
        (("fold", "replicate"), "fold", r"unknown stages \['replicate'\]"),
        (("fold", "summaries"), "fold", r"unknown stages \['summaries'\] for the fold role"),
        (("config", "recaps"), "context", "the recaps stage reads the summaries stage"),
        (("config", "http"), "fold", "the http stage's views read what the fold stage takes"),
    ],
)
def test_impossible_combinations_are_refused(
    stages: tuple[str, ...], role: Role, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        _build(stages, role)  # type: ignore[arg-type]


def test_the_context_role_is_an_app_of_its_own_without_fold_tables() -> None:
    worker = _build(None, role="context")
    app = worker.runtime.app
    assert app.conf.id == "chorus-context-v3" and app.conf.web_port == 6067
    assert worker.folder is None and worker.expiry is None and worker.feed is not None
    assert isinstance(worker.summariser, Summariser)
    assert worker.recapper is not None and "channel-state" in app.tables
    assert worker.runtime.intake is not None and worker.runtime.intake.name == "feed-messages"
    assert set(app.agents) == {"channel-config"} and set(app.lot_takers) == {"offline.messages"}
    assert worker.summariser.followed.name == "offline.summaries"  # its own outputs
    assert worker.recapper.followed.name == "offline.recaps"
    assert worker.runtime.folds is None and not any(n.startswith("fold-") for n in app.tables)
    assert str(app.conf.datadir).endswith("context")


def test_the_context_role_refuses_the_fold_stages() -> None:
    with pytest.raises(ValueError, match=r"unknown stages \['fold'\] for the context role"):
        _build(("config", "fold"), role="context")
