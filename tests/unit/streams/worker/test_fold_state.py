"""streams.worker.fold_state: the context role reads folds from the fold role's API, and
an unreachable fold role degrades generation (one log line) instead of failing it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import pytest

from projections.model import Message, MessageType, utc_now
from projections.projection import Folded
from streams.records import SummaryRecord
from streams.settings import Settings
from streams.worker.compose import build_worker
from streams.worker.fold_state import FoldUnreachable, RemoteFoldState, fold_url
from streams.worker.stages.summaries import (
    STATE_REFRESH_SECONDS,
    STATE_REFRESHED_BY,
    Summariser,
)
from tests.conftest import answering

Handler = Callable[[str, Mapping[str, str]], tuple[int, Any]]
STATE = {
    "channel": "a/b",
    "decision": {"decision": "CONTINUE"},
    "projections": {"commitments": {"version": 2, "offset": 7, "state": {"commitments": {}}}},
}


def remote(handler: Handler, **settings: object) -> RemoteFoldState:
    return RemoteFoldState(
        Settings(bootstrap_servers="x:1", **settings),  # type: ignore[arg-type]
        fetch=answering(handler),
    )


def test_the_fold_url_is_this_hosts_public_port_unless_set() -> None:
    assert fold_url(Settings(web_port=7000)) == "http://127.0.0.1:7000"
    assert fold_url(Settings(web_host="0.0.0.0", web_port=7000)) == "http://127.0.0.1:7000"
    assert fold_url(Settings(fold_url="http://fold:6066/")) == "http://fold:6066"


async def test_a_fold_is_read_with_the_token_and_an_unknown_channel_is_none() -> None:
    seen: list[Mapping[str, str]] = []

    def answer(path: str, headers: Mapping[str, str]) -> tuple[int, Any]:
        seen.append(headers)
        if path == "/channels/a/b/state":
            return 200, STATE
        return 404, {"error": "no messages folded"}

    state = remote(answer, api_token="s3cret")
    folded = await state.folded("a/b", "commitments")
    assert folded == Folded(
        projection="commitments",
        version=2,
        offset=7,
        state=STATE["projections"]["commitments"]["state"],
    )  # type: ignore[index]
    assert await state.folded("c/d", "commitments") is None
    assert seen[0]["Authorization"] == "Bearer s3cret"


async def test_an_unreachable_fold_role_is_logged_once_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    up = {"now": False}

    def answer(path: str, headers: Mapping[str, str]) -> tuple[int, Any]:
        if not up["now"]:
            raise ConnectionRefusedError("refused")
        return 200, STATE

    state = remote(answer)
    for _ in range(3):
        with pytest.raises(FoldUnreachable):
            await state.folded("a/b", "commitments")
    assert sum("did not answer" in r.message for r in caplog.records) == 1
    up["now"] = True
    assert await state.folded("a/b", "commitments") is not None
    assert sum("answers again" in r.message for r in caplog.records) == 1


class Down:
    async def folded(self, channel: str, name: str) -> Folded | None:
        raise FoldUnreachable("down")


async def test_a_summary_keeps_its_previous_state_part_while_the_fold_role_is_down() -> None:
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    worker = build_worker(settings, broker="127.0.0.1:1", role="context", fold_state=Down())
    summariser = worker.summariser
    assert isinstance(summariser, Summariser)
    previous = SummaryRecord(
        channel="a/b",
        text="Said before.\n\nOpen (1):\n- open: “x”",
        narrative="Said before.",
        state_offset=3,
    )
    new = SummaryRecord(channel="a/b", text="Said now.", narrative="Said now.")
    record = await summariser.with_fold_state(new, previous.model_dump(mode="json"))
    assert record.text == "Said now.\n\nOpen (1):\n- open: “x”"
    assert record.narrative == "Said now." and record.state_offset == 3
    assert "a/b" in summariser.state_changed  # rendered again once the fold role answers
    assert STATE_REFRESHED_BY  # the refresh marks its records as such


def said(kind: MessageType, correlation_id: str | None = None) -> Message:
    content = None if kind is MessageType.EVENT else "hm"
    reply = "m0" if kind is MessageType.RESPONSE else None
    return Message(
        channel="a/b",
        sender="ann",
        type=kind,
        content=content,
        correlation_id=correlation_id,
        in_reply_to=reply,
    )


async def test_a_message_that_may_change_commitments_schedules_a_refresh() -> None:
    """The context role reads the log once: a message the commitments fold may change on
    (a request, a reply with a correlation id, an expiry) schedules the state refresh and
    marks its offset; no driver event is read."""
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    worker = build_worker(settings, broker="127.0.0.1:1", role="context", fold_state=Down())
    summariser = worker.summariser
    assert isinstance(summariser, Summariser)
    assert "summary-state-changes" not in worker.runtime.app.agents
    await summariser.on_message(said(MessageType.STATUS), 0, 4)  # no correlation id
    await summariser.on_message(said(MessageType.EVENT, "q1"), 0, 5)  # not a commitment's
    assert summariser.state_changed == {} and summariser.state_marks.get("a/b") is None
    await summariser.on_message(said(MessageType.QUERY, "q1"), 0, 6)
    await summariser.on_message(said(MessageType.RESPONSE, "q1"), 0, 7)
    assert set(summariser.state_changed) == {"a/b"}
    assert summariser.state_marks.get("a/b") == 7
    await summariser.on_message(said(MessageType.RESPONSE, "q1"), 0, 6)  # a redelivery
    assert summariser.state_marks.get("a/b") == 7


class At:
    """A fold role that has folded the channel up to `offset`."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    async def folded(self, channel: str, name: str) -> Folded | None:
        return Folded(projection=name, version=2, offset=self.offset, state={"commitments": {}})


async def test_a_fold_behind_the_marked_message_is_read_again_later() -> None:
    """The roles read the log apart: a state part read from a fold that has not reached the
    last message that may change commitments says where it stands (`state_offset`) and is
    refreshed STATE_REFRESH_SECONDS later, not every tick."""
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    fold = At(offset=5)
    worker = build_worker(settings, broker="127.0.0.1:1", role="context", fold_state=fold)
    summariser = worker.summariser
    assert isinstance(summariser, Summariser)
    await summariser.on_message(said(MessageType.QUERY, "q1"), 0, 7)
    record = await summariser.with_fold_state(SummaryRecord(channel="a/b", text="Now."), None)
    assert record.state_offset == 5 and "a/b" in summariser.state_changed
    summariser.latest["a/b"] = record.model_dump(mode="json")
    summariser.chorus.messages_partition = lambda channel: 0  # type: ignore[method-assign]

    async def read_to_end(partitions: object) -> set[int]:
        return {0}

    summariser.caught_up = read_to_end  # type: ignore[method-assign]
    later = utc_now() + timedelta(seconds=STATE_REFRESH_SECONDS + 1)
    assert await summariser.refresh_states(later) == 0  # still behind: asked again later
    assert summariser.state_changed["a/b"] == later
    fold.offset = 7
    sent: list[bytes] = []

    async def send(key: bytes, value: bytes, partition: int) -> None:
        sent.append(value)

    summariser.chorus.summaries.send = send  # type: ignore[method-assign]
    assert await summariser.refresh_states(later + timedelta(seconds=1)) == 0  # not yet due
    much_later = later + timedelta(seconds=STATE_REFRESH_SECONDS + 1)
    await summariser.refresh_states(much_later)
    assert "a/b" not in summariser.state_changed  # caught up: read and done


class Recovering:
    async def folded(self, channel: str, name: str) -> Folded | None:
        return None  # the fold role answers, but its tables are not restored yet


async def test_no_fold_of_a_channel_whose_commitments_changed_keeps_the_previous_part() -> None:
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    worker = build_worker(settings, broker="127.0.0.1:1", role="context", fold_state=Recovering())
    summariser = worker.summariser
    assert isinstance(summariser, Summariser)
    previous = {"text": "Before.\n\nOpen (1):\n- x", "narrative": "Before.", "state_offset": 3}
    new = SummaryRecord(channel="a/b", text="Now.", narrative="Now.")
    # A channel the fold role never had commitments of: no state part, nothing to wait for.
    assert (await summariser.with_fold_state(new, previous)).text == "Now."
    summariser.state_marks["a/b"] = 5  # a message that may have changed them was read
    record = await summariser.with_fold_state(new, previous)
    assert record.text == "Now.\n\nOpen (1):\n- x" and record.state_offset == 3


async def test_a_refresh_waits_until_the_summaries_topic_is_read_to_its_end() -> None:
    """After a restart the latest summary this process knows may be older than the topic's
    (published, then killed before it was read back): a refresh then would publish the
    older record again, as the channel's latest. It waits until the partition is read to
    its end; and a record older than the one kept never replaces it."""
    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    worker = build_worker(settings, broker="127.0.0.1:1", role="context", fold_state=At(9))
    summariser = worker.summariser
    assert isinstance(summariser, Summariser)
    older = SummaryRecord(channel="a/b", text="Old.", narrative="Old.", last_offset=4)
    newer = SummaryRecord(channel="a/b", text="New.", narrative="New.", last_offset=8)
    summariser.latest["a/b"] = older.model_dump(mode="json")
    summariser.chorus.messages_partition = lambda channel: 0  # type: ignore[method-assign]
    sent: list[bytes] = []

    async def send(key: bytes, value: bytes, partition: int) -> None:
        sent.append(value)

    summariser.chorus.summaries.send = send  # type: ignore[method-assign]
    ends = {0: 2}  # the topic holds 2 records of partition 0; none read back yet

    async def read_to_end(partitions: object) -> set[int]:
        return {p for p in (0,) if summariser.read_through.get(p, -1) + 1 >= ends[p]}

    summariser.caught_up = read_to_end  # type: ignore[method-assign]
    await summariser.on_message(said(MessageType.QUERY, "q1"), 0, 9)
    later = utc_now() + timedelta(seconds=STATE_REFRESH_SECONDS + 1)
    assert await summariser.refresh_states(later) == 0 and sent == []
    assert "a/b" in summariser.state_changed  # still owed
    await summariser.on_summary(newer.to_bytes(), 0, offset=1)
    assert summariser.covered_offset("a/b") == 8
    await summariser.on_summary(older.to_bytes(), 0, offset=1)  # a stale copy: ignored
    assert summariser.covered_offset("a/b") == 8
    await summariser.refresh_states(later + timedelta(seconds=1))
    assert "a/b" not in summariser.state_changed  # read to the end: refreshed
    assert all(SummaryRecord.model_validate_json(v).last_offset == 8 for v in sent)
