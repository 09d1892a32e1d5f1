"""How a channel message reads inside a summary or a prompt."""

from __future__ import annotations

from projections.model import Message, MessageType
from projections.text.lines import message_line

_PAYLOAD_KIND_KEYS = ("kind", "type", "event", "name")
# What a message without words did, as a narrative line says it: never a bare type tag.
WORDLESS = {
    MessageType.QUERY: "asked a question",
    MessageType.COMMAND: "gave a command",
    MessageType.PROPOSE: "made a proposal",
    MessageType.HANDOFF: "handed a request on",
    MessageType.STATUS: "gave a status update",
    MessageType.RESPONSE: "answered",
    MessageType.DONE: "reported it done",
    MessageType.DECLINE: "declined",
    MessageType.FAILURE: "reported a failure",
}


def payload_kind(message: Message) -> str | None:
    """The kind of an EVENT's payload: its `kind` (or `type`, `event`, `name`) field."""
    payload = message.payload or {}
    for key in _PAYLOAD_KIND_KEYS:
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def render_message(message: Message) -> str:
    """`[sender] content`; an EVENT reads `[sender] event <payload kind>`.

    A message without content reads as what it did (`[worker-a] gave a status update`).
    """
    if message.type is MessageType.EVENT:
        kind = payload_kind(message)
        return message_line(message.sender, f"event {kind}" if kind else "event")
    content = (message.content or "").strip()
    return message_line(message.sender, content or WORDLESS[message.type])
