from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeVar

import orjson
import pytest
from pydantic import BaseModel

from projections.commitments import CommitmentProjection, CommitmentsState
from projections.model import Message, MessageType
from projections.overview import ChannelOverview, ChannelOverviewProjection
from projections.projection import (
    ChannelProjection,
    canonical_hash,
    dump_state,
    fold,
    load_state,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = TypeVar("S")


def status(n: int, sender: str = "alice") -> Message:
    return Message(
        id=f"m{n}",
        channel="c",
        sender=sender,
        type=MessageType.STATUS,
        content=f"step {n}",
        created_at=T0,
    )


class Counter:
    """A projection over plain data: counts STATUS messages per sender."""

    name = "counter"
    version = 1

    def identity(self) -> dict[str, int]:
        return {}

    def apply(self, state: dict[str, int], message: Message) -> dict[str, int]:
        if message.type is not MessageType.STATUS:
            return state
        return {**state, message.sender: state.get(message.sender, 0) + 1}


class Tally(BaseModel):
    seen: list[str] = []


class Ids:
    name = "ids"
    version = 2

    def identity(self) -> Tally:
        return Tally()

    def apply(self, state: Tally, message: Message) -> Tally:
        return Tally(seen=[*state.seen, message.id])


def _check(projection: ChannelProjection[S]) -> None:
    assert isinstance(projection.name, str) and isinstance(projection.version, int)
    assert projection.identity() is not projection.identity()
    assert projection.identity() == projection.identity()


def test_implementations_satisfy_the_protocol() -> None:
    counter: ChannelProjection[dict[str, int]] = Counter()
    ids: ChannelProjection[Tally] = Ids()
    commitments: ChannelProjection[CommitmentsState] = CommitmentProjection()
    overview: ChannelProjection[ChannelOverview] = ChannelOverviewProjection()
    _check(counter)
    _check(ids)
    _check(commitments)
    _check(overview)


def test_fold_starts_from_identity() -> None:
    assert fold(Counter(), []) == {}
    assert fold(Counter(), [status(1), status(2, "bob"), status(3)]) == {"alice": 2, "bob": 1}


def test_fold_continues_from_a_given_state() -> None:
    head = fold(Ids(), [status(1)])
    assert fold(Ids(), [status(2)], head).seen == ["m1", "m2"]
    assert head.seen == ["m1"]


def test_fold_accepts_any_iterable() -> None:
    assert fold(Counter(), (status(n) for n in range(3))) == {"alice": 3}


def test_dump_state_gives_json_types_as_a_table_would_return_them() -> None:
    assert dump_state(Tally(seen=["a"])) == {"seen": ["a"]}
    plain = {"pairs": (("alice", "QUERY"),), "last": ("bob", 2)}
    dumped = dump_state(plain)
    assert dumped == {"pairs": [["alice", "QUERY"]], "last": ["bob", 2]}
    assert dumped == orjson.loads(orjson.dumps(plain)) and dumped is not plain
    assert dump_state(None) is None
    assert dump_state(3) == 3


def test_load_state_validates_into_the_identity_type() -> None:
    loaded = load_state(Ids(), {"seen": ["x", "y"]})
    assert isinstance(loaded, Tally) and loaded.seen == ["x", "y"]
    tally = Tally(seen=["z"])
    assert load_state(Ids(), tally) is tally
    plain = {"bob": 4}
    assert load_state(Counter(), plain) is plain
    with pytest.raises(ValueError):
        load_state(Ids(), {"seen": "not a list"})


def test_dump_then_load_roundtrips() -> None:
    state = fold(Ids(), [status(1), status(2)])
    assert load_state(Ids(), dump_state(state)) == state


def test_canonical_hash_ignores_key_order() -> None:
    assert canonical_hash({"a": 1, "b": [1, 2]}) == canonical_hash({"b": [1, 2], "a": 1})
    assert canonical_hash({"a": 1}) != canonical_hash({"a": 2})
    assert canonical_hash([1, 2]) != canonical_hash([2, 1])
    digest = canonical_hash({"a": 1})
    assert len(digest) == 64 and int(digest, 16) >= 0


def test_canonical_hash_of_a_model_equals_hash_of_its_dump() -> None:
    state = Tally(seen=["a", "b"])
    assert canonical_hash(state) == canonical_hash({"seen": ["a", "b"]})
    assert canonical_hash(datetime(2026, 1, 1, tzinfo=UTC)) == canonical_hash(
        datetime(2026, 1, 1, tzinfo=UTC)
    )


def test_live_and_changes_default_to_the_whole_state_and_nothing() -> None:
    from projections.projection import changes_of, live_of

    class Counter:
        name = "counter"
        version = 1

        def identity(self) -> dict[str, int]:
            return {"n": 0}

        def apply(self, state: dict[str, int], message: Message) -> dict[str, int]:
            return {"n": state["n"] + 1}

    counter = Counter()
    assert live_of(counter, {"n": 2}) == {"n": 2}
    assert changes_of(counter, {"n": 1}, {"n": 2}) is None
    overview = ChannelOverviewProjection()
    assert "recent_participants" in live_of(overview, overview.identity())


def test_a_projection_declares_the_counters_of_what_its_bounds_dropped() -> None:
    from projections.commitments import CommitmentProjection
    from projections.overview import ChannelOverviewProjection
    from projections.projection import bound_counters_of

    assert bound_counters_of(CommitmentProjection()) == ("untracked", "evicted")
    assert bound_counters_of(ChannelOverviewProjection()) == (
        "participants_evicted",
        "other_topic_messages",
    )
    assert bound_counters_of(object()) == ()  # type: ignore[arg-type]  # one that declares none
