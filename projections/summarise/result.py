"""The summary value and the summariser protocol.

A summary is text plus string annotations. Annotations carry structured state from one run
to the next (the tier used, accumulated participants and topics, model usage) and are opaque
to whoever stores them.

The annotation contract: every summariser starts from a copy of `previous.annotations` and
overwrites only the keys it owns, so keys written by another tier or by domain code (such as
`domain`) survive tier changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, field_validator

T = TypeVar("T")


class SummaryResult(BaseModel):
    """Summary text plus annotations. Immutable; `annotations=None` becomes `{}`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    annotations: dict[str, str] = {}

    def __init__(
        self,
        text: str,
        annotations: Mapping[str, str] | None = None,
        **data: Any,
    ) -> None:
        super().__init__(text=text, annotations=annotations, **data)

    @field_validator("annotations", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        if value is None:
            return {}
        if isinstance(value, Mapping):
            return dict(value)
        return value


# The default budget of a summary (CHORUS_SUMMARY_MAX_TOKENS), in estimated tokens.
SUMMARY_MAX_TOKENS = 500


def base_annotations(previous: SummaryResult | None) -> dict[str, str]:
    """A fresh, mutable copy of the previous annotations: the start of every result."""
    return dict(previous.annotations) if previous is not None else {}


def previous_text(previous: SummaryResult | None) -> str:
    """The previous text, or "" when there is none or it is blank."""
    if previous is None or not previous.text.strip():
        return ""
    return previous.text


class ContentSummariser(Protocol[T]):
    """Folds a batch of items into a running summary."""

    async def summarise(
        self, items: list[T], previous: SummaryResult | None = None
    ) -> SummaryResult: ...
