"""`copy_with` builds exactly what pydantic's `model_copy(update=...)` builds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, PrivateAttr

from projections.commitments import Commitment, CommitmentsState, CommitmentState
from projections.fastcopy import copy_with
from projections.model import MessageType
from projections.overview import ChannelOverview

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OPEN = Commitment(
    id="m1",
    correlation_id="c1",
    requester="ann",
    opened_by_type=MessageType.QUERY,
    opened_by="m1",
    opened_at=T0,
)


def parts(model: BaseModel) -> tuple[Any, ...]:
    return (
        type(model),
        model.__dict__,
        model.__pydantic_fields_set__,
        model.__pydantic_extra__,
        model.__pydantic_private__,
        model.model_dump_json(),
    )


@pytest.mark.parametrize(
    ("model", "update"),
    [
        (OPEN, {"state": CommitmentState.FULFILLED, "resolved_by": "m2", "resolved_at": T0}),
        (OPEN, {}),
        (CommitmentsState(), {"commitments": {"m1": OPEN}, "declines": 1}),
        (
            ChannelOverview(participants={"ann": 1}),
            {"participants": {"ann": 2}, "message_count": 2, "last_message_id": "m2"},
        ),
    ],
)
def test_copy_with_equals_model_copy(model: BaseModel, update: dict[str, Any]) -> None:
    fast, slow = copy_with(model, update), model.model_copy(update=update)
    assert parts(fast) == parts(slow)
    assert fast == slow
    assert fast is not model and fast.__dict__ is not model.__dict__
    assert parts(model) != parts(fast) or not update  # the original is untouched


def test_models_with_extra_or_private_values_take_pydantics_way() -> None:
    class Loose(BaseModel):
        model_config = ConfigDict(extra="allow")
        a: int = 0

    class Private(BaseModel):
        a: int = 0
        _seen: int = PrivateAttr(default=3)

    loose = Loose(a=1, b=2)
    assert parts(copy_with(loose, {"a": 5, "c": 6})) == parts(
        loose.model_copy(update={"a": 5, "c": 6})
    )
    private = Private(a=1)
    copied = copy_with(private, {"a": 2})
    assert parts(copied) == parts(private.model_copy(update={"a": 2}))
    assert copied._seen == 3
