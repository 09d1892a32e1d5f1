"""How a channel message reads inside a summary or a prompt."""

from __future__ import annotations

from projections.model import Message, MessageType

_PAYLOAD_KIND_KEYS = ("kind", "type", "event", "name")


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

    A message without content (a bare STATUS, say) reads `[sender] <TYPE>`.
    """
    sender = f"[{message.sender}]"
    if message.type is MessageType.EVENT:
        kind = payload_kind(message)
        return f"{sender} event {kind}" if kind else f"{sender} event"
    content = (message.content or "").strip()
    return f"{sender} {content}" if content else f"{sender} {message.type.value}"
