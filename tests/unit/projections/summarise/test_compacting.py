"""The budget guard: a text over the budget is rewritten by the digest, and says so."""

from __future__ import annotations

from projections.summarise import SummaryResult, estimate_tokens, render_message
from projections.summarise.compacting import COMPACTED_FROM, CompactingSummariser
from projections.summarise.digest import DigestSummariser
from projections.summarise.verbatim import VerbatimContentSummariser
from tests.unit.projections.summarise.support import msg


async def test_compacting_rewrites_an_over_budget_text_with_the_digest() -> None:
    digest = DigestSummariser(max_tokens=40)
    compacting = CompactingSummariser(VerbatimContentSummariser(render_message), digest)
    short = await compacting.summarise([msg("ann", "Ship it.")])
    assert short.annotations["tier"] == "verbatim" and COMPACTED_FROM not in short.annotations
    talk = [
        msg(["ann", "bob"][i % 2], f"The invoice queue shard {i} moves by region.", at=i)
        for i in range(40)
    ]
    long = await compacting.summarise(talk, short)
    assert long.annotations["tier"] == "digest"
    assert long.annotations[COMPACTED_FROM] == "verbatim"
    assert estimate_tokens(long.text) <= 40
    after = await compacting.summarise([msg("bob", "Done.")], SummaryResult("x", long.annotations))
    assert COMPACTED_FROM not in after.annotations
