"""Projections and message strategies for the replay tests (registered via CHORUS_PROJECTIONS).

`TallyV1` and `TallyV2` are two versions of one projection ("tally") with different state
shapes, for the blue-green rebuild. `PairsProjection` keeps tuples in a plain (non-pydantic)
state, which the worker's table turns into lists: the replay must do the same.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from projections.commitments import EXPIRY_EVENT_KIND, EXPIRY_EVENT_SENDER
from projections.model import ActorType, Message, MessageType


class TallyV1:
    """Messages per sender."""

    name = "tally"
    version = 1

    def identity(self) -> dict[str, int]:
        return {}

    def apply(self, state: dict[str, int], message: Message) -> dict[str, int]:
        return {**state, message.sender: state.get(message.sender, 0) + 1}


class TallyV2:
    """Messages per sender and per type, and words: a new state shape, so a new version."""

    name = "tally"
    version = 2

    def identity(self) -> dict[str, Any]:
        return {"by_sender": {}, "by_type": {}, "words": 0}

    def apply(self, state: dict[str, Any], message: Message) -> dict[str, Any]:
        by_sender = {**state["by_sender"]}
        by_sender[message.sender] = by_sender.get(message.sender, 0) + 1
        by_type = {**state["by_type"]}
        by_type[message.type.value] = by_type.get(message.type.value, 0) + 1
        words = state["words"] + len((message.content or "").split())
        return {"by_sender": by_sender, "by_type": by_type, "words": words}


class PairsProjection:
    """The last (sender, type) pair and every pair seen, as tuples; ignores EVENTs."""

    name = "pairs"
    version = 1

    def identity(self) -> dict[str, Any]:
        return {"last": None, "seen": ()}

    def apply(self, state: dict[str, Any], message: Message) -> dict[str, Any]:
        if message.type is MessageType.EVENT:
            return state
        pair = (message.sender, message.type.value)
        seen = tuple(state["seen"])
        return {"last": pair, "seen": seen if pair in seen else (*seen, pair)}


SENDERS = ["ann", "bob", "cy"]
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@st.composite
def message_sequences(
    draw: st.DrawFn, channels: list[str], min_size: int = 1, max_size: int = 40
) -> list[Message]:
    """Valid messages over `channels`: requests, replies to earlier (or unknown) requests,
    handoffs, expiry events, typing events and chatter, with a clock that may step back."""
    size = draw(st.integers(min_size, max_size))
    messages: list[Message] = []
    requests: list[tuple[str, str, str]] = []  # (channel, message id, correlation id)
    clock = START
    for index in range(size):
        clock += timedelta(seconds=draw(st.integers(-30, 120)))
        channel = draw(st.sampled_from(channels))
        sender = draw(st.sampled_from(SENDERS))
        kind = draw(
            st.sampled_from(["request", "reply", "reply", "handoff", "expiry", "event", "chat"])
        )
        base: dict[str, Any] = {
            "id": f"m{index}",
            "channel": channel,
            "sender": sender,
            "created_at": clock,
        }
        mine = [r for r in requests if r[0] == channel]
        if kind == "request" or (kind in ("reply", "handoff", "expiry") and not mine):
            correlation = f"c{index}"
            deadline = clock + timedelta(minutes=draw(st.integers(1, 5)))
            opener = draw(st.sampled_from([MessageType.QUERY, MessageType.COMMAND]))
            messages.append(
                Message(
                    **base,
                    type=opener,
                    correlation_id=correlation,
                    content=draw(st.sampled_from(["please look", "boom now", "do it"])),
                    deadline=deadline if draw(st.booleans()) else None,
                )
            )
            requests.append((channel, f"m{index}", correlation))
        elif kind == "reply":
            _, request_id, correlation = draw(st.sampled_from(mine))
            reply = draw(
                st.sampled_from(
                    [
                        MessageType.STATUS,
                        MessageType.RESPONSE,
                        MessageType.DONE,
                        MessageType.DECLINE,
                        MessageType.FAILURE,
                    ]
                )
            )
            messages.append(
                Message(
                    **base,
                    type=reply,
                    in_reply_to=request_id,
                    correlation_id=correlation,
                    content=f"{reply.value.lower()} {index}",
                )
            )
        elif kind == "handoff":
            _, request_id, correlation = draw(st.sampled_from(mine))
            messages.append(
                Message(
                    **base,
                    type=MessageType.HANDOFF,
                    in_reply_to=request_id,
                    correlation_id=correlation,
                    target=f"role:{draw(st.sampled_from(SENDERS))}",
                )
            )
        elif kind == "expiry":
            _, _, correlation = draw(st.sampled_from(mine))
            messages.append(
                Message(
                    **{**base, "sender": EXPIRY_EVENT_SENDER},
                    type=MessageType.EVENT,
                    actor_type=ActorType.SYSTEM,
                    correlation_id=correlation,
                    payload={"kind": EXPIRY_EVENT_KIND, "correlation_id": correlation},
                )
            )
        elif kind == "event":
            messages.append(Message(**base, type=MessageType.EVENT, payload={"kind": "typing"}))
        else:
            words = draw(st.lists(st.sampled_from(["ok", "hi", "boom", "ship"]), max_size=4))
            messages.append(
                Message(
                    **base,
                    type=MessageType.STATUS,
                    actor_type=ActorType.HUMAN,
                    content=" ".join(words) or None,
                )
            )
    return messages
