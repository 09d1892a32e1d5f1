"""The recent window a recap is written from, and a views' recent messages show: the last
RECAP_WINDOW conversation messages of a channel, each cut to what the recap transcript
reads of it."""

from __future__ import annotations

from projections.model import Message
from projections.text.lines import cut

RECAP_WINDOW = 20
# The transcript shows at most 280 characters of a message; the window keeps a little more
# so that truncation still says "…", and only what the transcript reads of a payload.
WINDOW_CONTENT_CHARS = 300
WINDOW_PAYLOAD_KEYS = ("tool", "name")


def windowed_message(message: Message) -> Message:
    """The part of a message the recap transcript uses, so that windows in memory stay
    small. Cut content ends with "…", so a reader of the window (the agent context) can
    tell it is not the whole message."""
    payload = message.payload or {}
    kept = {key: payload[key] for key in WINDOW_PAYLOAD_KEYS if key in payload}
    content = message.content
    if content is not None:
        content = cut(content, WINDOW_CONTENT_CHARS)
    if content == message.content and (kept or None) == message.payload:
        return message  # nothing to cut: the message itself (it is immutable)
    return message.model_copy(update={"content": content, "payload": kept or None})
