"""projections.inbox: what a channel holds for one agent, from the messages and the fold."""

from __future__ import annotations

from projections.commitments import CommitmentProjection
from projections.inbox import asks, commitments_for, for_agent, inbox_entry, requests_of
from projections.model import Message, MessageType
from projections.projection import fold


def _message(sender: str, kind: MessageType, **fields: object) -> Message:
    return Message(channel="team/plan", sender=sender, type=kind, **fields)  # type: ignore[arg-type]


ASK = _message("planner", MessageType.COMMAND, correlation_id="c1", target="role:worker-a")
ASK_B = _message("worker-b", MessageType.QUERY, correlation_id="c2", target="instance:planner")
DONE = _message(
    "worker-a", MessageType.DONE, correlation_id="c1", in_reply_to=ASK.id, content="notes.md"
)


def _state(*messages: Message) -> object:
    return fold(CommitmentProjection(), messages)


def test_addressed_to_an_agent_by_any_form_of_its_name() -> None:
    assert for_agent(ASK, "worker-a", set())
    assert for_agent(ASK_B, "planner", set())
    assert not for_agent(ASK, "worker-b", set())


def test_a_reply_to_its_request_and_never_its_own_message_or_an_event() -> None:
    assert for_agent(DONE, "planner", {"c1"})
    assert not for_agent(DONE, "planner", set())
    assert not for_agent(DONE, "worker-a", {"c1"})  # its own
    event = _message("chorus", MessageType.EVENT, correlation_id="c1", target="role:planner")
    assert not for_agent(event, "planner", {"c1"})


def test_requests_come_from_the_fold_and_from_the_read_itself() -> None:
    state = _state(ASK, ASK_B)
    assert requests_of(state, "planner") == {"c1"}
    assert requests_of(CommitmentProjection().identity().model_dump(mode="json"), "x") == set()
    assert asks(ASK, "planner") == "c1"
    assert asks(DONE, "worker-a") is None and asks(ASK, "worker-a") is None


def test_commitments_an_agent_owes_and_is_owed_while_open() -> None:
    state = _state(ASK, ASK_B)
    mine = commitments_for(state, "planner")
    assert [c["correlation_id"] for c in mine["owed"]] == ["c1"]
    assert [c["correlation_id"] for c in mine["owes"]] == ["c2"]
    assert mine["owed"][0]["request_id"] == ASK.id
    assert mine["owed"][0]["line"].startswith("worker-a owes planner")
    assert commitments_for(_state(ASK, DONE), "planner") == {"owes": [], "owed": []}


def test_an_entry_is_the_whole_message_and_its_offset() -> None:
    entry = inbox_entry(DONE, 7)
    assert entry["offset"] == 7 and entry["content"] == "notes.md"
    assert entry["in_reply_to"] == ASK.id and entry["sender"] == "worker-a"
