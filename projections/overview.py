"""A channel at a glance: who spoke, about what, when, and how much is still owed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from projections.fastcopy import copy_with
from projections.model import Message, MessageType

# Defaults of CHORUS_OVERVIEW_MAX_PARTICIPANTS and CHORUS_OVERVIEW_MAX_TOPICS: with 200-character
# names and topics the overview stays under 60 KB.
MAX_PARTICIPANTS = 200
MAX_TOPICS = 50
# Participants a driver event carries (the most recently active); the state has them all.
LIVE_PARTICIPANTS = 10


class ChannelOverview(BaseModel):
    """Counts for one channel, bounded at any channel length.

    `participants` leaves out EVENTs: those are observer-only records (the expiry timer
    writes some as "chorus"), not anyone taking part in the conversation. It holds at most
    `max_participants` senders, the most recently active last; a sender pushed out by a new
    one leaves its messages in `other_participant_messages` and is counted in
    `participants_evicted` (if it speaks again it starts from one). `topics` keeps the
    first `max_topics` topics seen; messages on later new ones count in
    `other_topic_messages`.
    `message_count` and `by_type` count every record. Activity times follow log order,
    not the largest timestamp, so a producer with a skewed clock cannot move them.

    `open_commitments` is the commitments projection's open count after the same message,
    set by the fold step (`projections.channel.step`) when both are folded: the overview
    holds no copy of the commitments.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    participants: dict[str, int] = {}
    participants_evicted: int = 0
    other_participant_messages: int = 0
    by_type: dict[MessageType, int] = {}
    topics: list[str] = []
    other_topic_messages: int = 0
    first_activity: datetime | None = None
    last_activity: datetime | None = None
    last_message_id: str | None = None
    message_count: int = 0
    open_commitments: int = 0

    def dumped(self) -> dict[str, Any]:
        """`model_dump(mode="json")`, built directly: the fold step dumps the overview after
        every message, and pydantic's walk of 200 participants cost ten times this (a
        property test holds the two equal)."""
        return {
            "participants": dict(self.participants),
            "participants_evicted": self.participants_evicted,
            "other_participant_messages": self.other_participant_messages,
            "by_type": {kind.value: count for kind, count in self.by_type.items()},
            "topics": list(self.topics),
            "other_topic_messages": self.other_topic_messages,
            "first_activity": to_jsonable_python(self.first_activity),
            "last_activity": to_jsonable_python(self.last_activity),
            "last_message_id": self.last_message_id,
            "message_count": self.message_count,
            "open_commitments": self.open_commitments,
        }


# The overview's fields that `changes` reports whole when they change.
_SCALARS = (
    "participants_evicted",
    "other_participant_messages",
    "other_topic_messages",
    "first_activity",
    "last_activity",
    "last_message_id",
    "message_count",
    "open_commitments",
)


class ChannelOverviewProjection:
    name = "overview"
    # 3: stored whole, once per checkpoint (`streams.fold_store`); 2 was stored split.
    version = 3
    # What the bounds dropped: participants pushed out, messages on topics past the cap.
    bound_counters = ("participants_evicted", "other_topic_messages")

    def __init__(
        self, max_participants: int = MAX_PARTICIPANTS, max_topics: int = MAX_TOPICS
    ) -> None:
        if max_participants < 1 or max_topics < 1:
            raise ValueError(
                f"overview bounds must be at least 1, got {max_participants} participants "
                f"and {max_topics} topics"
            )
        self.max_participants = max_participants
        self.max_topics = max_topics

    def identity(self) -> ChannelOverview:
        return ChannelOverview()

    def live(self, state: ChannelOverview) -> dict[str, Any]:
        """What a driver event carries: the counts and activity, and the LIVE_PARTICIPANTS
        most recently active participants (most recent last); not the topics."""
        recent = list(state.participants.items())[-LIVE_PARTICIPANTS:]
        return {
            "message_count": state.message_count,
            "by_type": {kind.value: count for kind, count in state.by_type.items()},
            "open_commitments": state.open_commitments,
            "first_activity": to_jsonable_python(state.first_activity),
            "last_activity": to_jsonable_python(state.last_activity),
            "last_message_id": state.last_message_id,
            "participant_count": len(state.participants),
            "recent_participants": dict(recent),
            "participants_evicted": state.participants_evicted,
            "other_participant_messages": state.other_participant_messages,
            "topic_count": len(state.topics),
            "other_topic_messages": state.other_topic_messages,
        }

    def changes(self, before: ChannelOverview, after: ChannelOverview) -> dict[str, Any]:
        """The fields one message changed, with their new values: of `participants` and
        `by_type` only the changed entries, of `topics` only the new ones.

        Participants run from least to most recently active and a fold changes only the
        most recent ones, so they are compared from that end, up to the first unchanged one:
        the cost does not grow with how many participants the overview keeps."""
        changed: dict[str, Any] = {}
        if after.participants is not before.participants:
            previous = before.participants
            recent: dict[str, int] = {}
            for name in reversed(after.participants):
                count = after.participants[name]
                if previous.get(name) == count:
                    break
                recent[name] = count
            if recent:
                changed["participants"] = dict(reversed(recent.items()))
        if after.by_type != before.by_type:
            changed["by_type"] = {
                kind.value: count
                for kind, count in after.by_type.items()
                if before.by_type.get(kind) != count
            }
        if after.topics != before.topics:
            changed["topics"] = [topic for topic in after.topics if topic not in before.topics]
        for field in _SCALARS:
            value = getattr(after, field)
            if value != getattr(before, field):
                changed[field] = to_jsonable_python(value)
        return changed

    def apply(self, state: ChannelOverview, message: Message) -> ChannelOverview:
        by_type = dict(state.by_type)
        by_type[message.type] = by_type.get(message.type, 0) + 1
        update: dict[str, object] = {
            "by_type": by_type,
            "first_activity": state.first_activity or message.created_at,
            "last_activity": message.created_at,
            "last_message_id": message.id,
            "message_count": state.message_count + 1,
        }
        if message.type is not MessageType.EVENT:
            participants = dict(state.participants)
            # Re-inserted so the dict runs from least to most recently active.
            count = participants.pop(message.sender, 0) + 1
            participants[message.sender] = count
            if len(participants) > self.max_participants:
                oldest = next(iter(participants))
                update["other_participant_messages"] = (
                    state.other_participant_messages + participants.pop(oldest)
                )
                update["participants_evicted"] = state.participants_evicted + 1
            update["participants"] = participants
            if message.topic not in state.topics:
                if len(state.topics) < self.max_topics:
                    update["topics"] = [*state.topics, message.topic]
                else:
                    update["other_topic_messages"] = state.other_topic_messages + 1
        return copy_with(state, update)
