"""projections.summarise.verbatim: the small tier lists the items as they are."""

from __future__ import annotations

from projections.summarise import (
    SummaryResult,
    VerbatimContentSummariser,
)
from tests.unit.projections.summarise.support import identity


async def test_verbatim_lists_items() -> None:
    result = await VerbatimContentSummariser(identity).summarise(["alpha", "beta"], None)
    assert result.text == "- alpha\n- beta"
    assert result.annotations == {"tier": "verbatim", "itemCount": "2"}


async def test_verbatim_appends_to_previous_and_keeps_annotations() -> None:
    previous = SummaryResult("existing content", {"domain": "medical", "tier": "grouped"})
    result = await VerbatimContentSummariser(identity).summarise(["new"], previous)
    # blocks' VerbatimContentSummariser (qhorus-behaviour.md §3): the previous text, a blank
    # line, then the items. A narrative may render it as it likes; the summariser keeps this.
    assert result.text == "existing content\n\n- new"
    assert result.annotations == {"domain": "medical", "tier": "verbatim", "itemCount": "1"}
    assert previous.annotations["tier"] == "grouped"  # the previous result is untouched


async def test_verbatim_single_empty_blank_previous_and_trailing_whitespace() -> None:
    verbatim = VerbatimContentSummariser(identity)
    assert (await verbatim.summarise(["only"])).text == "- only"
    empty = await verbatim.summarise([], None)
    assert empty.text == ""
    assert empty.annotations["itemCount"] == "0"
    assert (await verbatim.summarise(["x"], SummaryResult("   \n"))).text == "- x"
    assert (await verbatim.summarise(["trailing   \n"])).text == "- trailing"
