"""What a channel holds for one agent: the messages addressed to it and the replies to its
requests (its inbox), and the commitments it owes and is owed, from the fold.

Names match as the fold matches them (`projections.readable.is_agent`: `role:worker-a`,
`instance:worker-a` and `worker-a` all name worker-a). An agent's requests are the
commitments whose requester it is, as the fold holds them: every active one and the last
`keep_terminal` ended ones (a reply to a request the fold no longer holds is not found as
one; a reply in the same read as the request is).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from projections.model import Message, MessageType
from projections.readable import CommitmentView, commitment_views, is_agent

# How many messages a read for an agent answers when it does not say.
DEFAULT_MESSAGES = 20


def requests_of(commitments: Any, agent: str) -> set[str]:
    """The correlation ids of the requests `agent` made, in a commitments state (the model
    or its dump as a fold table holds it)."""
    return {
        view.correlation_id
        for view in commitment_views(commitments)
        if is_agent(view.requester, agent)
    }


def for_agent(message: Message, agent: str, requests: Collection[str]) -> bool:
    """True when `message` is for `agent`: addressed to it (`target`), or a reply to one of
    its `requests` (by correlation id). Never its own messages, never an EVENT (what a
    system records, not what an agent says)."""
    if message.type is MessageType.EVENT or is_agent(message.sender, agent):
        return False
    if is_agent(message.target, agent):
        return True
    return message.correlation_id is not None and message.correlation_id in requests


def asks(message: Message, agent: str) -> str | None:
    """The correlation id of a request `agent` makes in `message` (None for anything else),
    so a reply later in the same read is known as one before the fold holds the request."""
    if message.correlation_id and is_agent(message.sender, agent) and message.type in _OPENERS:
        return message.correlation_id
    return None


_OPENERS = frozenset({MessageType.QUERY, MessageType.COMMAND, MessageType.PROPOSE})


def inbox_entry(message: Message, offset: int) -> dict[str, Any]:
    """A message whole, with its partition offset (the position a cursor names)."""
    return {"offset": offset, **message.model_dump(mode="json")}


def commitments_for(commitments: Any, agent: str) -> dict[str, list[dict[str, Any]]]:
    """The active commitments `agent` owes (`owes`: it is the obligor) and is owed
    (`owed`: it is the requester), oldest first, each as a person reads it."""
    open_now = [view for view in commitment_views(commitments) if view.is_open]
    return {
        "owes": [_entry(view) for view in open_now if is_agent(view.obligor, agent)],
        "owed": [_entry(view) for view in open_now if is_agent(view.requester, agent)],
    }


def _entry(view: CommitmentView) -> dict[str, Any]:
    return {"request_id": view.id, "line": view.line(), **view.as_json()}
