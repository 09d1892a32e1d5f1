"""streams.llm.metering: every LLM call, success or failure, is booked per purpose and model."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from projections.summarise.llm import Completion, LlmError
from streams.llm.metering import CostMeter, MeteredChatClient


class ScriptedClient:
    model = "tiny"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        if self.fail:
            raise LlmError("the model is down")
        return Completion("ok", self.model, prompt_tokens=10, completion_tokens=4, latency_ms=20)


async def test_calls_and_failures_are_booked_per_purpose_and_model() -> None:
    meter = CostMeter()
    summary = MeteredChatClient(ScriptedClient(), meter, "summary")
    assert summary.model == "tiny"
    assert (await summary.complete("system", "user", 50)).text == "ok"
    await summary.complete("system", "user", 50)
    with pytest.raises(LlmError):
        await MeteredChatClient(ScriptedClient(fail=True), meter, "recap").complete("s", "u", 5)

    rows = {row["purpose"]: row for row in meter.as_json()}
    assert rows["summary"] == {
        "purpose": "summary",
        "model": "tiny",
        "calls": 2,
        "failures": 0,
        "prompt_tokens": 20,
        "completion_tokens": 8,
        "mean_latency_ms": 20.0,
    }
    assert rows["recap"]["calls"] == 1 and rows["recap"]["failures"] == 1

    metrics = generate_latest(meter.registry).decode()
    assert 'chorus_llm_calls_total{model="tiny",outcome="ok",purpose="summary"} 2.0' in metrics
    assert 'chorus_llm_calls_total{model="tiny",outcome="error",purpose="recap"} 1.0' in metrics


def test_no_calls_means_no_rows_and_no_division_by_zero() -> None:
    meter = CostMeter()
    assert meter.as_json() == []
    assert meter.usage[("summary", "m")].as_json()["mean_latency_ms"] == 0.0
