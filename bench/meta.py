"""Where results go, what every result file says about its run, and the bench-only packages."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
REQUIREMENTS = REPO / "bench" / "requirements.txt"
_BENCH_ONLY_MODULES = ("psutil", "rouge_score")
# The packages that set what a message costs chorus: runs compare only on the same versions.
MEASURED_PACKAGES = (
    "faust-streaming",
    "aiokafka",
    "pydantic",
    "pydantic-core",
    "orjson",
    "rocksdict",
)


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


def booted(proc_stat: Path = Path("/proc/stat")) -> str | None:
    """When the machine last started (UTC, the kernel's `btime`), None where it does not say.
    A shared virtual machine that restarted may be another host: the same code measured
    2.8-3.1 times the CPU per message after one did (bench/results/issue-40-investigations.md).
    Runs of different boots do not compare as one machine; runs of one boot compare only
    side by side, for the host's speed drifts within a boot too."""
    try:
        lines = proc_stat.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("btime "):
            return datetime.fromtimestamp(int(line.split()[1]), UTC).strftime("%Y-%m-%d %H:%M")
    return None


def package_versions() -> dict[str, str]:
    """The installed version of each of MEASURED_PACKAGES (absent ones left out)."""
    found: dict[str, str] = {}
    for name in MEASURED_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def run_meta(command: str, quick: bool) -> dict[str, Any]:
    """When, how, on what (the machine, when it booted, the packages) and on which code the
    run was made."""
    return {
        "date": datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": command,
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "booted": booted(),
        "packages": package_versions(),
        "load_average_at_start": [round(load, 2) for load in os.getloadavg()],
        "quick": quick,
        "commit": commit(),
    }
