"""Commitments: the obligations that requests create and replies discharge (qhorus §1).

Each commitment is keyed by the message that opened it, so replaying the log rebuilds
exactly the same ids. Expiry is not a clock read inside `apply`: a timer writes an expiry
EVENT to the log and folding that event expires the commitment, so a replay sees the same
expiry at the same point.

Bounded at any channel length: every active commitment is kept, up to `max_active`; of the
ended ones only the `keep_terminal` that ended last. Counters that never shrink (opened, per
terminal state, declines, evicted, untracked) carry what eviction drops, and the termination
conditions read them, so a decision does not depend on what was evicted.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from projections.fastcopy import copy_with
from projections.model import REQUEST_TYPES, ActorType, Message, MessageType

EXPIRY_EVENT_KIND = "commitment-expired"
EXPIRY_EVENT_SENDER = "chorus"

# Defaults of CHORUS_COMMITMENTS_KEEP_TERMINAL and CHORUS_COMMITMENTS_MAX_ACTIVE. A commitment
# whose ten text fields are at their 200-character limits encodes to about 2.4 KB, so a state
# at both caps stays under 512 KiB, the default state-size limit.
KEEP_TERMINAL = 100
MAX_ACTIVE = 100
EXCERPT_LENGTH = 200
# What a driver event's `live` carries of each active commitment: who owes what to whom, in
# which status and until when. The rest (what was asked, the messages that opened and
# acknowledged it, the hand-off chain) is in the event whose message changed it (`changes`)
# and in the state; carrying it for every open commitment on every message made the event
# grow with the open commitments' text, not with the message.
LIVE_FIELDS = ("id", "correlation_id", "state", "requester", "obligor", "expires_at")
# Active commitments a driver event lists (the most recently opened): the rest are counted
# by obligor, so an event's size does not grow with how many are open (up to MAX_ACTIVE).
LIVE_COMMITMENTS = 5


class CommitmentState(StrEnum):
    OPEN = "OPEN"
    ACKNOWLEDGED = "ACKNOWLEDGED"
    FULFILLED = "FULFILLED"
    DECLINED = "DECLINED"
    FAILED = "FAILED"
    DELEGATED = "DELEGATED"
    EXPIRED = "EXPIRED"

    @property
    def is_active(self) -> bool:
        return self in ACTIVE_STATES

    @property
    def is_terminal(self) -> bool:
        return not self.is_active


# The states of a commitment still owed (JSON values compare equal: a StrEnum).
ACTIVE_STATES = frozenset({CommitmentState.OPEN, CommitmentState.ACKNOWLEDGED})

_RESOLUTIONS = {
    MessageType.RESPONSE: CommitmentState.FULFILLED,
    MessageType.DONE: CommitmentState.FULFILLED,
    MessageType.DECLINE: CommitmentState.DECLINED,
    MessageType.FAILURE: CommitmentState.FAILED,
}


class Commitment(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    correlation_id: str
    requester: str
    obligor: str | None = None
    opened_by_type: MessageType
    state: CommitmentState = CommitmentState.OPEN
    opened_by: str
    opened_at: datetime
    acknowledged_by: str | None = None
    acknowledged_at: datetime | None = None
    resolved_by: str | None = None
    resolved_at: datetime | None = None
    expires_at: datetime | None = None
    delegated_to: str | None = None
    parent: str | None = None
    # What was asked: the opening message's content, cut to EXCERPT_LENGTH characters.
    excerpt: str | None = None

    @property
    def is_active(self) -> bool:
        return self.state.is_active


def excerpt_of(content: str | None) -> str | None:
    """The first EXCERPT_LENGTH characters of `content` on one line, `…` where it was cut."""
    if content is None:
        return None
    text = " ".join(content.split())
    if not text:
        return None
    if len(text) <= EXCERPT_LENGTH:
        return text
    return text[: EXCERPT_LENGTH - 1] + "…"


class CommitmentsState(BaseModel):
    """A channel's active commitments and the last ended ones, with lifetime counters.

    `commitments` is in the order they were opened, except that a commitment moves to the
    end when it ends; eviction drops the ended commitment at the front, the one that ended
    longest ago. Only the most recent commitment of a correlation id can be active: an opener
    is ignored while one is active, and a handoff closes the parent as it opens the child.
    Lookups rely on that and read only the latest one.

    Counters never shrink: `opened` (every commitment ever created, handoff children
    included), `ended` per terminal state, `declines`, `evicted` (ended commitments dropped
    at the `keep_terminal` bound) and `untracked` (openers refused at the `max_active`
    bound). `opened == len(active) + sum(ended.values())` always holds.

    Lookups go through an index kept outside the model (see `_index`), so they cost O(1)
    instead of a scan of every commitment; the model, its JSON and its equality are unchanged.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    commitments: dict[str, Commitment] = {}
    opened: int = 0
    ended: dict[CommitmentState, int] = {}
    declines: int = 0
    evicted: int = 0
    untracked: int = 0

    @property
    def ever_opened(self) -> bool:
        return self.opened > 0

    def latest(self, correlation_id: str) -> Commitment | None:
        """The commitment of `correlation_id` that comes last in `commitments`."""
        return _index(self).latest.get(correlation_id)

    def active(self, correlation_id: str) -> Commitment | None:
        latest = self.latest(correlation_id)
        return latest if latest is not None and latest.is_active else None

    def open_commitments(self) -> list[Commitment]:
        return [c for c in self.commitments.values() if c.is_active]

    def open_count(self) -> int:
        """`len(self.open_commitments())`, without building the list."""
        return _index(self).active

    def dumped(self) -> dict[str, Any]:
        """`model_dump(mode="json")`, reusing each commitment's dump from earlier folds.

        A fold changes one or two commitments of up to a few hundred; dumping the whole
        state anew was most of the fold's cost at the bounds. Commitments are immutable, so
        a dump made once stays right (a unit test compares the two ways)."""
        return {
            "commitments": {key: _dump_of(c) for key, c in self.commitments.items()},
            **self.counters(),
        }

    def counters(self) -> dict[str, Any]:
        """The counters that never shrink, as in the state's JSON."""
        return {
            "opened": self.opened,
            "ended": {state.value: count for state, count in self.ended.items()},
            "declines": self.declines,
            "evicted": self.evicted,
            "untracked": self.untracked,
        }


# Each commitment's JSON dump, by id(commitment), for as long as the commitment lives (a
# finalizer drops it with its object, so the id cannot be reused meanwhile): bounded by the
# commitments the worker's caches hold, which are bounded in bytes.
_DUMPS: dict[int, dict[str, Any]] = {}


def _dump_of(commitment: Commitment) -> dict[str, Any]:
    key = id(commitment)
    found = _DUMPS.get(key)
    if found is not None:
        return found
    dumped = commitment.model_dump(mode="json")
    _DUMPS[key] = dumped
    weakref.finalize(commitment, _DUMPS.pop, key, None)
    return dumped


def _live_reference(commitment: Commitment) -> dict[str, Any]:
    dumped = _dump_of(commitment)
    return {name: dumped[name] for name in LIVE_FIELDS}


class _Index:
    """Derived from one state's `commitments` dict: per correlation id the commitment that
    comes last in it (what a reverse scan finds first), how many are active, and the
    state's `live` part once asked (most messages leave the commitments as they are, and
    their driver events carry the same live part)."""

    __slots__ = ("active", "commitments", "latest", "live", "ref")

    def __init__(
        self,
        state: CommitmentsState,
        latest: dict[str, Commitment],
        active: int,
    ) -> None:
        self.ref = weakref.ref(state, _forget(id(state)))
        self.commitments = state.commitments  # the dict it was derived from
        self.latest = latest
        self.active = active
        self.live: dict[str, Any] | None = None


# Indexes of live states, by id(state). An entry leaves with its state (weakref callback),
# and is used only while it belongs to the same object and the same `commitments` dict, so
# a state built any other way (loaded from a table, copied, unpickled) is indexed afresh.
_INDEXES: dict[int, _Index] = {}


def _forget(key: int) -> Callable[[weakref.ReferenceType[CommitmentsState]], None]:
    def forget(_: weakref.ReferenceType[CommitmentsState]) -> None:
        _INDEXES.pop(key, None)

    return forget


def _index(state: CommitmentsState) -> _Index:
    found = _INDEXES.get(id(state))
    if found is not None and found.ref() is state and found.commitments is state.commitments:
        return found
    latest: dict[str, Commitment] = {}
    active = 0
    for commitment in state.commitments.values():
        latest[commitment.correlation_id] = commitment
        if commitment.state in ACTIVE_STATES:
            active += 1
    index = _INDEXES[id(state)] = _Index(state, latest, active)
    return index


def states_a_request(message: Message) -> bool:
    """True for a message whose content is what a commitment asks: an opener (QUERY,
    COMMAND, PROPOSE) or a HANDOFF, with a correlation id. Text views take what was asked,
    and how it stands now, from the commitments state; a narrative tells these messages
    only as history (`projections.summarise.pending.as_narrated`)."""
    if not message.correlation_id:
        return False
    return message.type in REQUEST_TYPES or message.type is MessageType.HANDOFF


def expiry_event(channel: str, correlation_id: str, now: datetime) -> Message:
    """The EVENT the timer writes when a commitment is overdue.

    The id is derived from the arguments so the constructor stays pure and a timer that
    retries the same tick produces the same record.
    """
    digest = hashlib.sha256(f"{channel}\x00{correlation_id}\x00{now.isoformat()}".encode())
    return Message(
        id=f"expiry-{digest.hexdigest()[:32]}",
        channel=channel,
        sender=EXPIRY_EVENT_SENDER,
        type=MessageType.EVENT,
        actor_type=ActorType.SYSTEM,
        payload={"kind": EXPIRY_EVENT_KIND, "correlation_id": correlation_id},
        correlation_id=correlation_id,
        created_at=now,
    )


def expiry_target(message: Message) -> str | None:
    """The correlation id an expiry event is about, or None if the message is not one.

    Only SYSTEM actors may expire commitments, so an agent cannot cancel someone else's
    obligation by forging the event.
    """
    if message.type is not MessageType.EVENT or message.actor_type is not ActorType.SYSTEM:
        return None
    payload = message.payload or {}
    if payload.get("kind") != EXPIRY_EVENT_KIND:
        return None
    correlation_id = payload.get("correlation_id")
    return correlation_id if isinstance(correlation_id, str) and correlation_id else None


def next_deadline(state: CommitmentsState) -> datetime | None:
    """The earliest deadline among the active commitments (None: none has one): when the
    channel next has something to expire, what the expiry timer indexes it by."""
    return min(
        (c.expires_at for c in state.open_commitments() if c.expires_at is not None),
        default=None,
    )


def overdue(state: CommitmentsState, now: datetime) -> list[str]:
    """Correlation ids whose active commitment is past its deadline at `now`."""
    return [
        c.correlation_id
        for c in state.open_commitments()
        if c.expires_at is not None and c.expires_at <= now
    ]


class CommitmentProjection:
    """Commitments with bounded state: `keep_terminal` ended ones, `max_active` active ones.

    At the `max_active` bound a new request is not tracked: it is counted in `untracked`
    and its replies are ignored like replies to an unknown request. The bounds are part of
    the fold's meaning, so the worker and replay must use the same ones (both read them
    from settings).
    """

    name = "commitments"
    # 3: stored whole, once per checkpoint (`streams.fold_store`); 2 was stored split.
    version = 3
    # What the bounds dropped: requests refused at `max_active`, ended ones evicted.
    bound_counters = ("untracked", "evicted")

    def __init__(self, keep_terminal: int = KEEP_TERMINAL, max_active: int = MAX_ACTIVE) -> None:
        if keep_terminal < 0 or max_active < 1:
            raise ValueError(
                f"commitment bounds: keep_terminal must be >= 0 and max_active >= 1, got "
                f"{keep_terminal} and {max_active}"
            )
        self.keep_terminal = keep_terminal
        self.max_active = max_active

    def identity(self) -> CommitmentsState:
        return CommitmentsState()

    def live(self, state: CommitmentsState) -> dict[str, Any]:
        """What a driver event carries: `active_count`, how many commitments are active;
        `owed`, how many each obligor owes (`unassigned`: how many ask no one in
        particular); `active`, the `LIVE_COMMITMENTS` most recently
        opened active ones, oldest first, each as a reference (`LIVE_FIELDS`: id,
        correlation_id, state, requester, obligor, expires_at); and the counters. Never the
        ended ones. When `active_count` is larger than `active` is long, an obligor whose
        `owed` is more than `active` lists reads the rest from the state. The whole
        commitment is in `changes` of the event whose message changed it, and in the state.
        The same state gives the same dict, made once: read it, never change it."""
        index = _index(state)
        if index.live is not None:
            return index.live
        active = [c for c in state.commitments.values() if c.state in ACTIVE_STATES]
        owed: dict[str, int] = {}
        unassigned = 0
        for commitment in active:
            if commitment.obligor is None:
                unassigned += 1
            else:
                owed[commitment.obligor] = owed.get(commitment.obligor, 0) + 1
        index.live = {
            "active_count": len(active),
            "owed": owed,
            "unassigned": unassigned,
            "active": [_live_reference(c) for c in active[-LIVE_COMMITMENTS:]],
            **state.counters(),
        }
        return index.live

    def changes(self, before: CommitmentsState, after: CommitmentsState) -> dict[str, Any]:
        """The commitments one message opened, changed or ended, each as it is after it (its
        `state` is the new status), in their order in `after`. Commitments are immutable and
        a fold keeps the unchanged ones, so identity finds them without comparing fields."""
        previous = before.commitments
        if after.commitments is previous:
            return {"commitments": []}
        return {
            "commitments": [
                _dump_of(c)
                for key, c in after.commitments.items()
                if (found := previous.get(key)) is not c and found != c
            ]
        }

    def apply(self, state: CommitmentsState, message: Message) -> CommitmentsState:
        expiring = expiry_target(message)
        if expiring is not None:
            return self._expire(state, expiring, message)
        correlation_id = message.correlation_id
        if not correlation_id:
            return state
        kind = message.type
        if kind in REQUEST_TYPES:
            return self._open(state, correlation_id, message)
        active = state.active(correlation_id)
        if active is None:
            return state
        if kind is MessageType.STATUS:
            return self._acknowledge(state, active, message)
        if kind is MessageType.HANDOFF:
            return self._hand_off(state, active, message)
        resolution = _RESOLUTIONS.get(kind)
        if resolution is None:
            return state
        # MQ: a RESPONSE answers a proposal without accepting it; only DONE closes it.
        if kind is MessageType.RESPONSE and active.opened_by_type is MessageType.PROPOSE:
            return state
        return self._resolve(state, active, resolution, message)

    def _replace(self, state: CommitmentsState, *changed: Commitment) -> CommitmentsState:
        """`state` with `changed` written in (new ones last, ended ones moved last), the
        counters updated, and ended commitments beyond `keep_terminal` evicted."""
        index = _index(state)
        commitments = dict(state.commitments)
        latest: dict[str, Commitment] | None = dict(index.latest)
        active = index.active
        opened = state.opened
        ended = dict(state.ended)
        declines = state.declines
        for commitment in changed:
            before = commitments.get(commitment.id)
            correlation_id = commitment.correlation_id
            if before is None:
                opened += 1
            else:
                active -= before.state in ACTIVE_STATES
                if before.correlation_id != correlation_id:
                    latest = None  # never done by the rules above; index it afresh below
            if commitment.state not in ACTIVE_STATES and (
                before is None or before.state in ACTIVE_STATES
            ):
                ended[commitment.state] = ended.get(commitment.state, 0) + 1
                declines += commitment.state is CommitmentState.DECLINED
                commitments.pop(commitment.id, None)  # an ended commitment goes last
            commitments[commitment.id] = commitment
            if latest is not None and (before is None or latest.get(correlation_id) is before):
                latest[correlation_id] = commitment
            active += commitment.state in ACTIVE_STATES
        evicted = _evict(commitments, len(commitments) - active - self.keep_terminal, latest)
        new = copy_with(
            state,
            {
                "commitments": commitments,
                "opened": opened,
                "ended": ended,
                "declines": declines,
                "evicted": state.evicted + evicted,
            },
        )
        if latest is not None:
            _INDEXES[id(new)] = _Index(new, latest, active)
        return new

    def _open(
        self, state: CommitmentsState, correlation_id: str, message: Message
    ) -> CommitmentsState:
        # A repeated opener (a producer retry, or a second request on a live thread) must not
        # create a second active commitment for the same correlation id.
        if state.active(correlation_id) is not None or message.id in state.commitments:
            return state
        if state.open_count() >= self.max_active:
            return copy_with(state, {"untracked": state.untracked + 1})
        opened = Commitment(
            id=message.id,
            correlation_id=correlation_id,
            requester=message.sender,
            obligor=message.target,
            opened_by_type=message.type,
            opened_by=message.id,
            opened_at=message.created_at,
            expires_at=message.deadline,
            excerpt=excerpt_of(message.content),
        )
        return self._replace(state, opened)

    def _acknowledge(
        self, state: CommitmentsState, active: Commitment, message: Message
    ) -> CommitmentsState:
        if active.state is CommitmentState.ACKNOWLEDGED:
            return state
        acknowledged = copy_with(
            active,
            {
                "state": CommitmentState.ACKNOWLEDGED,
                "acknowledged_by": message.id,
                "acknowledged_at": message.created_at,
            },
        )
        return self._replace(state, acknowledged)

    def _resolve(
        self,
        state: CommitmentsState,
        active: Commitment,
        resolution: CommitmentState,
        message: Message,
    ) -> CommitmentsState:
        return self._replace(state, _closed(active, resolution, message))

    def _hand_off(
        self, state: CommitmentsState, active: Commitment, message: Message
    ) -> CommitmentsState:
        if message.target is None or message.id in state.commitments:
            return state
        parent = _closed(active, CommitmentState.DELEGATED, message)
        parent = copy_with(parent, {"delegated_to": message.target})
        child = Commitment(
            id=message.id,
            correlation_id=active.correlation_id,
            requester=active.requester,
            obligor=message.target,
            # The child carries the same kind of obligation, so a delegated proposal is
            # still not fulfilled by a mere RESPONSE.
            opened_by_type=active.opened_by_type,
            opened_by=message.id,
            opened_at=message.created_at,
            # The requester's deadline still binds whoever the work is handed to.
            expires_at=message.deadline or active.expires_at,
            parent=active.id,
            # What is owed is still what was first asked.
            excerpt=active.excerpt or excerpt_of(message.content),
        )
        return self._replace(state, parent, child)

    def _expire(
        self, state: CommitmentsState, correlation_id: str, message: Message
    ) -> CommitmentsState:
        active = state.active(correlation_id)
        # The timer decided on an older view; if the work was handed off with a later
        # deadline since, the event is stale and must not expire the newer obligation.
        if active is None or active.expires_at is None or active.expires_at > message.created_at:
            return state
        return self._replace(state, _closed(active, CommitmentState.EXPIRED, message))


def _evict(
    commitments: dict[str, Commitment], count: int, latest: dict[str, Commitment] | None
) -> int:
    """Drop the `count` ended commitments that ended first (the front of `commitments`)."""
    if count <= 0:
        return 0
    gone = []
    for commitment in commitments.values():
        if commitment.state not in ACTIVE_STATES:
            gone.append(commitment)
            if len(gone) == count:
                break
    for commitment in gone:
        del commitments[commitment.id]
        cid = commitment.correlation_id
        if latest is not None and latest.get(cid) is commitment:
            # Kept in step with what a fresh scan (`_index`) would find.
            older = [c for c in commitments.values() if c.correlation_id == cid]
            if older:
                latest[cid] = older[-1]
            else:
                del latest[cid]
    return len(gone)


def _closed(active: Commitment, resolution: CommitmentState, message: Message) -> Commitment:
    return copy_with(
        active,
        {
            "state": resolution,
            "resolved_by": message.id,
            "resolved_at": message.created_at,
        },
    )
