"""A run's results as markdown tables (what docs/benchmarks.md quotes) and as JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from streams.topology import RECAPS, SUMMARIES


def number(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:,.{digits}f}"


def ms(value: float | None) -> str:
    return number(value, 0 if value is None or math.isnan(value) or value >= 10 else 1)


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "—"


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows] + [""]


def throughput(result: dict[str, Any]) -> list[str]:
    quix = result.get("quix", {})
    pipeline = result.get("pipeline", {})
    rows = []
    for label, figures in (
        ("fold stage alone", result.get("fold_stage", {})),
        (f"Quix Streams {result.get('quix_version', '')}, same fold", quix),
        ("chorus worker to its last driver event", pipeline.get("to_last_event", {})),
        ("chorus worker to its last summary", pipeline),
    ):
        rows.append(
            [
                label,
                number(figures.get("msgs_per_s")),
                ratio(figures.get("msgs_per_s"), quix.get("msgs_per_s")),
                number(figures.get("cpu_ms_per_msg"), 2),
                number(figures.get("broker_cpu_ms_per_msg"), 2),
                number(figures.get("broker_jit_ms_per_msg"), 2),
            ]
        )
    head = ["system", "msg/s", "vs Quix", "CPU ms/msg", "broker CPU ms/msg", "of it JIT"]
    size = result["message_bytes"]
    restarts = pipeline.get("restarts", {})
    warm_ups = ", ".join(
        number(run.get("broker_jit_ms_per_msg"), 2)
        + " of "
        + number(run.get("broker_cpu_ms_per_msg"), 2)
        for run in result.get("warm_up", [])
    )
    return [
        f"## Throughput: {result['messages']:,} messages over {result['channels']} channels",
        "",
        f"Messages of {size['min']}–{size['max']} bytes (median {size['p50']}). Last summary "
        f"{number(pipeline.get('last_summary_s'), 1)} s after the pipeline's first output, "
        f"last driver event at {number(pipeline.get('last_event_s'), 1)} s; channels covered "
        f"{pipeline.get('channels_covered', '—')}/{result['channels']}. The broker was warmed "
        f"up first by {len(result.get('warm_up', []))} unmeasured pipeline run(s), its JIT "
        f"compiling in each (ms of CPU per message, of its total): {warm_ups or '—'}.",
        "",
        *table(head, rows),
        "Restarting the pipeline after it: ready in "
        f"{number(restarts.get('warm_start_s'), 1)} s with its data directory, "
        f"{number(restarts.get('cold_start_s'), 1)} s without (every table restored from "
        f"changelogs of {number(restarts.get('changelog_records'))} records).",
        "",
    ]


def wake(result: dict[str, Any]) -> list[str]:
    head = ["rate msg/s"]
    for system in ("chorus", "quix"):
        head += [f"{system} {q}" for q in ("p50 ms", "p95 ms", "p99 ms", "max ms", "never woken")]
    rows = []
    for rate in result["rates"]:
        row = [f"{rate:g}"]
        for system in ("chorus", "quix"):
            figures = result.get(system, {}).get(f"{rate:g}", {})
            wake_ms = figures.get("wake_ms", {})
            row += [ms(wake_ms.get(q)) for q in ("p50", "p95", "p99")]
            row += [ms(figures.get("max_ms")), str(figures.get("never_woken", "—"))]
        rows.append(row)
    writes = []
    for system in ("chorus", "quix"):
        for rate in result["rates"]:
            by_role = result.get(system, {}).get(f"{rate:g}", {}).get("writes", {})
            for role, topics in by_role.items():
                for topic, row in topics.items():
                    shown = f"**{topic}**" if topic == "total" else topic
                    records, size = number(row["records"], 2), number(row["bytes"])
                    writes.append([system, f"{rate:g}", role, shown, records, size])
    return [
        f"## Wake latency: produce → driver event read back, {result['channels']} channels, "
        f"{result['seconds']:g} s per rate",
        "",
        *table(head, rows),
        "### Written per message, by role and topic",
        "",
        *table(["system", "rate", "role", "topic", "records", "bytes"], writes),
    ]


def recovery(result: dict[str, Any]) -> list[str]:
    rows = [
        [
            system,
            number((figures.get("killed_at_s") or math.nan), 1),
            number((figures.get("max_ms") or math.nan) / 1000, 1),
            ms(figures.get("wake_ms", {}).get("p99")),
            str(figures.get("never_woken", "—")),
            str(figures.get("repeated", "—")),
        ]
        for system in ("chorus", "quix")
        if "error" not in (figures := result.get(system, {}))
    ]
    head = ["system", "killed at s", "longest wait s", "p99 ms", "never woken", "repeated"]
    return [
        f"## Recovery: the fold SIGKILLed under {result['rate']:g} msg/s",
        "",
        *table(head, rows),
    ]


def replay(result: dict[str, Any]) -> list[str]:
    keys = ("raw_messages_per_s", "decode_only_messages_per_s", "replay_messages_per_s")
    return [
        f"## Replay: `chorus replay --benchmark` over {result['messages']:,} messages",
        "",
        *table(
            ["raw read msg/s", "decode only msg/s", "replay msg/s", "replay / raw"],
            [[number(result.get(key)) for key in keys] + [f"{result['replay_vs_raw']:.2f}"]],
        ),
    ]


def quality(result: dict[str, Any]) -> list[str]:
    rows = [
        [method] + [number(m[key], 2) for key in ("r1", "r2", "rl")] + [number(m["chars"])]
        for method, m in result["mean"].items()
    ]
    return [
        f"## Summary quality: QMSum {result['split']}, {result['meetings']} meetings, "
        f"ROUGE F1 × 100, budget {result['max_tokens']} tokens",
        "",
        *table(["method", "ROUGE-1", "ROUGE-2", "ROUGE-L", "mean chars"], rows),
    ]


def _slowest(timers: dict[str, float]) -> str:
    """The slowest of `timers` (timer -> seconds) in words, or "—"."""
    if not timers:
        return "—"
    name, seconds = max(timers.items(), key=lambda item: item[1])
    return f"{name} {number(seconds * 1000)} ms"


def _held(held: dict[str, float], cpu: dict[str, float]) -> str:
    """The longest hold of the loop by a tick in words, with the most CPU one step of that
    timer used beside it (a hold far above its CPU waited for a core), or "—"."""
    slowest = _slowest(held)
    if not held or not cpu:
        return slowest
    name = max(held.items(), key=lambda item: item[1])[0]
    return f"{slowest} (CPU {ms(cpu.get(name, 0.0) * 1000)} ms)"


def _followed(published: dict[str, int] | None) -> str:
    """The summaries and recaps published while the probe ran ("—" when not counted: a run
    from before they were)."""
    if not published:
        return "—"
    return f"{number(published.get(SUMMARIES))} / {number(published.get(RECAPS))}"


def _by_process(fold: dict[str, Any]) -> str:
    """Each process's own share of the CPU per message, when the system has more than one
    (chorus: its roles and supervisor); nothing for a run from before it was measured."""
    by_process = fold.get("cpu_ms_per_msg_by_process") or {}
    if len(by_process) < 2:
        return ""
    return " (" + ", ".join(f"{label} {number(ms, 2)}" for label, ms in by_process.items()) + ")"


def channels(result: dict[str, Any]) -> list[str]:
    """The channels phase: chorus beside Quix Streams at N resident channels."""
    quix = result.get("quix", {})
    rows = []
    for system in ("chorus", "fold", "quix"):
        figures = result.get(system, {})
        if system == "fold" and not figures:
            continue  # the fold stage alone runs only when named
        if not figures or "error" in figures:
            rows.append([system, figures.get("error", "not run")] + ["—"] * 12)
            continue
        fold, wake_ = figures.get("fold", {}), figures.get("wake", {})
        waits = wake_.get("wake_ms", {})
        rss = ", ".join(
            f"{label} {number(mib)}" for label, mib in figures.get("peak_rss_mib", {}).items()
        )
        slowest = _slowest(figures.get("timers_slowest_s", {}))
        held = _held(
            figures.get("timers_held_slowest_s", {}), figures.get("timers_held_cpu_slowest_s", {})
        )
        rows.append(
            [
                system,
                number(fold.get("msgs_per_s")),
                ratio(fold.get("msgs_per_s"), quix.get("fold", {}).get("msgs_per_s")),
                number(fold.get("cpu_ms_per_msg"), 2) + _by_process(fold),
                rss,
                " / ".join(ms(waits.get(q)) for q in ("p50", "p95", "p99"))
                + f" / {ms(wake_.get('max_ms'))}",
                str(wake_.get("never_woken", "—")),
                _followed(wake_.get("followed_published")),
                slowest,
                held,
                str(figures.get("keepalives_lost", "—")),
                number(figures.get("stop", {}).get("seconds"), 1),
                " / ".join(
                    number(figures.get(kind, {}).get(key), 1)
                    for kind in ("warm", "cold")
                    for key in ("folding_s", "ready_s")
                    if key in figures.get(kind, {}) or key == "folding_s"
                ),
            ]
        )
    head = [
        "system",
        "msg/s",
        "vs Quix",
        "CPU ms/msg (by process)",
        "peak RSS MiB",
        "wake p50 / p95 / p99 / max ms",
        "never woken",
        "summaries / recaps published during the probe",
        "slowest timer tick",
        "longest hold of the loop by a tick (its busiest step's CPU)",
        "keepalives lost",
        "SIGTERM exit s",
        "warm folding / ready, cold folding / ready s",
    ]
    probe = result["probe"]
    return [
        f"## Channels: {result['channels']:,} resident channels ({result['messages']:,} "
        f"messages, one in {result['open_every']} left open a day)",
        "",
        f"The wake probe: {probe['rate']:g} msg/s over {probe['channels']} fresh channels for "
        f"{probe['seconds']:g} s, the channels resident.",
        "",
        *table(head, rows),
        *_keepalive_logs(result),
    ]


def _keepalive_logs(result: dict[str, Any]) -> list[str]:
    """Each system's log up to its first lost keepalive (the rest in the JSON)."""
    lines: list[str] = []
    for system in ("chorus", "fold", "quix"):
        excerpts = result.get(system, {}).get("keepalives_lost_log")
        if not excerpts:
            continue
        lines += [
            "",
            f"{system}'s log up to its first lost keepalive ({len(excerpts)} such excerpts in "
            f"the JSON, `{system}.keepalives_lost_log`):",
            "",
            "```",
            *excerpts[0],
            "```",
        ]
    return lines


SECTIONS = {
    "throughput": throughput,
    "wake": wake,
    "recovery": recovery,
    "replay": replay,
    "quality": quality,
    "channels": channels,
}


def booted_and_packages(meta: dict[str, Any]) -> str:
    """When the machine booted and the measured packages' versions, as the header's last
    sentence (nothing for a run that predates them)."""
    if "packages" not in meta:
        return ""
    packages = ", ".join(f"{name} {version}" for name, version in meta["packages"].items())
    booted = f"{meta['booted']} UTC" if meta.get("booted") else "—"
    return f" Machine booted {booted}; {packages or 'no packages found'}."


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [
        f"# bench run of {meta['date']} at {meta['commit']}",
        "",
        f"`{meta['command']}`; {meta['machine']}; load average (1, 5, 15 min) "
        f"{meta['load_average_at_start']} at the start, {meta.get('load_average_at_end')} at "
        f"the end; {meta.get('seconds', '—')} s.{booted_and_packages(meta)}",
        "",
    ]
    for phase, section in SECTIONS.items():
        if phase in results:
            lines += section(results[phase])
    for phase, error in results.get("errors", {}).items():
        lines.append(f"**{phase} failed**: {error}")
    return "\n".join(lines).rstrip() + "\n"


def write(results: dict[str, Any], out: Path, stem: str) -> Path:
    """<stem>.json and <stem>.md under `out`; the markdown's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n", "utf-8")
    path = out / f"{stem}.md"
    path.write_text(markdown(results), "utf-8")
    return path
