"""Who may write to a channel: the `writers` of its config (agent names or `role:x`).

One rule, decided from the message and the channel's writers alone, so every place that
applies it decides the same: the fold dead-letters a message from any other sender, the
agent API and MCP refuse it before sending, and a replay skips it. No writers: anyone may
write, as before the rule.
"""

from __future__ import annotations

from collections.abc import Collection

from projections.commitments import EXPIRY_EVENT_SENDER, expiry_target
from projections.model import Message
from projections.readable import is_agent

# A channel's writers: at most this many entries of at most this many characters each (a
# config is one record per channel, read on every message).
MAX_WRITERS = 100
WRITER_MAX_LENGTH = 200


def writers_refusal(writers: Collection[str]) -> str | None:
    """Why `writers` cannot be a channel's writers list, None when it can."""
    if len(writers) > MAX_WRITERS:
        return f"writers: at most {MAX_WRITERS} entries, got {len(writers)}"
    for writer in writers:
        if not writer.strip() or len(writer) > WRITER_MAX_LENGTH:
            return (
                f"writers: each entry is an agent name or role:<name> of 1 to "
                f"{WRITER_MAX_LENGTH} characters, got {writer[:40]!r}"
            )
    return None


def may_write(writers: Collection[str] | None, sender: str) -> bool:
    """True when `sender` is one of `writers` as the fold matches names (`role:planner`,
    `instance:planner` and `planner` all name planner), or when there are no writers."""
    return not writers or any(is_agent(writer, sender) for writer in writers)


def sender_refusal(writers: Collection[str] | None, sender: str, channel: str) -> str | None:
    """Why `sender` may not write to `channel` with these `writers`, in the one line the
    fold's dead letter and the API's refusal both give; None when it may."""
    if may_write(writers, sender):
        return None
    listed = ", ".join(sorted(writers or ()))
    return f"sender {sender!r} may not write to channel {channel!r} (its writers: {listed})"


def writer_refusal(writers: Collection[str] | None, message: Message) -> str | None:
    """Why the channel refuses `message` from its sender (`sender_refusal`). The fold's own
    expiry events (`projections.commitments.expiry_event`) are not an agent's messages."""
    if message.sender == EXPIRY_EVENT_SENDER and expiry_target(message) is not None:
        return None
    return sender_refusal(writers, message.sender, message.channel)
