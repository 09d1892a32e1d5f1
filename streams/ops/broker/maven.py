"""Resolving the Kafka broker's jars from Maven Central, once per machine and version.

``<home>/kafka-<version>/lib`` holds the jars (resolved with ``assets/pom.xml``);
``.complete`` in ``<home>/kafka-<version>`` marks a finished download.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from streams.ops.broker.errors import NO_BROKER_HINT, BrokerError
from streams.ops.broker.files import asset_text, file_lock, tail
from streams.ops.broker.java import check_java

MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_COMPLETE_MARKER = ".complete"
_MAVEN_TIMEOUT_SECONDS = 1800


def log4j_version(kafka_version: str) -> str:
    """The log4j2 version Kafka itself was built with (gradle/dependencies.gradle)."""
    nums = [int(x) for x in re.findall(r"\d+", kafka_version)[:2]]
    major, minor = [*nums, 0, 0][:2]
    return "2.24.3" if (major, minor) < (4, 2) else "2.25.3"


def ensure_kafka_jars(home: Path, kafka_version: str) -> Path:
    """Resolve the broker jars (once per machine and version) and return their lib folder.

    Checks Java 17+ first. Maven is only needed (and checked) when the jars are not cached.
    Concurrent callers are serialised by a file lock; the download goes to a temp folder that
    is renamed into place, so a half download is never used.
    """
    check_java()
    home = Path(home).expanduser()
    dest = home / f"kafka-{kafka_version}"
    lib = dest / "lib"
    if (dest / _COMPLETE_MARKER).is_file() and lib.is_dir():
        return lib

    with file_lock(home / f".kafka-{kafka_version}.lock"):
        if (dest / _COMPLETE_MARKER).is_file() and lib.is_dir():
            return lib  # another process finished it while we waited
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerError(
                f"Maven (mvn) is required to download the Kafka {kafka_version} jars for the "
                f"local broker (once; they are cached in {dest}); install it with "
                f"apt-get install maven {NO_BROKER_HINT}."
            )
        tmp = Path(tempfile.mkdtemp(prefix=f".kafka-{kafka_version}-", dir=home))
        try:
            _download(mvn, tmp, kafka_version)
            if dest.exists():  # an unfinished leftover (no marker): replace it
                shutil.rmtree(dest)
            os.rename(tmp, dest)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return lib


def _download(mvn: str, tmp: Path, kafka_version: str) -> None:
    """Resolve the jars into tmp/lib with Maven and mark tmp complete."""
    pom = tmp / "pom.xml"
    pom.write_text(asset_text("pom.xml"), "utf-8")
    cmd = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(pom),
        f"{MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies",
        f"-DoutputDirectory={tmp / 'lib'}",
        "-DincludeScope=runtime",
        f"-Dkafka.version={kafka_version}",
        f"-Dlog4j.version={log4j_version(kafka_version)}",
    ]
    try:
        proc = subprocess.run(
            cmd,
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=_MAVEN_TIMEOUT_SECONDS,
            check=False,
        )
        output, rc = proc.stdout or "", proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout
        output = out.decode("utf-8", "replace") if isinstance(out, bytes) else out or ""
        rc = -1
    except OSError as exc:
        output, rc = str(exc), -1
    main_jar = tmp / "lib" / f"kafka_2.13-{kafka_version}.jar"
    if rc != 0 or not main_jar.is_file():
        why = f"mvn exited with code {rc}" if rc != 0 else f"{main_jar.name} is missing"
        raise BrokerError(
            f"the Kafka {kafka_version} jars could not be resolved from Maven Central "
            f"({why}). Check network access to repo.maven.apache.org (or the mirror in "
            f"~/.m2/settings.xml) and that Kafka {kafka_version} exists, "
            f"{NO_BROKER_HINT}.\nCommand: {' '.join(cmd)}\n"
            f"Last lines of Maven's output:\n{tail(output) or '(none)'}"
        )
    jars = sorted(p.name for p in (tmp / "lib").glob("*.jar"))
    (tmp / _COMPLETE_MARKER).write_text(
        json.dumps({"kafka_version": kafka_version, "jars": jars, "at": time.time()}),
        "utf-8",
    )
