"""Commitments as a person reads them: what was asked, who owes it, where it stands.

The one reading of a commitments state (the model, or its dump as a fold table holds it)
for every text view: the context, the summary's state part, recaps. Ids are scrubbed and
addresses read as people (`role:reviewer` -> reviewer) through `projections.text`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from projections.commitments import EXCERPT_LENGTH
from projections.text.ids import address_name, person, scrub_ids
from projections.text.lines import ELLIPSIS, closing, cut

__all__ = [
    "OUTCOME_WORDS",
    "CommitmentView",
    "commitment_views",
    "ended_commitments",
    "is_agent",
    "open_commitments",
]

# --------------------------------------------------------------------------- commitments


# How an ended commitment ended, as a line says it; every terminal state has a word.
OUTCOME_WORDS = {
    "FULFILLED": "fulfilled",
    "DECLINED": "declined",
    "FAILED": "failed",
    "EXPIRED": "expired",
    "DELEGATED": "delegated",
}
_ACTIVE_STATES = frozenset({"OPEN", "ACKNOWLEDGED"})


@dataclass(frozen=True)
class CommitmentView:
    """A commitment as a person reads it: what was asked, by whom, who owes it, and where
    it stands as the fold holds it (`state`: OPEN, ACKNOWLEDGED or how it ended)."""

    correlation_id: str
    kind: str
    state: str
    requester: str
    obligor: str | None
    asked: str | None
    since: datetime
    expires_at: datetime | None = None
    ended_at: datetime | None = None
    delegated_to: str | None = None
    id: str | None = None

    @property
    def is_open(self) -> bool:
        return self.state in _ACTIVE_STATES

    @property
    def is_question(self) -> bool:
        """A QUERY: owed an answer, where any other request is owed what it asked."""
        return self.kind == "QUERY"

    @property
    def outcome(self) -> str | None:
        """How it ended ("declined", ...), None while it is open."""
        return None if self.is_open else OUTCOME_WORDS.get(self.state, self.state.lower())

    def owes(self) -> str:
        """ "reviewer owes planner" / "someone owes planner" when nobody was named; a
        question is owed an answer: "rey owes planner an answer"."""
        owner = person(self.obligor) if self.obligor else "someone"
        answer = " an answer" if self.is_question else ""
        return f"{owner} owes {person(self.requester)}{answer}"

    def what(self, max_chars: int = EXCERPT_LENGTH) -> str:
        """What was asked, quoted; cut to `max_chars`, and what the fold's excerpt cut
        inside closed ("…" then its quotes and brackets)."""
        if not self.asked:
            return f"a {self.kind.lower()}"
        asked = cut(scrub_ids(self.asked), max_chars)
        if asked.endswith(ELLIPSIS):
            asked += closing(asked)
        return f"“{asked}”"

    def involves(self, agent: str) -> bool:
        """True when `agent` owes it, asked for it or was handed it (`role:worker-a` is
        worker-a's)."""
        return any(
            is_agent(who, agent) for who in (self.obligor, self.requester, self.delegated_to)
        )

    def line(self) -> str:
        """One line for a prompt or a context: no ids, times to the second in UTC. An ended
        commitment's line starts with how it ended."""
        if self.is_open:
            due = f", due {_clock(self.expires_at)}" if self.expires_at else ""
            status = "acknowledged" if self.state == "ACKNOWLEDGED" else "open"
            return f"{self.owes()}: {self.what()} ({status} since {_clock(self.since)}{due})"
        outcome = self.outcome or ""
        if self.state == "DELEGATED" and self.delegated_to:
            outcome = f"delegated to {person(self.delegated_to)}"
        owner = person(self.obligor) if self.obligor else "someone"
        ended = f", {_clock(self.ended_at)}" if self.ended_at else ""
        return f"{outcome}: {self.what()} (owed by {owner} to {person(self.requester)}{ended})"

    def as_json(self) -> dict[str, Any]:
        return {
            "correlation_id": self.correlation_id,
            "kind": self.kind,
            "state": self.state,
            "requester": self.requester,
            "obligor": self.obligor,
            "asked": self.asked,
            "since": self.since.isoformat(),
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "delegated_to": self.delegated_to,
        }


def is_agent(address: str | None, agent: str) -> bool:
    """True when `address` (a sender or a target) names `agent`: `role:worker-a`,
    `instance:worker-a` and `worker-a` all name worker-a."""
    if not address or not agent:
        return False
    return address == agent or address_name(address) == address_name(agent)


def _clock(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value)
    return None


def _field(raw: Any, name: str) -> Any:
    return raw.get(name) if isinstance(raw, Mapping) else getattr(raw, name, None)


def _view(raw: Any, excerpts: Mapping[str, str] | None) -> CommitmentView | None:
    state = _field(raw, "state")
    state = str(getattr(state, "value", state) or "")
    since = _when(_field(raw, "opened_at"))
    if not state or since is None:
        return None
    asked = _field(raw, "excerpt") or (excerpts or {}).get(str(_field(raw, "opened_by")))
    kind = _field(raw, "opened_by_type")
    return CommitmentView(
        correlation_id=str(_field(raw, "correlation_id")),
        kind=str(getattr(kind, "value", kind) or "request"),
        state=state,
        requester=str(_field(raw, "requester") or "someone"),
        obligor=_field(raw, "obligor"),
        asked=asked if isinstance(asked, str) and asked.strip() else None,
        since=since,
        expires_at=_when(_field(raw, "expires_at")),
        ended_at=None if state in _ACTIVE_STATES else _when(_field(raw, "resolved_at")),
        delegated_to=_field(raw, "delegated_to"),
        id=_field(raw, "id"),
    )


def _commitments_of(state: Any) -> list[Any]:
    """The commitments of a commitments state: the model, or its dump as a table holds it."""
    if state is None:
        return []
    found = state.get("commitments") if isinstance(state, Mapping) else state.commitments
    return list((found or {}).values())


def commitment_views(state: Any, excerpts: Mapping[str, str] | None = None) -> list[CommitmentView]:
    """Every commitment of a commitments state (the model or its dump), in the state's
    order: opened order, an ended one moved last when it ended."""
    views = (_view(raw, excerpts) for raw in _commitments_of(state))
    return [view for view in views if view is not None]


def open_commitments(state: Any, excerpts: Mapping[str, str] | None = None) -> list[CommitmentView]:
    """The active commitments of a commitments state (the model or its dump), oldest first.

    What was asked comes from the commitment's `excerpt` when the state has one, else from
    `excerpts` (message id -> content, e.g. the recent-message ring), else it stays None.
    """
    return [view for view in commitment_views(state, excerpts) if view.is_open]


def ended_commitments(
    state: Any, *, limit: int | None = None, include_fulfilled: bool = True
) -> list[CommitmentView]:
    """The ended commitments the state still holds, the most recently ended first."""
    ended = [view for view in reversed(commitment_views(state)) if not view.is_open]
    if not include_fulfilled:
        ended = [view for view in ended if view.state != "FULFILLED"]
    return ended if limit is None else ended[:limit]
