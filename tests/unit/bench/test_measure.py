"""bench.measure: percentiles, rates and CPU from polls, summary coverage, wake figures and
writes per message by role and topic."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from bench.measure import (
    Poll,
    all_covered,
    channel_ends,
    chorus_roles,
    jit_cpu_seconds,
    percentile,
    percentiles,
    quix_roles,
    run_figures,
    wake_figures,
    writes_per_message,
)


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 51.0  # index round(49.5) = 50
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([3.0, 1.0, 2.0], 0) == 1.0
    assert math.isnan(percentile([], 50))
    assert percentiles([5.0]) == {"p50": 5.0, "p95": 5.0, "p99": 5.0}


def test_run_figures_start_at_the_first_poll_with_output() -> None:
    polls = [
        Poll(0.0, 0, 1.0, 10.0),  # start-up: no message's cost
        Poll(1.0, 100, 2.0, 11.0, 0.5),
        Poll(3.0, 1_100, 4.0, 12.0, 0.9),
    ]
    figures = run_figures(polls)
    assert figures["msgs_per_s"] == pytest.approx(500.0)
    assert figures["cpu_ms_per_msg"] == pytest.approx(2.0)
    assert figures["broker_cpu_ms_per_msg"] == pytest.approx(1.0)
    assert figures["broker_jit_ms_per_msg"] == pytest.approx(0.4)
    assert run_figures(polls, per_message=2)["msgs_per_s"] == pytest.approx(250.0)


def test_run_figures_give_each_process_seen_at_both_ends_its_own_cpu() -> None:
    polls = [
        Poll(1.0, 100, 2.0, 11.0, 0.0, {"fold": (7, 1.0), "context": (8, 0.5), "gone": (9, 0.2)}),
        Poll(2.0, 600, 3.0, 12.0, 0.0, {"fold": (7, 1.5), "context": (8, 0.75), "late": (10, 0.1)}),
    ]
    assert run_figures(polls)["cpu_ms_per_msg_by_process"] == {
        "context": pytest.approx(0.5),
        "fold": pytest.approx(1.0),
    }
    # A role restarted in between (a new pid), even past its first CPU figure, is left out.
    restarted = [
        polls[0],
        Poll(2.0, 600, 3.0, 12.0, 0.0, {"fold": (11, 3.0), "context": (8, 0.75)}),
    ]
    assert set(run_figures(restarted)["cpu_ms_per_msg_by_process"]) == {"context"}


def test_run_figures_need_two_polls_with_progress() -> None:
    assert run_figures([Poll(0.0, 0, 0.0, 0.0), Poll(1.0, 5, 1.0, 1.0)])["msgs_per_s"] is None
    assert run_figures([Poll(0.0, 5, 0.0, 0.0), Poll(1.0, 5, 1.0, 1.0)])["msgs_per_s"] is None


def test_channel_ends_keep_each_channels_last_offset() -> None:
    landed = [(0, 0), (1, 0), (0, 7), (0, 3)]
    assert channel_ends(["a", "b", "a", "c"], landed) == {"a": 7, "b": 0, "c": 3}


def test_all_covered_when_every_channels_last_message_is_summarised() -> None:
    ends = {"a": 10, "b": 4}
    assert not all_covered(ends, {"a": 10})
    assert not all_covered(ends, {"a": 10, "b": 3})
    assert all_covered(ends, {"a": 12, "b": 4})


def test_wake_figures_count_the_messages_never_woken() -> None:
    sent = {"m1": 10.0, "m2": 10.5, "m3": 11.0}
    figures = wake_figures(sent, {"m1": 10.02, "m2": 10.6, "other": 9.0})
    assert figures["messages"] == 3
    assert figures["never_woken"] == 1
    assert figures["wake_ms"]["p50"] == pytest.approx(20.0)  # nearest rank of [20, 100]
    assert figures["max_ms"] == pytest.approx(100.0)
    assert wake_figures({"m": 1.0}, {})["max_ms"] is None


def test_chorus_topics_by_role() -> None:
    role_of = chorus_roles("wake.", "chorus-wake")
    assert role_of("chorus-wake-context-v3-channel-state-changelog") == (
        "context",
        "channel-state-changelog",
    )
    assert role_of("chorus-wake-fold-overview-v3-changelog") == (
        "fold",
        "fold-overview-v3-changelog",
    )
    assert role_of("wake.summaries") == ("context", "summaries")
    assert role_of("wake.recaps") == ("context", "recaps")
    assert role_of("wake.driver-events") == ("fold", "driver-events")
    assert role_of("wake.dead-letters") == ("fold", "dead-letters")
    assert role_of("wake.messages") is None  # an input
    assert role_of("other.driver-events") is None  # another system's


def test_quix_topics() -> None:
    role_of = quix_roles("q.", "quix-q")
    assert role_of("changelog__quix-q--q.messages--default") == ("quix", "changelog")
    assert role_of("q.driver-events") == ("quix", "driver-events")
    assert role_of("changelog__quix-other--x--default") is None
    assert role_of("q.messages") is None


def test_writes_per_message_by_role_with_totals() -> None:
    role_of = chorus_roles("w.", "chorus-w")
    records = {
        "w.driver-events": 100,
        "chorus-w-fold-overview-v3-changelog": 50,
        "w.summaries": 10,
        "w.recaps": 0,  # nothing written: left out
        "w.messages": 100,  # the input: left out
    }
    sizes = {"w.driver-events": 120_000, "chorus-w-fold-overview-v3-changelog": 5_000}
    writes = writes_per_message(records, sizes, 100, role_of)
    assert writes["fold"]["driver-events"] == {"records": 1.0, "bytes": 1200.0}
    assert writes["fold"]["total"] == {"records": 1.5, "bytes": 1250.0}
    assert writes["context"] == {
        "summaries": {"records": 0.1, "bytes": 0.0},
        "total": {"records": 0.1, "bytes": 0.0},
    }
    assert writes["all roles"]["total"]["records"] == pytest.approx(1.6)
    assert set(writes) == {"fold", "context", "all roles"}


def test_writes_per_message_of_one_role_have_no_all_roles_total() -> None:
    writes = writes_per_message({"q.driver-events": 5}, {}, 5, quix_roles("q.", "g"))
    assert set(writes) == {"quix"}
    assert writes_per_message({"q.driver-events": 5}, {}, 0, quix_roles("q.", "g")) == {}


def test_jit_cpu_is_the_compiler_threads_cpu(tmp_path: Path) -> None:
    """Only the threads named as HotSpot names its compilers count, in clock ticks."""
    ticks = os.sysconf("SC_CLK_TCK")
    for tid, name, utime, stime in (
        (1, "java", 500, 100),
        (2, "C2 CompilerThre", 3 * ticks, ticks),
        (3, "C1 CompilerThre", ticks, 0),
        (4, "data-plane-kafk", 900, 900),
    ):
        task = tmp_path / "7" / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "comm").write_text(name + "\n")
        fields = ["S", *["0"] * 10, str(utime), str(stime), *["0"] * 30]
        (task / "stat").write_text(f"{tid} ({name}) " + " ".join(fields))
    assert jit_cpu_seconds(7, tmp_path) == pytest.approx(5.0)
    assert jit_cpu_seconds(8, tmp_path) == 0.0  # gone
    assert jit_cpu_seconds(None) == 0.0
