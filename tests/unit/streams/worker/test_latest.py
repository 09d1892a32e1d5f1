"""streams.worker.latest: the fold role's books of the summaries and recaps topics follow the
messages partitions it actively owns; a summary never goes back."""

from __future__ import annotations

from unittest.mock import patch

from faust.types import TP

from streams.records import SummaryRecord
from streams.settings import Settings
from streams.worker.compose import build_worker
from streams.worker.latest import summary_goes_back


def test_a_summary_covering_less_than_the_one_kept_never_replaces_it() -> None:
    def covering(last: int | None) -> SummaryRecord:
        return SummaryRecord(channel="a/1", text="t", last_offset=last)

    assert summary_goes_back(covering(9), covering(4))
    assert not summary_goes_back(covering(4), covering(9))
    assert not summary_goes_back(covering(None), covering(4))


def test_the_books_follow_the_messages_partitions_this_worker_actively_owns() -> None:
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    worker = build_worker(settings, broker="127.0.0.1:1")
    views = worker.views
    assert views is not None
    assert views.follower.owned() == frozenset()  # not started: nothing
    actives = {TP("offline.messages", 2), TP("offline.messages", 0), TP("chorus-x", 1)}
    with patch.object(worker.runtime.app.assignor, "assigned_actives", lambda: actives):
        assert views.follower.owned() == frozenset({0, 2})
    assert {"offline.summaries", "offline.recaps"} <= set(views.follower.readers)
