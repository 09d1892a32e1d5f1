"""The docs against the code: docs/operators.md's settings table against
`streams.settings.Settings` (every setting is documented, every documented one exists, and
each documented default is the real one), the README's example against the file the quick
start runs, and every link between the pages to a file that exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from streams.settings import Settings

OPERATORS = Path(__file__).resolve().parents[2] / "docs" / "operators.md"
PREFIX = Settings.model_config.get("env_prefix", "")
# Default cells that mean "no value".
UNSET = {"unset", "retired", "the primary's"}


def settings_table() -> list[tuple[list[str], str]]:
    """Each row of the table under "## Settings": its variables and its default cell."""
    text = OPERATORS.read_text()
    section = text[text.index("\n## Settings\n") :]
    section = section[: section.index("\n## ", 1)]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 3:
            continue
        names = re.findall(rf"`({re.escape(PREFIX)}[A-Z0-9_]+)`", cells[0])
        rows.append((names, cells[1]))
    return rows


def documented_default(cell: str) -> Any:
    """The value a default cell gives: its text before any parenthesis, backticks off."""
    value = cell.split(" (")[0].strip().strip("`")
    if value in UNSET:
        return None
    if value in ("true", "false"):
        return value == "true"
    for number in (int, float):
        try:
            return number(value)
        except ValueError:
            pass
    if value == "[]":
        return []
    return value


def real_default(name: str) -> Any:
    field = Settings.model_fields[name]
    return field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]


def test_the_settings_table_lists_every_setting_and_only_settings() -> None:
    documented = {
        name.removeprefix(PREFIX).lower() for names, _ in settings_table() for name in names
    }
    assert documented == set(Settings.model_fields)


def test_each_documented_default_is_the_setting_s_default() -> None:
    rows = settings_table()
    assert rows
    for names, cell in rows:
        assert names, f"a settings row names no {PREFIX} variable: {cell!r}"
        for name in names:
            expected = real_default(name.removeprefix(PREFIX).lower())
            found = documented_default(cell)
            if isinstance(expected, Path):
                found = Path(found).expanduser()
            assert found == expected, name


README = OPERATORS.parents[1] / "README.md"


def readme_block(after: str, language: str) -> str:
    """The first ```language block of README.md after the line starting with `after`."""
    text = README.read_text()
    start = text.index(f"```{language}\n", text.index(after)) + len(language) + 4
    return text[start : text.index("```", start)]


def test_the_readme_s_agent_is_the_example_the_quick_start_runs() -> None:
    example = OPERATORS.parents[1] / "examples" / "first_agent.py"
    assert readme_block("## What an agent does with it", "python") == example.read_text()
    assert ".venv/bin/python examples/first_agent.py" in readme_block("## Quick start", "sh")


def relative_links(page: Path) -> list[Path]:
    """What `page`'s Markdown links to inside this repository (no scheme, not an anchor of
    the page itself), resolved from the page's folder, without anchors."""
    targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    return [page.parent / t.split("#")[0] for t in targets if not re.match(r"[a-z]+:|#", t)]


def test_every_link_between_the_pages_names_a_file_that_exists() -> None:
    pages = [README, *sorted(OPERATORS.parent.glob("*.md"))]
    links = [(page.name, target) for page in pages for target in relative_links(page)]
    assert len(links) > 10, "the pages link to each other"
    assert [(name, str(target)) for name, target in links if not target.exists()] == []
