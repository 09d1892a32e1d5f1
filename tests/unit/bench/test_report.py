"""bench.report: the throughput table shows the broker's JIT beside its CPU, and the warm-up."""

from __future__ import annotations

from typing import Any

from bench.report import throughput


def figures(msgs: float, broker: float, jit: float) -> dict[str, Any]:
    return {
        "msgs_per_s": msgs,
        "cpu_ms_per_msg": 1.0,
        "broker_cpu_ms_per_msg": broker,
        "broker_jit_ms_per_msg": jit,
    }


def test_the_throughput_table_gives_the_broker_jit_and_the_warm_up_runs() -> None:
    result = {
        "messages": 20_000,
        "channels": 200,
        "message_bytes": {"min": 512, "max": 2048, "p50": 1374},
        "quix_version": "3.28.1",
        "warm_up": [
            {"broker_cpu_ms_per_msg": 0.5, "broker_jit_ms_per_msg": 0.2},
            {"broker_cpu_ms_per_msg": 0.2, "broker_jit_ms_per_msg": 0.02},
        ],
        "fold_stage": figures(3000, 0.05, 0.01),
        "quix": figures(2000, 0.2, 0.1),
        "pipeline": {**figures(900, 0.25, 0.05), "to_last_event": figures(2000, 0.2, 0.04)},
    }
    lines = throughput(result)
    assert "| chorus worker to its last summary | 900 | 0.45× | 1.00 | 0.25 | 0.05 |" in lines
    assert any("by 2 unmeasured pipeline run(s)" in line for line in lines)
    assert any("0.20 of 0.50, 0.02 of 0.20" in line for line in lines)
