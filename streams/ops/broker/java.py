"""Finding a Java 17+ to run the Kafka nodes with."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from streams.ops.broker.errors import NO_BROKER_HINT, BrokerError

MIN_JAVA = 17

# Executables already found to be recent enough: `java -version` takes a second or more.
_JAVA_CHECKED: set[str] = set()


def java_executable() -> str | None:
    """$JAVA_HOME/bin/java when it is executable, else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


def parse_java_major(output: str) -> int | None:
    """The major version in `java -version` output ("1.8.0_392" is 8), None if absent."""
    m = re.search(r'version "([^"]+)"', output)
    if not m:
        return None
    parts = re.findall(r"\d+", m.group(1))
    if not parts:
        return None
    major = int(parts[0])
    if major == 1 and len(parts) > 1:  # "1.8.0_392" is Java 8
        major = int(parts[1])
    return major


def check_java() -> str:
    """The java executable, after checking that it is Java 17 or newer."""
    java = java_executable()
    if java is None:
        raise BrokerError(
            f"Java {MIN_JAVA}+ is required to run the local Kafka broker; found none on PATH "
            f"(or in JAVA_HOME). Install it (e.g. apt-get install openjdk-17-jre-headless) "
            f"{NO_BROKER_HINT}."
        )
    if java in _JAVA_CHECKED:
        return java
    try:
        proc = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
        output = (proc.stderr or "") + (proc.stdout or "")
    except (OSError, subprocess.TimeoutExpired) as exc:
        output = f"{java} -version failed: {exc}"
    major = parse_java_major(output)
    if major is None or major < MIN_JAVA:
        first = output.strip().splitlines()[0] if output.strip() else "no version output"
        found = f"Java {major} ({first})" if major is not None else first
        raise BrokerError(
            f"Java {MIN_JAVA}+ is required to run the local Kafka broker; found {found} at "
            f"{java}. Install a newer JDK/JRE and put it first on PATH or in JAVA_HOME, "
            f"{NO_BROKER_HINT}."
        )
    _JAVA_CHECKED.add(java)
    return java
