"""A channel at a glance: who spoke, about what, when, and how much is still owed."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from projections.commitments import CommitmentProjection, CommitmentsState
from projections.fastcopy import copy_with
from projections.model import Message, MessageType


class ChannelOverview(BaseModel):
    """Counts for one channel.

    `participants` and `topics` leave out EVENTs: those are observer-only records (the
    expiry timer writes some as "chorus"), not anyone taking part in the conversation.
    `message_count` and `by_type` count every record. Activity times follow log order,
    not the largest timestamp, so a producer with a skewed clock cannot move them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    participants: dict[str, int] = {}
    by_type: dict[MessageType, int] = {}
    topics: list[str] = []
    first_activity: datetime | None = None
    last_activity: datetime | None = None
    last_message_id: str | None = None
    message_count: int = 0
    open_commitments: int = 0
    # Embedded so the open count follows exactly the commitment rules, not a copy of them.
    commitments: CommitmentsState = CommitmentsState()


class ChannelOverviewProjection:
    name = "overview"
    version = 1

    def __init__(self) -> None:
        self._commitments = CommitmentProjection()

    def identity(self) -> ChannelOverview:
        return ChannelOverview()

    def apply(self, state: ChannelOverview, message: Message) -> ChannelOverview:
        commitments = self._commitments.apply(state.commitments, message)
        by_type = dict(state.by_type)
        by_type[message.type] = by_type.get(message.type, 0) + 1
        update: dict[str, object] = {
            "by_type": by_type,
            "first_activity": state.first_activity or message.created_at,
            "last_activity": message.created_at,
            "last_message_id": message.id,
            "message_count": state.message_count + 1,
        }
        if commitments is not state.commitments:
            update["commitments"] = commitments
            update["open_commitments"] = commitments.open_count()
        if message.type is not MessageType.EVENT:
            participants = dict(state.participants)
            participants[message.sender] = participants.get(message.sender, 0) + 1
            update["participants"] = participants
            if message.topic not in state.topics:
                update["topics"] = [*state.topics, message.topic]
        return copy_with(state, update)
