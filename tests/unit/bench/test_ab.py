"""bench.ab: its table gives every round and the median of each side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.ab import report


def run(msgs: float, cpu: float, broker: float) -> dict[str, Any]:
    to_event = {"msgs_per_s": msgs * 2, "cpu_ms_per_msg": cpu / 2, "broker_cpu_ms_per_msg": broker}
    return {
        "to_last_event": to_event,
        "msgs_per_s": msgs,
        "cpu_ms_per_msg": cpu,
        "broker_cpu_ms_per_msg": broker * 2,
        "broker_jit_ms_per_msg": broker,
    }


def test_each_round_and_the_median_of_each_side_are_rows() -> None:
    runs = {
        "base": [run(100, 3.0, 0.5), run(300, 1.0, 0.1), run(200, 2.0, 0.3)],
        "this": [run(400, 1.0, 0.2)],
    }
    lines = report(runs, Path("/tmp/base"))
    rows = [line for line in lines if line.startswith("| ")][1:]  # after the header row
    assert len(rows) == 3 + 1 + 1 + 1
    base_median = next(row for row in rows if "base), median" in row)
    assert [cell.strip() for cell in base_median.split("|")[2:-1]] == [
        "400.00",
        "1.00",
        "0.30",
        "200.00",
        "2.00",
        "0.60",
        "0.30",
    ]
    assert (
        "| this checkout, round 0 | 800.00 | 0.50 | 0.20 | 400.00 | 1.00 | 0.40 | 0.20 |" in lines
    )
