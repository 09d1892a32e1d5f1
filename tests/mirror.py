"""Which modules of `projections/` and `streams/` lack a mirrored unit test module.

`python -m tests.mirror` prints them and the share of modules with logic that have one
(the target is 90%); it never fails, so CI is not blocked below the target.

The mirror of ``a/b/c.py`` is ``tests/unit/a/b/test_c.py`` (or, for a module tested one
aspect at a time, ``test_c_<aspect>.py`` beside it); of a package's ``a/b/__init__.py``,
``tests/unit/a/test_b.py``. A module has logic when it defines a
function (or lambda) or runs control flow at import time (``if TYPE_CHECKING`` aside),
unless its docstring says "No logic" (a dataclass-only or re-export module, say).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_PACKAGES = ("projections", "streams")
NO_LOGIC_MARKER = "no logic"
TARGET_PERCENT = 90.0
_IMPORT_TIME_CONTROL_FLOW = (ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.Match)


@dataclass(frozen=True)
class MirrorReport:
    with_logic: list[Path]  # source modules, relative to the root
    missing: list[Path]  # those of with_logic without a mirrored test module

    @property
    def percent(self) -> float:
        if not self.with_logic:
            return 100.0
        return 100.0 * (len(self.with_logic) - len(self.missing)) / len(self.with_logic)


def mirrored_test(module: Path) -> Path:
    """The unit test module that mirrors a source module (both relative to the root)."""
    if module.name == "__init__.py":
        return Path("tests/unit", *module.parent.parent.parts, f"test_{module.parent.name}.py")
    return Path("tests/unit", *module.parent.parts, f"test_{module.name}")


def is_mirrored(module: Path, root: Path = ROOT) -> bool:
    test = root / mirrored_test(module)
    return test.is_file() or any(test.parent.glob(f"{test.stem}_*.py"))


def _is_type_checking_block(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")


def has_logic(source: str) -> bool:
    tree = ast.parse(source)
    docstring = ast.get_docstring(tree) or ""
    if NO_LOGIC_MARKER in docstring.lower():
        return False
    if any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for node in ast.walk(tree)
    ):
        return True
    return any(
        isinstance(node, _IMPORT_TIME_CONTROL_FLOW)
        or (isinstance(node, ast.If) and not _is_type_checking_block(node))
        for node in tree.body
    )


def mirror_report(root: Path = ROOT) -> MirrorReport:
    with_logic: list[Path] = []
    missing: list[Path] = []
    for package in SOURCE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = path.relative_to(root)
            if module.name == "__main__.py" or not has_logic(path.read_text("utf-8")):
                continue
            with_logic.append(module)
            if not is_mirrored(module, root):
                missing.append(module)
    return MirrorReport(with_logic, missing)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    report = mirror_report(Path(args[0]) if args else ROOT)
    for module in report.missing:
        print(f"no {mirrored_test(module)} for {module}")
    covered = len(report.with_logic) - len(report.missing)
    print(
        f"{covered} of {len(report.with_logic)} modules with logic have a mirrored test module: "
        f"{report.percent:.1f}% (target {TARGET_PERCENT:g}%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
