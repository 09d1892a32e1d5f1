"""bench.meta: a result says when its machine booted and which packages' versions it ran."""

from __future__ import annotations

import time
from pathlib import Path

import pydantic
import pytest

from bench import meta
from bench.meta import booted, package_versions
from bench.report import markdown


def test_booted_is_the_kernels_btime_in_utc_whatever_the_local_zone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        stat = tmp_path / "stat"
        stat.write_text("cpu  1 2 3\nbtime 1796583840\nprocesses 9\n")
        assert booted(stat) == "2026-12-06 19:04"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_booted_is_none_where_the_machine_does_not_say(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\n")
    assert booted(stat) is None
    assert booted(tmp_path / "absent") is None


def test_package_versions_are_the_installed_ones_and_leave_out_the_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(meta, "MEASURED_PACKAGES", ("pydantic", "no-such-package-here"))
    assert package_versions() == {"pydantic": pydantic.VERSION}


def a_run(**more: object) -> dict[str, object]:
    return {
        "date": "2026-12-07 06:14",
        "command": "python -m bench.run",
        "machine": "2 cores, x86_64, Python 3.11.7",
        "load_average_at_start": [0.5, 0.5, 0.5],
        "commit": "af43685",
        **more,
    }


def test_the_results_header_says_when_the_machine_booted_and_the_packages() -> None:
    run = a_run(booted="2026-12-06 19:04", packages={"aiokafka": "0.14.0", "orjson": "3.13.0"})
    header = markdown({"meta": run}).splitlines()[2]
    assert header.endswith("Machine booted 2026-12-06 19:04 UTC; aiokafka 0.14.0, orjson 3.13.0.")


def test_a_result_from_before_the_packages_were_kept_reads_as_it_did() -> None:
    header = markdown({"meta": a_run()}).splitlines()[2]
    assert header.endswith("; — s.")
    assert "booted" not in header
