"""The bench's arithmetic: percentiles, rates and CPU from polls, writes per message by
topic. Pure but for `cpu_seconds` and `jit_cpu_seconds` (psutil, /proc), so it is
unit-tested without a broker."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.topology import CONTEXT_GROUP

QUANTILES = (50, 95, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def percentiles(values: Sequence[float]) -> dict[str, float]:
    return {f"p{q}": percentile(values, q) for q in QUANTILES}


def cpu_seconds(pid: int | None, descendants: bool = True) -> float:
    """User + system CPU of `pid` and (unless not `descendants`) all its descendants so far
    (0 when it is gone)."""
    if pid is None:
        return 0.0
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *(root.children(recursive=True) if descendants else ())]
    except psutil.Error:
        return 0.0
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def rss_bytes(pid: int | None) -> int:
    """The resident set size of `pid` alone (0 when it is gone)."""
    if pid is None:
        return 0
    import psutil

    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return 0


# The JVM's JIT compiler threads, by the name Linux gives them (15 characters at most).
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


def jit_cpu_seconds(pid: int | None, proc: Path = Path("/proc")) -> float:
    """User + system CPU of the JIT compiler threads of JVM `pid` so far: a fresh broker
    compiles its hot paths for minutes, a cost a long-running one no longer pays (0 when
    it is gone; a compiler thread the JVM ended no longer counts, so the split errs
    towards the broker's own work)."""
    if pid is None:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    with contextlib.suppress(OSError):
        for task in (proc / str(pid) / "task").iterdir():
            with contextlib.suppress(OSError):
                if (task / "comm").read_text().strip().startswith(JIT_THREADS):
                    # After the name in parentheses: utime and stime are fields 14 and 15.
                    fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                    total += int(fields[11]) + int(fields[12])
    return total / ticks


@dataclass(frozen=True)
class Poll:
    """One look at a run: when, how many outputs so far, CPU of the processor (all its
    processes) and of the broker, and of the broker's JIT compiler threads; and, when the
    poller was given them, each of the processor's processes alone by label: (pid, CPU)."""

    wall: float
    outputs: int
    cpu: float
    broker_cpu: float
    broker_jit_cpu: float = 0.0
    cpu_by_process: Mapping[str, tuple[int, float]] = field(default_factory=dict)


def run_figures(polls: Sequence[Poll], per_message: int = 1) -> dict[str, Any]:
    """Messages/s and CPU ms per message from the first poll that saw output to the last
    poll: start-up (before any output) is no message's cost. `cpu_ms_per_msg_by_process`
    has each process seen with the same pid at both ends (one restarted in between is
    not: its CPU starts again from 0)."""
    seen = [poll for poll in polls if poll.outputs > 0]
    if len(seen) < 2 or seen[-1].outputs <= seen[0].outputs or seen[-1].wall <= seen[0].wall:
        return {
            **dict.fromkeys(
                ("msgs_per_s", "cpu_ms_per_msg", "broker_cpu_ms_per_msg", "broker_jit_ms_per_msg")
            ),
            "cpu_ms_per_msg_by_process": {},
        }
    first, last = seen[0], seen[-1]
    messages = (last.outputs - first.outputs) / per_message
    return {
        "msgs_per_s": messages / (last.wall - first.wall),
        "cpu_ms_per_msg": (last.cpu - first.cpu) * 1000 / messages,
        "broker_cpu_ms_per_msg": (last.broker_cpu - first.broker_cpu) * 1000 / messages,
        "broker_jit_ms_per_msg": (last.broker_jit_cpu - first.broker_jit_cpu) * 1000 / messages,
        "cpu_ms_per_msg_by_process": {
            label: (last.cpu_by_process[label][1] - cpu) * 1000 / messages
            for label, (pid, cpu) in sorted(first.cpu_by_process.items())
            if last.cpu_by_process.get(label, (None, 0.0))[0] == pid
        },
    }


def all_covered(ends: Mapping[str, int], covered: Mapping[str, int]) -> bool:
    """Whether every channel's last message (`ends`: channel -> its offset) is covered by a
    summary through that offset (`covered`: channel -> highest last_offset summarised)."""
    return all(covered.get(channel, -1) >= end for channel, end in ends.items())


def channel_ends(channels: Sequence[str], landed: Sequence[tuple[int, int]]) -> dict[str, int]:
    """channel -> the offset of its last message, from each message's channel and where it
    landed (partition, offset); a channel's messages share one partition."""
    ends: dict[str, int] = {}
    for channel, (_, offset) in zip(channels, landed, strict=True):
        ends[channel] = max(offset, ends.get(channel, -1))
    return ends


def wake_figures(sent: Mapping[str, float], woken: Mapping[str, float]) -> dict[str, Any]:
    """Produce → driver event read back, per message (ms): percentiles over the messages
    woken, the slowest, and how many were never woken."""
    waits = [(woken[m] - at) * 1000 for m, at in sent.items() if m in woken]
    return {
        "messages": len(sent),
        "wake_ms": percentiles(waits),
        "max_ms": max(waits) if waits else None,
        "never_woken": len(sent) - len(waits),
    }


TopicRole = Callable[[str], tuple[str, str] | None]
WRITTEN = ("records", "bytes")


def writes_per_message(
    records: Mapping[str, int], sizes: Mapping[str, int], messages: int, role_of: TopicRole
) -> dict[str, dict[str, dict[str, float]]]:
    """{role: {topic label: {"records", "bytes"} per message}} for the topics a role wrote
    to (`role_of(topic)`: (role, label), or None for a topic no role writes), with a
    "total" label per role, and an "all roles" total where there are several; topics
    nothing was written to are left out."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for topic, count in sorted(records.items()):
        named = role_of(topic)
        if named is None or count <= 0 or messages <= 0:
            continue
        role, label = named
        row = {"records": count / messages, "bytes": sizes.get(topic, 0) / messages}
        out.setdefault(role, {})[label] = row
    for rows in out.values():
        rows["total"] = {key: sum(row[key] for row in rows.values()) for key in WRITTEN}
    if len(out) > 1:
        totals = [rows["total"] for rows in out.values()]
        out["all roles"] = {"total": {key: sum(t[key] for t in totals) for key in WRITTEN}}
    return out


def chorus_roles(prefix: str, app_id: str) -> TopicRole:
    """Which role of a `chorus worker` writes a topic: the context role its summaries,
    recaps and changelogs (app id `<app_id>-<CONTEXT_GROUP>`), the fold role the rest."""
    context = f"{app_id}-{CONTEXT_GROUP}-"

    def role_of(topic: str) -> tuple[str, str] | None:
        if topic.startswith(context):
            return "context", topic.removeprefix(context)
        if topic.startswith(f"{app_id}-"):
            return "fold", topic.removeprefix(f"{app_id}-")
        name = topic.removeprefix(prefix) if topic.startswith(prefix) else None
        if name in ("summaries", "recaps"):
            return "context", name
        if name in ("driver-events", "dead-letters"):
            return "fold", name
        return None  # the inputs (messages, channel config), or another system's topic

    return role_of


def quix_roles(prefix: str, group: str) -> TopicRole:
    """The Quix Streams peer writes its driver events, dead letters and changelogs."""

    def role_of(topic: str) -> tuple[str, str] | None:
        if group in topic and topic.startswith("changelog__"):
            return "quix", "changelog"
        name = topic.removeprefix(prefix) if topic.startswith(prefix) else None
        return ("quix", name) if name in ("driver-events", "dead-letters") else None

    return role_of
