"""The worker's agent API against a real worker: identity by bearer token, sending, reading a
channel's messages by position, driver events as server-sent events, and a channel's
writers refused at the API, dead-lettered at the fold and skipped by replay alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from pydantic import SecretStr

from projections.commitments import CommitmentProjection
from projections.overview import ChannelOverviewProjection
from streams.client import Client
from streams.ops.topics import create_topics
from streams.records import DeadLetter
from streams.replay import replay
from streams.settings import Settings
from streams.topology import DEAD_LETTERS, MESSAGES
from tests.conftest import WorkerProcess, config_folded, read_until

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

OPERATOR = "operator-token-0123456789"
PLANNER = "planner-token-0123456789"
WORKER_A = "worker-a-token-0123456789"
CHANNEL = "team/api"


def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "agents.tokens"
    path.write_text(f"# who may speak\nplanner {PLANNER}\nworker-a {WORKER_A}\n")
    return path


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def worker(
    tmp_path: Path, chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> WorkerProcess:
    return start_worker(
        CHORUS_API_TOKEN=OPERATOR, CHORUS_AGENT_TOKENS_FILE=str(tokens_file(tmp_path))
    )


async def test_agents_send_as_their_token_names_them_and_read_what_is_theirs_by_position(
    chorus_settings: Settings, worker: WorkerProcess
) -> None:
    await create_topics(chorus_settings)
    url = f"{worker.base_url}/channels/{CHANNEL}/messages"
    ask = {"type": "command", "content": "write the notes\n\nin full", "target": "role:worker-a"}
    async with httpx.AsyncClient(timeout=30) as http:
        # No agent, the operator, an unknown token: nobody sends.
        assert (await http.post(url, json=ask)).status_code == 401
        assert (await http.post(url, json=ask, headers=bearer(OPERATOR))).status_code == 403
        assert (await http.post(url, json=ask, headers=bearer("x" * 20))).status_code == 401
        sender = await http.post(url, json={**ask, "sender": "planner"}, headers=bearer(PLANNER))
        assert sender.status_code == 400
        assert sender.json()["error"].startswith("sender: not given by an agent")

        sent = await http.post(url, json=ask, headers=bearer(PLANNER))
        assert sent.status_code == 201, sent.text
        request = sent.json()
        assert set(request) == {"id", "channel", "correlation_id", "partition", "offset"}

        inbox = await read(http, url, WORKER_A, after=None, until=1)
        [entry] = inbox["messages"]
        assert (entry["id"], entry["sender"], entry["offset"]) == (
            request["id"],
            "planner",
            request["offset"],
        )
        assert entry["content"] == "write the notes\n\nin full"  # whole
        assert inbox["for"] == "worker-a" and inbox["next"] >= request["offset"]

        done = {
            "type": "done",
            "content": "notes.md",
            "in_reply_to": request["id"],
            "correlation_id": request["correlation_id"],
        }
        answered = await http.post(url, json=done, headers=bearer(WORKER_A))
        assert answered.status_code == 201, answered.text

        # The planner's inbox: the reply to its request, not its own request.
        replies = await read(http, url, PLANNER, after=None, until=1)
        assert [m["content"] for m in replies["messages"]] == ["notes.md"]
        # The worker's cursor: nothing again, nothing missed.
        again = await read(http, url, WORKER_A, after=inbox["next"], until=0)
        assert again["messages"] == [] and again["next"] == answered.json()["offset"]
        # The operator reads every message, its `for` any agent's.
        every = await http.get(url, headers=bearer(OPERATOR))
        assert [m["type"] for m in every.json()["messages"]] == ["COMMAND", "DONE"]

        events = await first_events(http, f"{worker.base_url}/channels/{CHANNEL}/events", 2)
    assert [e["message_id"] for e in events] == [request["id"], answered.json()["id"]]
    assert PLANNER not in worker.log_path.read_text(errors="replace")


async def read(
    http: httpx.AsyncClient, url: str, token: str, after: int | None, until: int
) -> dict[str, Any]:
    """The inbox page once it holds `until` messages (the log read by position)."""
    query = {"after": after} if after is not None else {}
    for _ in range(100):
        page: dict[str, Any] = (await http.get(url, params=query, headers=bearer(token))).json()
        if len(page["messages"]) >= until:
            return page
    raise AssertionError(f"no {until} messages: {page}")


async def first_events(http: httpx.AsyncClient, url: str, count: int) -> list[dict[str, Any]]:
    """The first `count` driver events of the stream, from its start."""
    found: list[dict[str, Any]] = []
    async with http.stream("GET", url, params={"after": -1}, headers=bearer(OPERATOR)) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        async for line in stream.aiter_lines():
            if line.startswith("data: "):
                found.append(orjson.loads(line.removeprefix("data: ")))
                if len(found) == count:
                    return found
    return found


async def test_a_sender_outside_the_writers_is_refused_dead_lettered_and_skipped_by_replay(
    chorus_settings: Settings, worker: WorkerProcess
) -> None:
    await create_topics(chorus_settings)
    url = f"{worker.base_url}/channels/{CHANNEL}/messages"
    operator = chorus_settings.model_copy(update={"api_token": SecretStr(OPERATOR)})
    async with Client(operator) as chorus:
        await chorus.configure(CHANNEL, writers=["planner"])
        await config_folded(chorus_settings, CHANNEL)
        async with httpx.AsyncClient(timeout=30) as http:
            refused = await http.post(
                url, json={"type": "status", "content": "me too"}, headers=bearer(WORKER_A)
            )
            assert (refused.status_code, refused.json()) == (
                403,
                {"error": reason("worker-a")},
            )
            said = await http.post(
                url, json={"type": "status", "content": "plan"}, headers=bearer(PLANNER)
            )
            assert said.status_code == 201
        # Past the API, straight to the log: the fold refuses it.
        forged = await chorus.send(CHANNEL, sender="worker-a", type="status", content="forged")
        await chorus.send(CHANNEL, sender="planner", type="status", content="after it")

        def refusal(records: list[Any]) -> bool:
            return any(
                r.value["source_topic"] == chorus_settings.topic(MESSAGES)
                and (r.value["partition"], r.value["offset"]) == (forged.partition, forged.offset)
                for r in records
            )

        letters = await read_until(chorus_settings, DEAD_LETTERS, refusal)
        [letter] = [DeadLetter.model_validate(r.value) for r in letters if refusal([r])]
        assert (letter.reason, letter.stage) == (reason("worker-a"), "validate")

        state = await wait_state(chorus, count=2)
    assert state["projections"]["overview"]["state"]["participants"] == {"planner": 2}
    # A replay decides the same: the same message refused, the same state.
    folds = [CommitmentProjection(), ChannelOverviewProjection()]
    replayed = (await replay(chorus_settings, folds, channels=[CHANNEL])).replayer
    assert replayed.stats.refused == 1
    assert replayed.folds(CHANNEL)["overview"].state == state["projections"]["overview"]["state"]


def reason(sender: str) -> str:
    return f"sender {sender!r} may not write to channel {CHANNEL!r} (its writers: planner)"


async def wait_state(chorus: Client, count: int) -> dict[str, Any]:
    """The channel's state once the fold has folded `count` messages."""
    for _ in range(200):
        try:
            state = await chorus.state(CHANNEL)
        except LookupError:
            continue
        if state["projections"]["overview"]["state"]["message_count"] >= count:
            return state
    raise AssertionError("the fold did not reach the messages")
