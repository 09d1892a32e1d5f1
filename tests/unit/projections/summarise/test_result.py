"""projections.summarise.result: the summary a summariser returns."""

from __future__ import annotations

import pytest

from projections.summarise import (
    SummaryResult,
)


def test_summary_result_none_annotations_become_empty_and_it_is_frozen() -> None:
    result = SummaryResult("text", None)
    assert result.annotations == {}
    assert SummaryResult(text="t", annotations={"a": "b"}).annotations == {"a": "b"}
    assert SummaryResult.model_validate({"text": "t", "annotations": None}).annotations == {}
    with pytest.raises(ValueError):
        result.text = "other"  # type: ignore[misc]
