"""User projections, registered by import path in tests (CHORUS_PROJECTIONS)."""

from __future__ import annotations

import itertools

from projections.model import Message


class WordCountProjection:
    """Counts words per sender; raises on content containing 'boom' to test error handling."""

    name = "word-count"
    version = 1

    def identity(self) -> dict[str, int]:
        return {}

    def apply(self, state: dict[str, int], message: Message) -> dict[str, int]:
        if not message.content:
            return state
        if "boom" in message.content:
            raise RuntimeError("exploded on purpose")
        return {
            **state,
            message.sender: state.get(message.sender, 0) + len(message.content.split()),
        }


class HoarderProjection:
    """Keeps every content it sees: a state that grows with the channel's history, which the
    fold step's state-size limit must stop."""

    name = "hoarder"
    version = 1

    def identity(self) -> list[str]:
        return []

    def apply(self, state: list[str], message: Message) -> list[str]:
        return [*state, message.content or ""]


class ShadowCanaryProjection:
    """Diverges on purpose, so a test can see the worker's shadow check run: on the channel
    CHANNEL its state counts the folds of that channel this process has made, so a re-fold
    from the log never equals the live state. Every other channel keeps the identity."""

    name = "shadow-canary"
    version = 1
    CHANNEL = "shadow/canary"
    _folds = itertools.count(1)

    def identity(self) -> dict[str, int]:
        return {}

    def apply(self, state: dict[str, int], message: Message) -> dict[str, int]:
        if message.channel != self.CHANNEL:
            return state
        return {"folds": next(self._folds)}
