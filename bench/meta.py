"""Where results go and what every result file says about its run (standard library only,
so the entry points can use it before BENCH_WORKER_SRC is put on sys.path)."""

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
_BENCH_ONLY_MODULES = ("matplotlib", "psutil", "rouge_score")


def ensure_requirements() -> None:
    """matplotlib, psutil, rouge-score (bench-only): pip-installed into this interpreter if
    absent."""
    missing = []
    for module in _BENCH_ONLY_MODULES:
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if not missing:
        return
    print(f"bench needs {', '.join(missing)}: pip install -r {REQUIREMENTS}", file=sys.stderr)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True
    )


def _commit(source: str | None = None) -> str | None:
    if source:  # a snapshot: bench/ab-style copies carry the commit they were taken from
        marker = Path(source) / ".bench-commit"
        return marker.read_text().strip() if marker.exists() else "snapshot"
    try:
        proc = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    return proc.stdout.strip() or None


def run_meta(command: str, quick: bool, source: str | None = None) -> dict[str, Any]:
    """What every result file says about its run: when, how, on what, which code."""
    return {
        "date": datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": command,
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "load_average_at_start": os.getloadavg(),
        "kafka_version": os.environ.get("CHORUS_KAFKA_VERSION", "4.1.1"),
        "quick": quick,
        "code": source or str(REPO),
        "commit": _commit(source),
    }
