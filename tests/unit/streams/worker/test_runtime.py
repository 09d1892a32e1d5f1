"""streams.worker.runtime: where each role's web server listens; who is told of partition
assignments."""

from __future__ import annotations

from faust.types import TP

from streams.settings import Settings
from streams.worker.runtime import Runtime, role_url, role_web_port


def test_the_context_role_listens_beside_the_fold_role_on_this_host() -> None:
    settings = Settings(web_port=7000)
    assert (role_web_port(settings, "fold"), role_web_port(settings, "context")) == (7000, 7001)
    assert role_url(settings, "fold") == "http://127.0.0.1:7000"
    assert role_url(Settings(web_host="::", web_port=7000), "context") == "http://127.0.0.1:7001"
    assert role_url(Settings(web_host="10.0.0.5", web_port=7000), "fold") == "http://10.0.0.5:7000"


async def test_on_messages_assigned_is_told_the_messages_partitions_owned() -> None:
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    chorus = Runtime(settings, broker="127.0.0.1:1")
    told: list[frozenset[int]] = []
    chorus.on_messages_assigned(told.append)
    messages = chorus.messages.get_topic_name()
    assigned = {TP(messages, 0), TP(messages, 2), TP("offline.summaries", 1)}
    await chorus.app.on_partitions_assigned.send(assigned)  # as Faust sends it
    await chorus.app.on_partitions_assigned.send(set())
    assert told == [frozenset({0, 2}), frozenset()]
