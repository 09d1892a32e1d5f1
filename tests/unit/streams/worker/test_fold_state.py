"""streams.worker.fold_state: the context role reads folds from the fold role's API, and
an unreachable fold role degrades generation (one log line) instead of failing it."""

from __future__ import annotations

import httpx
import pytest

from projections.projection import Folded
from streams.records import SummaryRecord
from streams.settings import Settings
from streams.worker.compose import build_worker
from streams.worker.fold_state import FoldUnreachable, RemoteFoldState, fold_url
from streams.worker.stages.summaries import STATE_REFRESHED_BY, Summariser

STATE = {
    "channel": "a/b",
    "decision": {"decision": "CONTINUE"},
    "projections": {"commitments": {"version": 2, "offset": 7, "state": {"commitments": {}}}},
}


def remote(handler: object, **settings: object) -> RemoteFoldState:
    return RemoteFoldState(
        Settings(bootstrap_servers="x:1", **settings),  # type: ignore[arg-type]
        transport=httpx.MockTransport(handler),  # type: ignore[arg-type]
    )


def test_the_fold_url_is_this_hosts_public_port_unless_set() -> None:
    assert fold_url(Settings(web_port=7000)) == "http://127.0.0.1:7000"
    assert fold_url(Settings(web_host="0.0.0.0", web_port=7000)) == "http://127.0.0.1:7000"
    assert fold_url(Settings(fold_url="http://fold:6066/")) == "http://fold:6066"


async def test_a_fold_is_read_with_the_token_and_an_unknown_channel_is_none() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/channels/a/b/state":
            return httpx.Response(200, json=STATE)
        return httpx.Response(404, json={"error": "no messages folded"})

    state = remote(answer, api_token="s3cret")
    folded = await state.folded("a/b", "commitments")
    assert folded == Folded(
        projection="commitments",
        version=2,
        offset=7,
        state=STATE["projections"]["commitments"]["state"],
    )  # type: ignore[index]
    assert await state.folded("c/d", "commitments") is None
    assert seen[0].headers["Authorization"] == "Bearer s3cret"


async def test_an_unreachable_fold_role_is_logged_once_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    up = {"now": False}

    def answer(request: httpx.Request) -> httpx.Response:
        if not up["now"]:
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json=STATE)

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


async def test_a_driver_event_that_changed_commitments_schedules_a_refresh() -> None:
    import orjson

    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    worker = build_worker(settings, broker="127.0.0.1:1", role="context", fold_state=Down())
    summariser = worker.summariser
    assert isinstance(summariser, Summariser)

    def event(channel: str, offset: int, changes: object) -> bytes:
        return orjson.dumps(
            {
                "channel": channel,
                "offset": offset,
                "projections": {"commitments": {"changes": changes, "live": {}}},
            }
        )

    summariser.on_driver_event(event("a/b", 4, None))  # a redelivery: nothing changed
    summariser.on_driver_event(event("a/b", 5, {"commitments": []}))
    summariser.on_driver_event(b"not json")
    assert summariser.state_changed == {}
    summariser.on_driver_event(event("a/b", 6, {"commitments": [{"id": "x"}]}))
    assert set(summariser.state_changed) == {"a/b"}
    assert summariser.state_marks.get("a/b") == 6


async def test_the_state_changes_agent_marks_a_batch_of_driver_events_and_writes_once() -> None:
    """Through Faust's harness: the agent takes driver events a batch at a time, each read
    as its own event (the mark's changelog partition is its event's), one flush a batch."""
    import orjson

    settings = Settings(store="memory://", topic_prefix="offline.", bootstrap_servers="x:1")
    worker = build_worker(settings, broker="127.0.0.1:1", role="context", fold_state=Down())
    summariser = worker.summariser
    assert isinstance(summariser, Summariser)
    flushes: list[int] = []
    flush = worker.runtime.staging.flush

    def counted() -> int:
        written = flush()
        flushes.append(written)
        return written

    worker.runtime.staging.flush = counted  # type: ignore[method-assign]
    agent_of = worker.runtime.app.agents["summary-state-changes"]
    async with agent_of.test_context() as agent:
        for offset in range(3):
            changes = {"commitments": [{"id": "x"}] if offset != 1 else []}
            value = {
                "channel": "a/b",
                "offset": offset,
                "projections": {"commitments": {"changes": changes}},
            }
            await agent.put(orjson.dumps(value), key=b"a/b", partition=0)
    assert summariser.state_marks.get("a/b") == 2 and "a/b" in summariser.state_changed
    assert sum(flushes) >= 1 and len(flushes) <= 3


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
    summariser.state_marks["a/b"] = 5  # a driver event said its commitments changed
    record = await summariser.with_fold_state(new, previous)
    assert record.text == "Now.\n\nOpen (1):\n- x" and record.state_offset == 3
