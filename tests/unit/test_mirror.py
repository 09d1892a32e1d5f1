"""tests.mirror: how a module's mirrored test is found and what counts as logic.

The share of mirrored modules is printed (`pytest -s`), never enforced here.
"""

from __future__ import annotations

from pathlib import Path

from tests.mirror import has_logic, mirror_report, mirrored_test


def test_a_module_mirrors_to_a_test_module_beside_its_path() -> None:
    assert mirrored_test(Path("streams/ops/broker/java.py")) == Path(
        "tests/unit/streams/ops/broker/test_java.py"
    )
    assert mirrored_test(Path("streams/replay/__init__.py")) == Path(
        "tests/unit/streams/test_replay.py"
    )


def test_what_counts_as_logic() -> None:
    assert has_logic("def f() -> int:\n    return 1\n")
    assert has_logic("for name in ['a']:\n    print(name)\n")
    assert not has_logic('"""Re-exports."""\nfrom a import b\n__all__ = ["b"]\n')
    assert not has_logic("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n")
    assert not has_logic('"""Types. No logic: declarations only."""\ndef f() -> None: ...\n')


def test_a_missing_mirror_is_listed(tmp_path: Path) -> None:
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "tested.py").write_text("def f() -> None: ...\n")
    (tmp_path / "streams" / "untested.py").write_text("def g() -> None: ...\n")
    (tmp_path / "streams" / "aspects.py").write_text("def h() -> None: ...\n")
    (tmp_path / "streams" / "empty.py").write_text("")
    tests = tmp_path / "tests" / "unit" / "streams"
    tests.mkdir(parents=True)
    (tests / "test_tested.py").write_text("")
    (tests / "test_aspects_one.py").write_text("")
    report = mirror_report(tmp_path)
    assert report.missing == [Path("streams/untested.py")]
    assert round(report.percent, 1) == 66.7


def test_print_the_share_of_mirrored_modules() -> None:
    report = mirror_report()
    print(f"\n{report.percent:.1f}% of {len(report.with_logic)} modules with logic are mirrored")
    assert report.with_logic
