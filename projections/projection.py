"""The projection contract and the helpers that fold, persist and verify projection state.

A projection is a pure left fold over a channel's messages. Purity is what lets a worker
rebuild any state by replaying the log, so `apply` must depend only on its arguments.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

import orjson
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from projections.errors import ChorusError
from projections.model import Message

S = TypeVar("S")


class ChannelProjection(Protocol[S]):
    """Folds a channel's messages into a state of type `S`.

    `version` changes whenever the meaning or shape of the state changes, so a stored
    state from another version is rebuilt from the log instead of being trusted.
    """

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> int: ...

    def identity(self) -> S:
        """The state before any message; a fresh value each call, so callers may not share it."""
        ...

    def apply(self, state: S, message: Message) -> S:
        """The state after `message`: pure, never None, and `state` itself when ignored."""
        ...


# Optional methods a projection may define to keep its driver events small (`live_of`,
# `changes_of`); a projection without them has its whole state carried, as before:
#   live(state) -> JSON-ready: the part of the state a driver acts on (small, bounded)
#   changes(before, after) -> JSON-ready: what one applied message changed


def live_of(projection: ChannelProjection[S], state: S) -> Any:
    """What a driver event carries of `state`: the projection's `live(state)` when it
    defines one, else the whole state (JSON types)."""
    live = getattr(projection, "live", None)
    return live(state) if callable(live) else dump_state(state)


def bound_counters_of(projection: ChannelProjection[Any]) -> tuple[str, ...]:
    """The state's counters of what its bounds dropped (`bound_counters` on the projection,
    none when it declares none): each counts a bound met, for the worker's metric."""
    return tuple(getattr(projection, "bound_counters", ()))


def changes_of(projection: ChannelProjection[S], before: S, after: S) -> Any:
    """What an applied message changed, by the projection's `changes(before, after)`; None
    when it defines none (its whole state is in `live_of`)."""
    changes = getattr(projection, "changes", None)
    return changes(before, after) if callable(changes) else None


def fold(
    projection: ChannelProjection[S], messages: Iterable[Message], state: S | None = None
) -> S:
    current = projection.identity() if state is None else state
    for message in messages:
        current = projection.apply(current, message)
    return current


def dump_state(state: Any) -> Any:
    """JSON-ready form of a state, for tables and for hashing: plain data comes out as JSON
    types (tuples become lists), exactly as it reads back from a table, so the next fold sees
    the same state whether it was kept in memory or read from the changelog."""
    if isinstance(state, BaseModel):
        dumped = getattr(state, "dumped", None)  # a state's own faster, equal dump
        return dumped() if callable(dumped) else state.model_dump(mode="json")
    return to_jsonable_python(state)


def load_state(projection: ChannelProjection[S], data: Any) -> S:
    """Inverse of `dump_state`, using the projection's identity to learn the state type."""
    identity = projection.identity()
    if isinstance(identity, BaseModel):
        if isinstance(data, type(identity)):
            return data
        loaded: S = type(identity).model_validate(data)
        return loaded
    result: S = data
    return result


def canonical_hash(data: Any) -> str:
    """A digest that is equal for equal states, whichever process or dict order produced them."""
    encoded = orjson.dumps(dump_state(data), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(encoded).hexdigest()


class StaleFoldError(ChorusError, ValueError):
    """A stored fold belongs to another projection or version; rebuild it from the log."""


class Folded(BaseModel):
    """A projection state pinned to the log offset of the last message folded into it.

    Kafka delivers at least once; the offset is what makes a redelivered message harmless.
    `state` is kept dumped so the record can go into a table as plain JSON.
    """

    projection: str
    version: int
    offset: int = -1
    state: Any

    def as_record(self) -> dict[str, Any]:
        """The table value; `state` is already JSON-ready, so nothing is walked again."""
        return {
            "projection": self.projection,
            "version": self.version,
            "offset": self.offset,
            "state": self.state,
        }


def initial_folded(projection: ChannelProjection[Any]) -> Folded:
    return Folded(
        projection=projection.name,
        version=projection.version,
        state=dump_state(projection.identity()),
    )


def fold_at(
    projection: ChannelProjection[S], folded: Folded | None, message: Message, offset: int
) -> tuple[Folded, bool]:
    """Fold the message at `offset` unless it is already in `folded`; True when it was folded.

    Exceptions from `apply` propagate so the caller can keep the old fold and dead-letter
    the message.
    """
    new, _, _, applied = advance(projection, folded, message, offset)
    return new, applied


def advance(
    projection: ChannelProjection[S],
    folded: Folded | None,
    message: Message,
    offset: int,
    state: S | None = None,
) -> tuple[Folded, S, S, bool]:
    """`fold_at` for callers that keep states in memory: `state`, when given, must be
    `folded`'s state already loaded. Returns the new fold, the loaded states before and
    after the message (the same object when it was not applied) and whether it was."""
    if folded is None:  # a new channel: its identity, never dumped and loaded back
        loaded = projection.identity() if state is None else state
        new_state = projection.apply(loaded, message)
        return (
            _folded(projection.name, projection.version, offset, new_state),
            loaded,
            new_state,
            True,
        )
    if folded.projection != projection.name or folded.version != projection.version:
        raise StaleFoldError(
            f"stored fold is {folded.projection} v{folded.version}, projection is "
            f"{projection.name} v{projection.version}; rebuild it from the log"
        )
    loaded = load_state(projection, folded.state) if state is None else state
    if offset <= folded.offset:
        return folded, loaded, loaded, False
    new_state = projection.apply(loaded, message)
    dumped = folded.state if new_state is loaded else dump_state(new_state)
    after = Folded.model_construct(
        projection=folded.projection, version=folded.version, offset=offset, state=dumped
    )
    return after, loaded, new_state, True


def _folded(name: str, version: int, offset: int, state: Any) -> Folded:
    return Folded.model_construct(
        projection=name, version=version, offset=offset, state=dump_state(state)
    )
