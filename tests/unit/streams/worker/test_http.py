"""The fold role's views, in process and without a network: every per-channel view answers
from what this process holds (no HTTP client exists here to call another role), and an
agent context computes the channel's standing once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

import aiohttp
import orjson
import pytest
from aiokafka.errors import KafkaConnectionError
from faust.exceptions import NotReady, SameNode
from faust.web.exceptions import ServiceUnavailable

from projections.channel import ChannelStanding
from projections.context import MAX_CONTEXT_TOKENS, budget_refusal
from projections.model import channel_name_refusal, encode_message
from projections.recap import RecapPhase
from streams.records import RecapRecord, SummaryRecord
from streams.settings import Settings, bearer_header
from streams.worker import http
from streams.worker.compose import Worker
from tests.unit.streams.worker.offline import TopicRecords, offline_worker
from tests.unit.streams.worker.test_read_model import FakeRuntime, conversation

CHANNEL = "team/plan"


class Request:
    """What the views read of an aiohttp request."""

    def __init__(self, query: dict[str, str] | None = None) -> None:
        self.query = query or {}
        self.headers: dict[str, str] = {}
        self.match_info = {"channel": CHANNEL}


@pytest.fixture
async def worker(monkeypatch: pytest.MonkeyPatch) -> Worker:
    built = offline_worker()
    chorus = built.runtime
    fake = FakeRuntime(conversation())
    monkeypatch.setattr(http, "routable", lambda _: True)

    async def here(*_: Any, **__: Any) -> Any:
        raise SameNode()

    monkeypatch.setattr(chorus.app.router, "route_topic_req", here)
    monkeypatch.setattr(chorus, "folds_of", fake.folds_of)
    monkeypatch.setattr(chorus.ownership, "owned_partitions", lambda: frozenset({0, 1, 2, 3}))
    monkeypatch.setattr(chorus.ownership, "partition_of", lambda channel: 0)
    monkeypatch.setattr(chorus.ownership, "messages_partitions", lambda: 4)
    views = built.views
    assert views is not None and built.window is not None
    summaries, recaps = TopicRecords(CHANNEL.encode()), TopicRecords(CHANNEL.encode())
    monkeypatch.setattr(views.summaries, "reader", summaries)
    monkeypatch.setattr(views.recaps, "reader", recaps)
    summary = SummaryRecord(
        channel=CHANNEL, text="What was said.", narrative="What was said.", last_offset=0
    )
    summaries.records[(0, 7)] = summary.to_bytes()
    await views.summaries_followed.take(CHANNEL.encode(), summary.to_bytes(), 0, 7)
    recap = RecapRecord(
        channel=CHANNEL,
        text="Load tests.",
        narrative="Load tests.",
        phase=RecapPhase.COMPLETED,
        covered_offset=1,
    )
    recaps.records[(0, 2)] = recap.to_bytes()
    await views.recaps_followed.take(CHANNEL.encode(), recap.to_bytes(), 0, 2)
    for offset, message in enumerate(conversation()):
        built.window.on_record(CHANNEL.encode(), encode_message(message), 0, offset, 0)
    return built


async def answer(worker: Worker, suffix: str, query: dict[str, str] | None = None) -> Any:
    view = worker.runtime.app.web.views[f"/channels/{{channel:.+}}/{suffix}"]
    response = await view.get(Request(query), CHANNEL)
    assert response.status == 200, response.body
    return orjson.loads(response.body)


async def test_an_agent_context_is_answered_here_with_the_standing_computed_once(
    worker: Worker,
) -> None:
    fake = FakeRuntime(conversation())
    calls: list[str] = []

    def standing(channel: str) -> ChannelStanding | None:
        calls.append(channel)
        return fake.standing(channel)

    with patch.object(worker.runtime, "standing", standing):
        found = await answer(worker, "context", {"max_tokens": "2000", "for": "worker"})
    assert calls == [CHANNEL]
    assert found["parts"]["header"]["decision"]["decision"] == "FAILED"
    assert found["parts"]["summary"]["text"] == "What was said."
    assert "worker (FAILURE): The cluster is down" in found["text"]
    assert found["sources"]["summaries"] == {
        "topic": "offline.summaries",
        "partition": 0,
        "read_through": 7,
        "restoring": False,
    }


async def test_every_per_channel_view_answers_from_this_process(worker: Worker) -> None:
    fake = FakeRuntime(conversation())
    with patch.object(worker.runtime, "standing", fake.standing):
        summary = await answer(worker, "summary")
        recap = await answer(worker, "recap")
    assert summary["content"].startswith("What was said.\n\nEnded (the last 1")
    assert recap["text"].startswith("Last asked (planner): Run the load test (failed).")
    assert recap["phase"] == "COMPLETED" and recap["decision"]["decision"] == "FAILED"
    counted = worker.runtime.meter.requests.labels("/channels/{channel}/recap")._value.get()
    assert counted == 1


async def status_of(
    worker: Worker, suffix: str, channel: str = CHANNEL
) -> tuple[int, str, str | None]:
    view = worker.runtime.app.web.views[f"/channels/{{channel:.+}}/{suffix}"]
    response = await view.get(Request(), channel)
    return (
        response.status,
        orjson.loads(response.body)["error"],
        response.headers.get("Retry-After"),
    )


async def test_a_view_that_raises_is_a_logged_500_with_its_reason_not_a_503(
    worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(channel: str) -> ChannelStanding | None:
        raise KeyError("overview")

    with patch.object(worker.runtime, "standing", broken):
        status, error, retry_after = await status_of(worker, "recap")
    assert (status, retry_after) == (500, None)
    assert error == "the recap view of channel 'team/plan' failed: KeyError('overview')"
    (logged,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert logged.exc_info is not None and logged.exc_info[0] is KeyError
    assert CHANNEL in logged.getMessage()


async def test_a_view_that_cannot_reach_the_broker_is_a_503_to_retry(worker: Worker) -> None:
    def unreachable(channel: str) -> ChannelStanding | None:
        raise KafkaConnectionError("the broker went away")

    with patch.object(worker.runtime, "standing", unreachable):
        status, error, retry_after = await status_of(worker, "recap")
    assert (status, retry_after) == (503, str(http.RETRY_AFTER_SECONDS))
    assert error.startswith("not ready: the broker is not reachable")


@pytest.mark.parametrize(
    "failure",
    [
        ServiceUnavailable(),
        NotReady("Producer service not yet started"),
        aiohttp.ClientConnectionError("connection refused"),
        TimeoutError(),
        TypeError("'NoneType' object is not iterable"),  # a producer without metadata
    ],
    ids=lambda failure: type(failure).__name__,
)
async def test_an_owner_that_cannot_be_routed_to_is_a_503_to_retry(
    worker: Worker, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    async def unroutable(*_: Any, **__: Any) -> Any:
        raise failure

    monkeypatch.setattr(worker.runtime.app.router, "route_topic_req", unroutable)
    status, error, retry_after = await status_of(worker, "summary")
    assert (status, retry_after) == (503, str(http.RETRY_AFTER_SECONDS))
    assert error.startswith("not ready: the channel's owner is not reachable")


async def test_a_page_that_raises_is_a_logged_500_with_its_reason(
    worker: Worker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: Any) -> list[str]:
        raise KeyError("overview")

    monkeypatch.setattr(http, "local_channels", broken)
    response = await worker.runtime.app.web.views["/channels"].get(Request())
    assert response.status == 500
    assert orjson.loads(response.body) == {
        "error": "the /channels view failed: KeyError('overview')"
    }
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [KeyError]


@pytest.mark.parametrize("suffix", ["state", "summary", "recap", "context"])
async def test_an_invalid_channel_name_is_a_400_worded_as_every_entry_point_words_it(
    worker: Worker, suffix: str
) -> None:
    status, error, _ = await status_of(worker, suffix, "Team/plan")
    assert (status, error) == (400, channel_name_refusal("Team/plan"))


@pytest.mark.parametrize("max_tokens", [-1, MAX_CONTEXT_TOKENS + 1])
async def test_a_budget_out_of_range_is_a_400_worded_as_every_entry_point_words_it(
    worker: Worker, max_tokens: int
) -> None:
    view = worker.runtime.app.web.views["/channels/{channel:.+}/context"]
    response = await view.get(Request({"max_tokens": str(max_tokens)}), CHANNEL)
    assert response.status == 400
    assert orjson.loads(response.body) == {"error": budget_refusal(max_tokens)}


def test_with_a_token_every_page_wants_exactly_its_bearer_header() -> None:
    class Answers:
        def json(self, body: Any, status: int = 200) -> tuple[int, Any]:
            return status, body

    settings = Settings(store="memory://", bootstrap_servers="x:1", api_token="s3cret")
    app = SimpleNamespace(page=lambda path: lambda view: view)  # registers nothing
    denied, _ = http._pages(SimpleNamespace(settings=settings, app=app))  # type: ignore[arg-type]
    asked = Request()
    refused = (401, {"error": "missing or wrong bearer token"})
    assert denied(Answers(), asked) == refused  # type: ignore[arg-type]
    asked.headers = {"Authorization": "Bearer not-it"}
    assert denied(Answers(), asked) == refused  # type: ignore[arg-type]
    asked.headers = bearer_header("s3cret")
    assert denied(Answers(), asked) is None  # type: ignore[arg-type]
