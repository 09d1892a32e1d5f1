"""bench/pipeline.py's pure parts: coverage, summary lag, CPU and ratio arithmetic."""

from __future__ import annotations

import math

import orjson
import pytest

from bench.common import percentile
from bench.pipeline import (
    Coverage,
    Sent,
    Summary,
    bytes_per_message,
    channel_ends,
    covers,
    cpu_ms_per_message_to,
    first_covering,
    lags_ms,
    percentiles,
    pipeline_ratios,
    pipeline_result,
    process_name,
    summary_of,
)
from bench.report import markdown, targets
from bench.run import fold_ratios
from streams.records import SummaryRecord


def summary(channel: str, last: int, created_ms: int, arrived: float | None = None) -> Summary:
    return Summary(channel, last, created_ms, created_ms / 1000 if arrived is None else arrived)


def test_covers_is_inclusive_and_none_covers_nothing() -> None:
    assert covers(5, 5)
    assert covers(6, 5)
    assert not covers(4, 5)
    assert not covers(None, 0)


def test_summary_of_reads_the_record_the_worker_writes() -> None:
    record = SummaryRecord(channel="c1", text="t", first_offset=3, last_offset=9)
    found = summary_of(record.model_dump_json().encode(), 1234, 5.0)
    assert found == Summary("c1", 9, 1234, 5.0)


def test_summary_of_skips_tombstones_garbage_and_records_covering_nothing() -> None:
    assert summary_of(None, 0, 0.0) is None
    assert summary_of(b"not json", 0, 0.0) is None
    assert summary_of(b"[1]", 0, 0.0) is None
    empty = SummaryRecord(channel="c1", text="")
    assert summary_of(empty.model_dump_json().encode(), 0, 0.0) is None
    assert summary_of(orjson.dumps({"last_offset": 3}), 0, 0.0) is None


def test_channel_ends_keeps_each_channels_highest_offset() -> None:
    assert channel_ends([("a", 0), ("b", 1), ("a", 7), ("a", 3)]) == {"a": 7, "b": 1}


def test_coverage_done_when_every_channels_last_message_is_covered() -> None:
    coverage = Coverage({"a": 10, "b": 4})
    coverage.add(summary("a", 10, 1_000))
    assert not coverage.done
    assert coverage.missing() == 1
    coverage.add(summary("b", 3, 1_500))  # short of b's last message
    assert not coverage.done
    coverage.add(summary("b", 4, 2_000, arrived=2.1))
    assert coverage.done
    assert (coverage.done_ms, coverage.done_at) == (2_000, 2.1)
    coverage.add(summary("b", 4, 3_000))  # a state refresh of the same record: done stands
    assert coverage.done_ms == 2_000
    assert coverage.first_ms == 1_000
    assert coverage.records == 4


def test_coverage_never_goes_back_on_an_older_record() -> None:
    coverage = Coverage({"a": 10})
    coverage.add(summary("a", 12, 1_000))
    coverage.add(summary("a", 5, 2_000))  # read later, covers less
    assert coverage.covered["a"] == 12
    assert coverage.done_ms == 1_000


def test_first_covering_is_the_first_summary_at_or_past_the_offset() -> None:
    sent = {
        "m1": Sent("a", 0, 0.0),
        "m2": Sent("a", 1, 0.1),
        "m3": Sent("a", 5, 0.2),
        "m4": Sent("b", 0, 0.3),
        "m5": Sent("c", 0, 0.4),  # no summary of c
    }
    summaries = [
        summary("a", 1, 1_000, arrived=1.2),
        summary("a", 0, 1_500, arrived=1.6),  # covers m1 too, but later
        summary("a", 6, 3_000, arrived=3.1),
        summary("b", 0, 2_000, arrived=2.05),
    ]
    arrived = first_covering(sent, summaries)
    assert arrived == {"m1": 1.2, "m2": 1.2, "m3": 3.1, "m4": 2.05}
    created = first_covering(sent, summaries, by="created")
    assert created == {"m1": 1.0, "m2": 1.0, "m3": 3.0, "m4": 2.0}


def test_first_covering_orders_by_time_not_by_reading_order() -> None:
    sent = {"m": Sent("a", 2, 0.0)}
    summaries = [summary("a", 9, 5_000), summary("a", 3, 4_000)]
    assert first_covering(sent, summaries) == {"m": 4.0}


def test_lags_in_ms_with_uncovered_messages_as_a_backlog() -> None:
    sent = {"m1": Sent("a", 0, 10.0), "m2": Sent("a", 1, 10.5)}
    lags = lags_ms(sent, {"m1": 12.5})
    assert lags[0] == pytest.approx(2_500.0)
    assert math.isinf(lags[1])
    p = percentiles(lags, (50, 99))
    assert p["p50"] == pytest.approx(2_500.0)  # nearest rank over 2 values
    assert math.isinf(p["p99"])


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 51.0  # index round(49.5) = 50
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert math.isnan(percentile([], 50))


def test_cpu_per_message_from_the_first_output_to_the_end() -> None:
    samples = [(0.0, 0, 1.0), (1.0, 100, 2.0), (2.0, 600, 4.0), (3.0, 1000, 5.0)]
    # From the first poll with output (100 events, cpu 2.0 s) to 8.0 s: 6 s for 900 messages.
    assert cpu_ms_per_message_to(samples, 1000, 1, 8.0) == pytest.approx(6_000 / 900)
    # Two events a message: 100 events are 50 messages out.
    assert cpu_ms_per_message_to(samples, 1000, 2, 8.0) == pytest.approx(6_000 / 950)
    assert cpu_ms_per_message_to([(0.0, 0, 1.0)], 1000, 1, 8.0) is None
    assert cpu_ms_per_message_to(samples, 100, 1, 8.0) is None  # nothing left at the first


def test_pipeline_result_runs_to_the_later_of_the_last_event_and_last_summary() -> None:
    coverage = Coverage({"a": 3})
    coverage.add(summary("a", 3, 14_000))
    result = pipeline_result(1_000, 10_000, 12_000, coverage, 1.5, 1.2, 3)
    assert result["seconds"] == pytest.approx(4.0)
    assert result["msgs_per_s"] == pytest.approx(250.0)
    assert result["last_driver_event_s"] == pytest.approx(2.0)
    assert result["last_summary_s"] == pytest.approx(4.0)
    assert result["summaries_done"] is True
    assert result["processes"] == 3


def test_pipeline_result_without_every_summary_has_no_rate() -> None:
    coverage = Coverage({"a": 3, "b": 1})
    coverage.add(summary("a", 3, 11_000))
    result = pipeline_result(1_000, 10_000, 12_000, coverage, None, None, 3)
    assert result["msgs_per_s"] is None
    assert result["channels_not_covered"] == 1
    assert result["last_summary_s"] is None


def test_pipeline_ratios() -> None:
    fold = {
        "chorus_pipeline": {"msgs_per_s": 500.0, "cpu_ms_per_msg": 3.0},
        "quix": {"msgs_per_s": 2_000.0, "cpu_ms_per_msg": 0.5},
    }
    assert pipeline_ratios(fold) == {"pipeline_vs_quix": 0.25, "pipeline_cpu_vs_quix": 6.0}
    assert pipeline_ratios({"quix": fold["quix"]}) == {
        "pipeline_vs_quix": None,
        "pipeline_cpu_vs_quix": None,
    }


def _results() -> dict[str, object]:
    fold = {
        "chorus_worker": {"msgs_per_s": 800.0, "cpu_ms_per_msg": 2.0, "cores_used": 1.5},
        "chorus_fold_stage": {"msgs_per_s": 2_200.0},
        "chorus_pipeline": {
            "msgs_per_s": 1_100.0,
            "cpu_ms_per_msg": 1.2,
            "cores_used": 1.6,
            "processes": 3,
            "last_driver_event_s": 2.0,
            "last_summary_s": 4.5,
            "summaries_done": True,
            "channels": 50,
            "summary_after_seconds": 2.0,
        },
        "quix": {"msgs_per_s": 2_000.0, "cpu_ms_per_msg": 0.5, "cores_used": 1.0},
    }
    latency = [
        {
            "rate": 500.0,
            "llm_delay_s": llm,
            "messages": 3_000,
            "e2e_ms": {"p50": 8.0, "p95": 20.0, "p99": 40.0 if llm is None else 60.0},
            "e2e_ms_after_1s": {"p99": 30.0},
            "summary_lag_ms": {"p50": 2_100.0, "p99": 4_000.0 if llm is None else 6_000.0},
            "summary_lag_worker_ms": {"p99": 3_900.0},
            "summary_records": 120,
        }
        for llm in (None, 2.0)
    ]
    results: dict[str, object] = {"fold": fold, "latency": latency}
    results["ratios"] = fold_ratios(results)
    return results


def test_fold_ratios_keep_the_fold_stage_beside_the_pipeline() -> None:
    ratios = fold_ratios(_results())
    assert ratios["fold_stage_vs_quix"] == pytest.approx(1.1)
    assert ratios["pipeline_vs_quix"] == pytest.approx(0.55)
    assert ratios["pipeline_cpu_vs_quix"] == pytest.approx(2.4)


def test_targets_of_issue_23() -> None:
    rows = {row["target"]: row for row in targets(_results())}
    assert rows["fold stage ≥ 1.0× Quix Streams (msg/s)"]["met"] is True
    assert rows["whole pipeline, to its last summary, ≥ 0.5× Quix Streams (msg/s)"]["met"]
    assert rows["whole pipeline's CPU per message ≤ 3× Quix Streams'"]["met"] is True
    assert rows["driver-event p99 < 50 ms at 500 msg/s (no LLM)"]["met"] is True
    assert rows["driver-event p99 < 50 ms at 500 msg/s (with 2 s LLM)"]["met"] is False
    assert rows["summary lag p99 < 5 s at 500 msg/s (no LLM)"]["met"] is True
    assert rows["summary lag p99 < 5 s at 500 msg/s (with 2 s LLM)"]["met"] is False


def test_markdown_shows_the_pipeline_and_the_summary_lag() -> None:
    text = markdown(_results())
    assert "**whole pipeline** to its last output" in text
    assert "**1,100**" in text
    assert "0.55× Quix" in text
    assert "2.40× Quix's" in text
    assert "summary lag @ 500 msg/s, no LLM" in text
    assert "2,100 / 4,000" in text


def test_process_names_by_role() -> None:
    assert process_name(True, ["python", "-m", "streams.interfaces.cli", "worker"], 1) == (
        "supervisor"
    )
    command = ["python", "-m", "streams.interfaces.cli", "worker", "--role", "context"]
    assert process_name(False, command, 2) == "context"
    assert process_name(False, ["python", "--role"], 3) == "pid 3"


def test_bytes_per_message_names_the_workers_topics_and_leaves_the_rest_out() -> None:
    sizes = {
        "bench-tput-1.messages": 27_000,
        "bench-tput-1.driver-events": 12_000,
        "bench-tput-1.driver-events-fold-only": 12_000,
        "bench-tput-1.quix-driver-events": 9_000,
        "bench-tput-1.floor-read": 1_000,
        "bench-tput-1-fold-overview-v2-changelog": 6_000,
        "bench-tput-1-context-recap-status-changelog": 4_000,
        "bench-foldonly-tput-1-fold-overview-v2-changelog": 6_000,
        "bench-tput-1.dead-letters": 0,
    }
    assert bytes_per_message(sizes, "bench-tput-1", "bench-tput-1.", 10) == {
        "driver-events": 1_200.0,
        "fold-overview-v2-changelog": 600.0,
        "context-recap-status-changelog": 400.0,
    }
