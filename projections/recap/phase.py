"""The recap phase machine: when a channel's recap is due, and what a generation's start,
success or failure does to it.

A recap is a hidden furnace: another inference call the system decides to make. So the
decision is a debounce, not a trigger: the countdown restarts while people are still busy,
and once a recap exists for the current conversation nothing burns again until the
conversation itself changes. Pure: time and log offsets are always passed in, so the Faust
agent that owns the clock and the table can replay, retry and test these rules without a
broker.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from projections.model import Message, MessageType


def _utc(value: datetime) -> datetime:
    # Naive and aware datetimes cannot be compared; a naive one would crash `due` mid-stream.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# --------------------------------------------------------------------------- phase machine


class RecapPhase(StrEnum):
    IDLE = "IDLE"
    PENDING = "PENDING"
    GENERATING = "GENERATING"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"


class RecapStatus(BaseModel):
    """Where one channel's recap stands. Frozen, so every transition is a new value.

    `covered_offset` is the highest log offset that changed this status (-1 before any).
    Signals that change nothing are not recorded: replaying them is a no-op anyway, and
    returning the very same object lets the caller skip a changelog write per keystroke.

    `generation` counts conversation-changing messages. A generation job remembers the
    number it started under; a result for any other number describes a conversation that
    has since moved on, and is dropped.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    phase: RecapPhase = RecapPhase.IDLE
    due_at: datetime | None = None
    last_activity: datetime | None = None
    covered_offset: int = Field(default=-1, ge=-1)
    attempts: int = Field(default=0, ge=0)
    last_error: str | None = None
    next_retry_at: datetime | None = None
    generation: int = Field(default=0, ge=0)

    @field_validator("due_at", "last_activity", "next_retry_at")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else _utc(value)


def is_conversation_change(message: Message) -> bool:
    """EVENTs (typing, presence, …) say someone is busy; every other type changes the thread."""
    return message.type is not MessageType.EVENT


def _seconds(value: float, name: str) -> timedelta:
    if value < 0 or math.isnan(value):
        raise ValueError(f"{name} must be a non-negative number of seconds, got {value}")
    return timedelta(seconds=value)


def on_message(
    status: RecapStatus,
    *,
    offset: int,
    at: datetime,
    debounce: float,
    changes_conversation: bool,
) -> RecapStatus:
    """Fold one log record into the status. `debounce` is in seconds.

    Offsets at or below `covered_offset` were already folded (a restarted worker replays
    from its last committed offset), so they return `status` unchanged.
    """
    wait = _seconds(debounce, "debounce")
    if offset <= status.covered_offset:
        return status
    at = _utc(at)
    due_at = at + wait
    if changes_conversation:
        # Never shorten a running countdown: producers' clocks disagree, and an older
        # timestamp arriving late must not fire the recap while the channel is still busy.
        if status.phase is RecapPhase.PENDING and status.due_at is not None:
            due_at = max(due_at, status.due_at)
        # Attempts and the last error survive on purpose: a failing model keeps backing
        # off across quiet periods instead of being hit afresh after every message.
        return status.model_copy(
            update={
                "phase": RecapPhase.PENDING,
                "due_at": due_at,
                "last_activity": at,
                "covered_offset": offset,
                "next_retry_at": None,
                "generation": status.generation + 1,
            }
        )
    # Activity only postpones a recap that is waiting to be written. After COMPLETED the
    # recap already matches the conversation; during ERROR the retry has its own backoff;
    # during GENERATING the tokens are already spent.
    if status.phase is not RecapPhase.PENDING:
        return status
    if status.due_at is not None:
        due_at = max(due_at, status.due_at)
    return status.model_copy(
        update={"due_at": due_at, "last_activity": at, "covered_offset": offset}
    )


def due(status: RecapStatus, now: datetime) -> bool:
    now = _utc(now)
    if status.phase is RecapPhase.PENDING:
        return status.due_at is not None and now >= status.due_at
    if status.phase is RecapPhase.ERROR:
        return status.next_retry_at is not None and now >= status.next_retry_at
    return False


def wakes_at(status: RecapStatus) -> datetime | None:
    """When `status` next falls due (`due` from then on), None when it waits for nothing:
    the debounce's end while PENDING, the retry while in ERROR."""
    if status.phase is RecapPhase.PENDING:
        return status.due_at
    if status.phase is RecapPhase.ERROR:
        return status.next_retry_at
    return None


def on_generation_started(status: RecapStatus, now: datetime) -> RecapStatus:
    """Move a due status to GENERATING; anything else is returned unchanged.

    Refusing when not due makes a duplicate timer tick harmless: it cannot start a
    second generation for the same quiet period.
    """
    if not due(status, now):
        return status
    return status.model_copy(
        update={"phase": RecapPhase.GENERATING, "due_at": None, "next_retry_at": None}
    )


def on_generation_succeeded(status: RecapStatus, generation: int) -> RecapStatus:
    """COMPLETED, but only for a result about the conversation as it still is.

    A matching result is also accepted in ERROR (a late answer from an attempt that was
    given up on still describes the current conversation) and in COMPLETED (a duplicate).
    """
    if generation != status.generation or status.phase in (RecapPhase.IDLE, RecapPhase.PENDING):
        return status
    return status.model_copy(
        update={
            "phase": RecapPhase.COMPLETED,
            "due_at": None,
            "attempts": 0,
            "last_error": None,
            "next_retry_at": None,
        }
    )


# 2**60 seconds is far beyond any sane max_backoff and keeps the float finite.
_MAX_BACKOFF_EXPONENT = 60


def on_generation_failed(
    status: RecapStatus,
    now: datetime,
    error: str,
    backoff: float,
    max_backoff: float,
    *,
    generation: int | None = None,
) -> RecapStatus:
    """ERROR with exponential backoff: retry after min(max_backoff, backoff * 2**attempts).

    Only a running generation can fail. Pass `generation` to also drop failures of a job
    that a newer message already made stale; without it the current run is assumed.
    """
    base = _seconds(backoff, "backoff").total_seconds()
    cap = _seconds(max_backoff, "max_backoff").total_seconds()
    if status.phase is not RecapPhase.GENERATING:
        return status
    if generation is not None and generation != status.generation:
        return status
    delay = min(cap, base * 2.0 ** min(status.attempts, _MAX_BACKOFF_EXPONENT))
    return status.model_copy(
        update={
            "phase": RecapPhase.ERROR,
            "attempts": status.attempts + 1,
            "last_error": error,
            "next_retry_at": _utc(now) + timedelta(seconds=delay),
        }
    )


def status_as_read(
    latest: tuple[RecapPhase, int | None] | None,
    last_change: tuple[int, datetime] | None,
    debounce: float,
) -> RecapStatus:
    """A channel's recap status as a reader of the recaps topic and the log sees it (the
    fold role's views, which run no phase machine of their own): PENDING, due `debounce`
    after the last conversation change (offset, time), when that change is newer than what
    the latest recap record (phase, covered offset) covers; else that record's phase; IDLE
    before anything. The writer's countdown may end a little later (it never shortens)."""
    covered = latest[1] if latest is not None and latest[1] is not None else -1
    if last_change is not None and last_change[0] > covered:
        offset, at = last_change
        return RecapStatus(
            phase=RecapPhase.PENDING,
            due_at=_utc(at) + _seconds(debounce, "debounce"),
            last_activity=at,
            covered_offset=offset,
        )
    if latest is None:
        return RecapStatus()
    return RecapStatus(phase=latest[0], covered_offset=covered)


def countdown_label(status: RecapStatus, now: datetime) -> str:
    """The status-line word: "3s", "2s", … while pending, else the phase in one word."""
    if status.phase is RecapPhase.PENDING:
        if status.due_at is None:
            return "0s"
        remaining = (status.due_at - _utc(now)).total_seconds()
        return f"{max(0, math.ceil(remaining))}s"
    return {
        RecapPhase.IDLE: "idle",
        RecapPhase.GENERATING: "generating",
        RecapPhase.COMPLETED: "done",
        RecapPhase.ERROR: "error",
    }[status.phase]
