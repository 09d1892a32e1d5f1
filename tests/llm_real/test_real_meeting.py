"""A real QMSum meeting through the summary stage's batching with a real model (opt-in).

Whatever the 270M model answers, what the stage would publish after every batch must be a
summary: within budget, free of the prompt's own markers, never an answer the LLM tier
rejected. Skipped when ../shared/data/qmsum/val is absent.
"""

from __future__ import annotations

import pytest

from bench.summary_quality import as_messages
from projections.summarise import FALLBACK_FROM, FALLBACK_REASON, estimate_tokens
from streams.llm.client import OpenAIChatClient
from streams.settings import Settings
from streams.worker.stages.summaries import summariser_from_settings
from streams.worker.summary_simulation import simulate
from tests.llm_real.recording import (
    Meeting,
    RecordingClient,
    RecordingSummariser,
    degenerate,
    selected,
)
from tests.llm_real.server import LlmServer

pytestmark = pytest.mark.llm_real

# Six LLM calls (TS3010a, 124 turns) of 20-60 s each on 2 shared cores: 300 s measured.
MEETING_TIMEOUT_SECONDS = 1200


@pytest.fixture(scope="module")
def meeting() -> Meeting:
    """The shortest val meeting (fewest turns, then name): the fewest LLM calls."""
    found = selected("val", 1, shortest=True)
    if not found:
        pytest.skip("../shared/data/qmsum/val is absent (or set CHORUS_SHARED_DATA)")
    return found[0]


@pytest.mark.timeout(MEETING_TIMEOUT_SECONDS)
async def test_a_real_meeting_never_publishes_a_degenerate_answer(
    llm_client: OpenAIChatClient,
    llm_server: LlmServer,
    meeting: Meeting,
) -> None:
    name, turns, _ = meeting
    settings = Settings(llm_context_tokens=llm_server.n_ctx)
    recording = RecordingClient(llm_client)
    summariser = RecordingSummariser(summariser_from_settings(settings, recording), recording)

    records = await simulate(as_messages(name, turns), settings, summariser)

    (record,) = records.values()
    assert record.total_messages == len(turns)
    assert record.text == summariser.batches[-1].result.text
    asked = [batch for batch in summariser.batches if batch.calls]
    assert len(asked) >= len(turns) // settings.summary_after_messages, "batches skipped the LLM"
    for batch in asked:
        if not batch.accepted:  # the digest answered instead, saying why
            assert batch.result.annotations["tier"] == "digest"
            assert batch.result.annotations[FALLBACK_FROM] == "synthesised"
            assert batch.result.annotations[FALLBACK_REASON]
    assert degenerate(summariser.batches, settings.summary_max_tokens) == []
    assert 0 < estimate_tokens(record.text) <= settings.summary_max_tokens
