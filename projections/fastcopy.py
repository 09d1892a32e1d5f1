"""`model_copy(update=...)` for the projections' own frozen models, at a fraction of the cost.

Folding a message copies a state or two (`ChannelOverview`, `CommitmentsState`,
`Commitment`); pydantic's generic `model_copy` goes through `__copy__` and `copy.copy` of
each part, which costs more than the rest of the fold. `copy_with` builds the same instance
directly: the same `__dict__`, fields set, extra and private values (a unit test compares
them with `model_copy`). Models with extra values or private attributes take pydantic's way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

_set = object.__setattr__


def copy_with(model: M, update: Mapping[str, Any]) -> M:
    """`model.model_copy(update=update)`: a shallow copy with `update` applied, unvalidated."""
    if model.__pydantic_extra__ is not None or model.__pydantic_private__ is not None:
        return model.model_copy(update=update)
    cls = type(model)
    new = cls.__new__(cls)
    _set(new, "__dict__", {**model.__dict__, **update})
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    _set(new, "__pydantic_private__", None)
    return new
