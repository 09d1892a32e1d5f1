"""Where results go, what every result file says about its run, and the bench-only packages."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
REQUIREMENTS = REPO / "bench" / "requirements.txt"
_BENCH_ONLY_MODULES = ("psutil", "rouge_score")


def ensure_requirements() -> None:
    """psutil and rouge-score (bench-only): pip-installed into this interpreter if absent."""
    missing = []
    for module in _BENCH_ONLY_MODULES:
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        print(f"bench needs {', '.join(missing)}: pip install -r {REQUIREMENTS}", file=sys.stderr)
        pip = [sys.executable, "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)]
        subprocess.run(pip, check=True)


def commit() -> str | None:
    found = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() or None


def run_meta(command: str, quick: bool) -> dict[str, Any]:
    """When, how, on what and on which code the run was made."""
    return {
        "date": datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": command,
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "load_average_at_start": [round(load, 2) for load in os.getloadavg()],
        "quick": quick,
        "commit": commit(),
    }
