"""The results as JSON, a markdown table and PNG charts."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _rate(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def _json_safe(value: Any) -> Any:
    """Infinite latencies (a backlog) as the string "backlog": JSON has no Infinity."""
    if isinstance(value, float) and math.isinf(value):
        return "backlog"
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def _number(value: Any) -> float | None:
    return float("inf") if value == "backlog" else value


def _broker(result: dict[str, Any]) -> str:
    """The local broker's CPU over the same window (not in the processor's own figure)."""
    broker = result.get("broker_cpu_ms_per_msg")
    return "" if broker is None else f"the broker besides: {broker:.2f} ms per message"


def _ms(value: float | str | None) -> str:
    value = _number(value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if math.isinf(value):
        return "backlog"
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}×" if value >= 0.01 else f"{value:.4f}×"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _get(data: dict[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _load(meta: dict[str, Any]) -> str:
    start, end = meta.get("load_average_at_start"), meta.get("load_average_at_end")
    if not start or not end:
        return "?"
    return f"{start[0]:.1f} at start, {end[0]:.1f} at end (2 cores; shared machine)"


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured value and whether it holds."""
    r = results.get("ratios", {})
    rows = []

    def add(name: str, value: float | None, goal: str, met: bool | None) -> None:
        rows.append({"target": name, "value": value, "goal": goal, "met": met})

    # Issue 23's targets (one `bench.run --only fold quix latency --rate 500`).
    stage_quix = r.get("fold_stage_vs_quix")
    add(
        "fold stage ≥ 1.0× Quix Streams (msg/s)",
        stage_quix,
        "≥ 1.0×",
        None if stage_quix is None else stage_quix >= 1.0,
    )
    pipeline_quix = r.get("pipeline_vs_quix")
    add(
        "whole pipeline, to its last summary, ≥ 0.5× Quix Streams (msg/s)",
        pipeline_quix,
        "≥ 0.5×",
        None if pipeline_quix is None else pipeline_quix >= 0.5,
    )
    pipeline_cpu = r.get("pipeline_cpu_vs_quix")
    add(
        "whole pipeline's CPU per message ≤ 3× Quix Streams'",
        pipeline_cpu,
        "≤ 3.0×",
        None if pipeline_cpu is None else pipeline_cpu <= 3.0,
    )
    for run in results.get("latency", []) or []:
        if run.get("rate") != 500:
            continue
        label = "with 2 s LLM" if run.get("llm_delay_s") else "no LLM"
        p99 = _number(_get(run, "e2e_ms", "p99"))
        add(
            f"driver-event p99 < 50 ms at 500 msg/s ({label})",
            p99,
            "< 50 ms",
            None if p99 is None else p99 < 50,
        )
        lag = _number(_get(run, "summary_lag_ms", "p99"))
        add(
            f"summary lag p99 < 5 s at 500 msg/s ({label})",
            lag,
            "< 5,000 ms",
            None if lag is None else lag < 5000,
        )
    # Earlier targets.
    fold_quix = r.get("chorus_worker_vs_quix")
    add(
        "whole worker (driver events) ≥ 1.0× Quix Streams",
        fold_quix,
        "≥ 1.0×",
        None if fold_quix is None else fold_quix >= 1.0,
    )
    fold_raw = r.get("chorus_worker_vs_aiokafka")
    add(
        "fold ≥ 50% of raw aiokafka read",
        fold_raw,
        "≥ 0.50×",
        None if fold_raw is None else fold_raw >= 0.5,
    )
    replay = _get(results, "replay", "replay_vs_raw")
    add("replay ≥ 80% of raw read", replay, "≥ 0.80×", None if replay is None else replay >= 0.8)
    for run in results.get("latency", []) or []:
        if run.get("rate") != 1000:
            continue
        p99 = _number(_get(run, "e2e_ms", "p99"))
        label = "with 2 s LLM" if run.get("llm_delay_s") else "no LLM"
        add(
            f"driver-event p99 < 50 ms at 1,000 msg/s ({label})",
            p99,
            "< 50 ms",
            None if p99 is None else p99 < 50,
        )
    return rows


def markdown(results: dict[str, Any]) -> str:
    lines: list[str] = []
    meta = results.get("meta", {})
    data = results.get("dataset", {})
    lines.append(f"## chorus benchmarks — {meta.get('date', '?')}")
    lines.append("")
    lines.append(
        f"`{meta.get('command', 'python -m bench.run')}` on {meta.get('machine', '?')}; "
        f"Kafka {meta.get('kafka_version', '?')} (one local broker), {data.get('partitions', '?')} "
        f"partitions; {data.get('messages', 0):,} messages over {data.get('channels', 0):,} "
        f"channels, {data.get('mean_bytes', 0):,.0f} B mean ({data.get('min_bytes', 0)}–"
        f"{data.get('max_bytes', 0)} B) of real text from {data.get('source', '?')}. "
        "All ratios are from this one run, side by side on the same broker."
    )
    code = meta.get("code", "")
    lines.append("")
    lines.append(
        f"Code measured: `{code}` (repository at commit {meta.get('commit') or '?'}); "
        f"{meta.get('seconds', 0) / 60:.0f} min; load average {_load(meta)}."
    )
    lines.append("")
    lines.append("| # | measure | result | vs |")
    lines.append("|---|---|---|---|")
    limits = results.get("limits", {})
    cp = _get(limits, "consumer_performance", "msgs_per_s")
    raw = _get(limits, "aiokafka", "msgs_per_s")
    lines.append(
        f"| 1 | Kafka ConsumerPerformance (msg/s, best of {limits.get('repeats', '?')}) | "
        f"{_rate(cp)} | the limit |"
    )
    lines.append(f"| 1 | raw aiokafka `getmany` read (msg/s) | {_rate(raw)} | the limit |")
    fold = results.get("fold", {})
    r = results.get("ratios", {})
    worker = fold.get("chorus_worker", {})
    if worker:
        lines.append(
            f"| 2 | **chorus worker** fold (msg/s, all stages, rocksdb) | "
            f"**{_rate(worker.get('msgs_per_s'))}** | {_ratio(r.get('chorus_worker_vs_aiokafka'))} "
            f"aiokafka, {_ratio(r.get('chorus_worker_vs_consumer_performance'))} "
            f"ConsumerPerformance |"
        )
        lines.append(
            f"| 2 | chorus worker CPU (ms per message; cores busy) | "
            f"{_ms(worker.get('cpu_ms_per_msg'))} ms; {worker.get('cores_used') or 0:.2f} | "
            f"{_broker(worker)} |"
        )
    pipeline = fold.get("chorus_pipeline", {})
    if pipeline:
        last = pipeline.get("last_summary_s")
        lines.append(
            f"| 2 | **whole pipeline** to its last output, summaries on (msg/s; N ÷ first output"
            f" → last driver event and last summary covering the N) | "
            f"**{_rate(pipeline.get('msgs_per_s'))}** | "
            f"{_ratio(r.get('pipeline_vs_quix'))} Quix (target ≥ 0.5×); last driver event at "
            f"{pipeline.get('last_driver_event_s') or 0:.1f} s, last summary at "
            f"{'—' if last is None else f'{last:.1f} s'}"
            + (
                f"; **{pipeline.get('channels_not_covered')} of {pipeline.get('channels')} "
                "channels' last message never summarised**"
                if not pipeline.get("summaries_done")
                else ""
            )
            + f" (CHORUS_SUMMARY_AFTER_SECONDS={pipeline.get('summary_after_seconds', 0):g}) |"
        )
        quix_cpu = _get(fold, "quix", "cpu_ms_per_msg")
        lines.append(
            f"| 2 | whole pipeline CPU over its {pipeline.get('processes', '?')} processes "
            f"(ms per message; cores busy) | {_ms(pipeline.get('cpu_ms_per_msg'))} ms; "
            f"{pipeline.get('cores_used') or 0:.2f} | Quix {_ms(quix_cpu)} ms; "
            f"{_ratio(r.get('pipeline_cpu_vs_quix'))} Quix's (target ≤ 3×); {_broker(pipeline)}"
            + (
                "; CPU s by process, start-up included: "
                + ", ".join(f"{k} {v:,.1f}" for k, v in pipeline["cpu_s_by_process"].items())
                if pipeline.get("cpu_s_by_process")
                else ""
            )
            + " |"
        )
    written = worker.get("bytes_per_message") if worker else None
    if written:
        lines.append(
            f"| 2 | bytes written per message (outputs and both roles' changelogs) | "
            f"{sum(written.values()):,.0f} | "
            + ", ".join(f"{name} {size:,.0f}" for name, size in written.items())
            + " |"
        )
    stage = fold.get("chorus_fold_stage", {})
    if stage:
        lines.append(
            f"| 2 | chorus fold stage alone (msg/s; no summaries/recaps) | "
            f"{_rate(stage.get('msgs_per_s'))} | "
            f"{_ratio(r.get('fold_stage_vs_aiokafka'))} aiokafka, "
            f"{_ratio(r.get('fold_stage_vs_quix'))} Quix |"
        )
    floor = results.get("faust_floor", {})
    for mode, label in (
        ("read", "Faust floor: read + 1 tiny send"),
        ("send", "Faust floor: read + 2 driver-event-sized sends"),
        ("table", "Faust floor: + 2 table gets/sets (changelogged)"),
    ):
        if mode in floor:
            lines.append(
                f"| 2 | {label} (msg/s) | {_rate(floor[mode].get('msgs_per_s'))} | "
                f"{_ms(floor[mode].get('cpu_ms_per_msg'))} ms CPU/msg |"
            )
    quix = fold.get("quix", {})
    if quix:
        lines.append(
            f"| 3 | Quix Streams {quix.get('version', '')} same fold (msg/s) | "
            f"{_rate(quix.get('msgs_per_s'))} | {_ratio(r.get('quix_vs_aiokafka'))} aiokafka |"
        )
        lines.append(
            f"| 3 | Quix Streams CPU (ms per message; cores busy) | "
            f"{_ms(quix.get('cpu_ms_per_msg'))} ms; {quix.get('cores_used') or 0:.2f} | "
            f"{_broker(quix)} |"
        )
        lines.append(
            f"| 3 | **chorus ÷ Quix** (whole worker; fold stage alone) | "
            f"**{_ratio(r.get('chorus_worker_vs_quix'))}**; "
            f"{_ratio(r.get('fold_stage_vs_quix'))} | target ≥ 1.0× |"
        )
    elif "quix_error" in fold:
        lines.append(f"| 3 | Quix Streams | failed: {fold['quix_error'][:80]} | |")
    for run in results.get("latency", []) or []:
        label = "2 s LLM" if run.get("llm_delay_s") else "no LLM"
        e2e = run.get("e2e_ms", {})
        extra = f"; LLM calls {run.get('llm_requests')}" if run.get("llm_delay_s") else ""
        missing = run.get("missing_after_drain", 0)
        backlog = (
            (
                f"; {missing:,} of {run.get('messages', 0):,} not driven "
                f"{run.get('drain_s', 0):.0f} s after the last send"
            )
            if missing
            else ""
        )
        lines.append(
            f"| 4 | latency @ {run.get('rate', 0):,.0f} msg/s, {label}: p50 / p95 / p99 (ms) | "
            f"{_ms(e2e.get('p50'))} / {_ms(e2e.get('p95'))} / {_ms(e2e.get('p99'))} | "
            f"after the first second: p99 {_ms((run.get('e2e_ms_after_1s') or {}).get('p99'))};"
            f" target p99 < 50 ms{extra}{backlog} |"
        )
        lag = run.get("summary_lag_ms")
        if lag:
            uncovered = run.get("summary_not_covered_after_drain", 0)
            lines.append(
                f"| 4 | summary lag @ {run.get('rate', 0):,.0f} msg/s, {label}: send → first "
                f"summary covering it, p50 / p99 (ms) | {_ms(lag.get('p50'))} / "
                f"{_ms(lag.get('p99'))} | by CreateTime p99 "
                f"{_ms((run.get('summary_lag_worker_ms') or {}).get('p99'))}; "
                f"{run.get('summary_records', 0):,} summary records; target p99 < 5,000 ms"
                + (f"; {uncovered:,} messages never covered" if uncovered else "")
                + " |"
            )
    replay = results.get("replay", {})
    if replay and "replay_messages_per_s" in replay:
        lines.append(
            f"| 5 | replay (msg/s) vs raw read of the same topic | "
            f"{_rate(replay.get('replay_messages_per_s'))} vs "
            f"{_rate(replay.get('raw_messages_per_s'))} | "
            f"{_ratio(replay.get('replay_vs_raw'))} (target ≥ 0.80×) |"
        )
    recovery = results.get("recovery", {})
    if recovery and recovery.get("cold"):
        lines.append(
            f"| 6 | cold restore of {recovery.get('messages', 0):,} messages' state: "
            f"{recovery.get('changelog_records', 0):,} changelog records read "
            f"({recovery.get('changelog_offsets', 0):,} written), "
            f"{recovery.get('changelog_mb', 0):,.0f} MB | "
            f"{_rate(recovery.get('cold_keys_per_s'))} keys/s; resumed in "
            f"{recovery['cold'].get('resume_s', 0):.1f} s | |"
        )
        lines.append(
            f"| 6 | warm restart (same disk) | resumed in "
            f"{recovery['warm'].get('resume_s', 0):.1f} s | |"
        )
    for cold in results.get("cold_restore") or []:
        restore = cold["cold"].get("restore_s")
        lines.append(
            f"| 6 | cold restore at scale: {cold.get('messages', 0):,} messages over "
            f"{cold.get('channels', 0):,} channels, state built by a {cold.get('built_by')}: "
            f"{cold.get('changelog_records', 0):,} changelog records read"
            + (f" ({cold['changelog_offsets']:,} written)" if "changelog_offsets" in cold else "")
            + f", {cold.get('changelog_mb', 0):,.0f} MB | restored in "
            f"{'—' if restore is None else f'{restore:.1f} s'}; resumed in "
            f"{cold['cold'].get('resume_s', 0):.1f} s | target: 1M messages < 5 min |"
        )
    summ = results.get("summarisers", {})
    if summ:
        for size, block in (summ.get("speed") or {}).items():
            lines.append(
                f"| 7 | summarisers, {size.replace('_', ' ')} (items/s) | verbatim "
                f"{_rate(_get(block, 'verbatim', 'items_per_s'))}, heuristic "
                f"{_rate(_get(block, 'heuristic', 'items_per_s'))}, digest "
                f"{_rate(_get(block, 'digest', 'items_per_s'))} | in process |"
            )
        for corpus, row in (summ.get("llm_cost") or {}).items():
            tiered, always = row.get("tiered", {}), row.get("always_llm", {})
            lines.append(
                f"| 7 | LLM per 1,000 messages, {corpus}: tiered default vs always-LLM | "
                f"{tiered.get('llm_calls_per_1k', 0):.1f} vs "
                f"{always.get('llm_calls_per_1k', 0):.1f} calls; "
                f"{tiered.get('tokens_per_1k', 0):,.0f} vs "
                f"{always.get('tokens_per_1k', 0):,.0f} "
                f"tokens | {_pct(row.get('tokens_saved'))} tokens saved |"
            )
    quality = results.get("summary_quality") or {}
    if quality.get("mean"):
        mean, bar = quality["mean"], quality["bar"]
        lines.append(
            f"| 9 | summary ROUGE-1/2 F1, QMSum {quality['split']} ({quality['meetings']} "
            f"meetings, {quality['max_tokens']} tokens): digest vs LEAD, TextRank, LexRank | "
            + ", ".join(f"{mean[m]['r1']:.1f}/{mean[m]['r2']:.1f}" for m in _QUALITY_METHODS)
            + f" | bar {bar['r1']:.1f}/{bar['r2']:.1f} "
            f"{'met' if quality['digest_meets_bar'] else 'NOT met'} |"
        )
    memory = results.get("memory", {})
    if memory and memory.get("stalled_at_channels"):
        lines.append(
            f"| 8 | worker stalls (a round of new channels not driven in time) | at "
            f"{memory['stalled_at_channels']:,} channels | per-second timers scan every "
            "channel's state |"
        )
    if memory and "mb_per_10k_channels" in memory:
        lines.append(
            f"| 8 | worker RSS per 10,000 active channels | "
            f"{memory['mb_per_10k_channels']:,.0f} MB | "
            f"measured over {memory.get('channels', 0):,} "
            f"channels |"
        )
    if memory and "state_bytes_per_channel" in memory:
        lines.append(
            f"| 8 | state bytes per channel (all projections, encoded; mean, largest) | "
            f"{memory['state_bytes_per_channel']:,.0f} B, "
            f"{memory['state_bytes_per_channel_max']:,} B | one message per channel |"
        )
    lines.append("")
    if results.get("growth"):
        lines.append(growth_markdown(results["growth"]))
    rows = targets(results)
    if rows:
        lines.append("| target | measured | met |")
        lines.append("|---|---|---|")
        for row in rows:
            value = row["value"]
            shown = _ms(value) + " ms" if "ms" in row["goal"] else _ratio(value)
            met = {True: "yes", False: "**no**", None: "—"}[row["met"]]
            lines.append(f"| {row['target']} | {shown} | {met} |")
        lines.append("")
    errors = results.get("errors", {})
    if errors:
        lines.append(
            "Phases that failed: " + "; ".join(f"{k}: {v[:160]}" for k, v in errors.items())
        )
        lines.append("")
    return "\n".join(lines)


def _times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def growth_markdown(growth: dict[str, Any]) -> str:
    """The bounded-state tables: one channel's fold cost and bytes per message by length."""
    window = growth.get("window", 0)
    target = growth.get("target_ratio", 1.5)
    lines = [
        f"### Bounded state: one channel growing (window: the last {window:,} messages, or "
        f"all when fewer; target ≤ {target}× the 100-message figure)",
        "",
        "| length | in process CPU µs/msg (×100) | bytes written/msg (×100) | state bytes "
        "(×100) | worker CPU ms/msg (×100) | worker wall ms/msg (×100) | worker bytes "
        "written/msg (×100) |",
        "|---|---|---|---|---|---|---|",
    ]
    in_process = {row["length"]: row for row in growth.get("in_process", [])}
    through = {row["length"]: row for row in (growth.get("worker") or {}).get("rows", [])}
    for length in sorted(in_process.keys() | through.keys()):
        cells = [f"{length:,}"]
        row = in_process.get(length)
        if row:
            cells += [
                f"{row['us_per_msg']:,.0f} ({_times(row['us_per_msg_vs_first'])})",
                f"{row['bytes_per_msg']:,.0f} ({_times(row['bytes_per_msg_vs_first'])})",
                f"{row['state_bytes']:,} ({_times(row['state_bytes_vs_first'])})",
            ]
        else:
            cells += ["—", "—", "—"]
        at = through.get(length)
        if at:
            cells += [
                f"{_ms(at.get('cpu_ms_per_msg'))} ({_times(at.get('cpu_ms_per_msg_vs_first'))})",
                f"{at['ms_per_msg']:.2f} ({_times(at['ms_per_msg_vs_first'])})",
                f"{at['bytes_per_msg']:,.0f} ({_times(at['bytes_per_msg_vs_first'])})",
            ]
        else:
            cells += ["—", "—", "—"]
        lines.append("| " + " | ".join(cells) + " |")
    worker = growth.get("worker") or {}
    notes = [
        "In process: step + decide + table writes (`streams.fold_store.stored_fold`: the fold "
        "records and the new or changed commitments, orjson) + driver event (`fitted`); bytes = "
        "table writes + driver event."
    ]
    if worker:
        notes.append(
            f"Worker: `{'bench.fold_worker' if worker.get('fold_only') else 'chorus worker'}`, "
            f"CHORUS_FOLD_BATCH_MAX={worker.get('fold_batch_max')}, one partition; CPU ms/msg from "
            "psutil polls of the worker, wall ms/msg from driver-event timestamps; bytes = "
            "driver-event records + fold changelog records (the commitments' second table "
            "included); "
            f"{_rate(worker.get('msgs_per_s'))} msg/s overall, "
            f"{_ms(worker.get('cpu_ms_per_msg'))} ms CPU/msg, RSS "
            f"{_rate(worker.get('rss_mb'))} MB at the end."
        )
        if worker.get("timeout"):
            notes.append(f"Worker stopped early: {worker['timeout']}.")
    final = growth.get("final_commitments") or {}
    if final:
        notes.append(
            f"At the end: {final.get('kept', 0)} commitments kept of {final.get('opened', 0):,}"
            f" opened ({final.get('evicted', 0):,} evicted, {final.get('untracked', 0)} "
            f"untracked), {growth.get('final_participants', 0)} participants, "
            f"{growth.get('final_topics', 0)} topics."
        )
    return "\n".join([*lines, "", *notes, ""])


def write_growth(results: dict[str, Any], out: Path, stem: str) -> tuple[Path, Path]:
    """`python -m bench.growth` alone: its JSON and its markdown."""
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"{stem}.json"
    json_path.write_text(
        json.dumps(_json_safe(results), indent=1, default=str, allow_nan=False) + "\n", "utf-8"
    )
    meta = results.get("meta", {})
    md_path = out / f"{stem}.md"
    md_path.write_text(
        f"## chorus bounded state — {meta.get('date', '?')}\n\n"
        f"`{meta.get('command', '')}` on {meta.get('machine', '?')}; code at commit "
        f"{meta.get('commit') or '?'}; {meta.get('seconds', 0) / 60:.0f} min; load average "
        f"{_load(meta)}.\n\n{growth_markdown(results.get('growth', {}))}",
        "utf-8",
    )
    return json_path, md_path


def charts(results: dict[str, Any], out: Path, stem: str) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    # 1. Throughput, log scale.
    limits = results.get("limits", {})
    fold = results.get("fold", {})
    bars = [
        ("Kafka\nConsumer-\nPerformance", _get(limits, "consumer_performance", "msgs_per_s")),
        ("raw aiokafka\ngetmany", _get(limits, "aiokafka", "msgs_per_s")),
        ("replay", _get(results, "replay", "replay_messages_per_s")),
        ("Quix Streams\nfold", _get(fold, "quix", "msgs_per_s")),
        ("Faust floor\n(read+send+table)", _get(results, "faust_floor", "table", "msgs_per_s")),
        ("chorus\nfold stage", _get(fold, "chorus_fold_stage", "msgs_per_s")),
        ("chorus\nworker", _get(fold, "chorus_worker", "msgs_per_s")),
    ]
    bars = [(n, v) for n, v in bars if v]
    if bars:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        palette = {
            "Kafk": "#888",
            "raw ": "#888",
            "repl": "#6a9",
            "Quix": "#c84",
            "Faus": "#a8c",
            "chor": "#36b",
        }
        colours = [palette.get(n[:4], "#36b") for n, _ in bars]
        ax.bar([n for n, _ in bars], [v for _, v in bars], color=colours)
        ax.set_yscale("log")
        ax.tick_params(axis="x", labelsize=8)
        ax.set_ylabel("messages / s (log)")
        ax.set_title("Throughput over the same messages, one broker, one run")
        for i, (_, v) in enumerate(bars):
            ax.text(i, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=9)
        fig.tight_layout()
        path = out / f"{stem}-throughput.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    # 2. Fold progress over time.
    lines = [
        (name, fold.get(key, {}).get("timeline"))
        for name, key in (
            ("chorus worker", "chorus_worker"),
            ("chorus fold stage", "chorus_fold_stage"),
            ("Quix Streams", "quix"),
        )
    ]
    lines = [(n, t) for n, t in lines if t]
    if lines:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for name, points in lines:
            ax.plot([p[0] for p in points], [p[1] for p in points], label=name)
        ax.set_xlabel("seconds since the first driver event")
        ax.set_ylabel("messages folded")
        ax.set_title("Fold progress (from driver-event timestamps)")
        ax.legend()
        fig.tight_layout()
        path = out / f"{stem}-fold-progress.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    # 3. Latency percentiles.
    runs = results.get("latency") or []
    if runs:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        width = 0.8 / len(runs)
        qs = ["p50", "p95", "p99"]
        for i, run in enumerate(runs):
            values = [_number(run.get("e2e_ms", {}).get(q)) for q in qs]
            cap = max(1.0, run.get("drain_s", 30) * 1000.0)
            shown = [min(v, cap) if v is not None and not math.isnan(v) else 0 for v in values]
            label = f"{run.get('rate', 0):,.0f} msg/s, " + (
                "2 s LLM" if run.get("llm_delay_s") else "no LLM"
            )
            ax.bar([j + i * width for j in range(3)], shown, width, label=label)
        ax.axhline(50, color="red", linestyle="--", linewidth=1, label="target p99 50 ms")
        ax.set_yscale("log")
        ax.set_xticks([j + width * (len(runs) - 1) / 2 for j in range(3)], qs)
        ax.set_ylabel("produce → driver event (ms, log)")
        ax.set_title("Latency (backlogged runs capped at the drain time)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{stem}-latency.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    # 4. Latency over the run (stalls show as spikes).
    runs = [r for r in results.get("latency") or [] if r.get("series")]
    if runs:
        fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.2 * len(runs)), sharex=True)
        axes = axes if len(runs) > 1 else [axes]
        for ax, run in zip(axes, runs, strict=True):
            points = [(t, v) for t, v in run["series"] if v is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], ".", markersize=2)
            ax.axhline(50, color="red", linestyle="--", linewidth=1)
            ax.set_yscale("log")
            label = "2 s LLM" if run.get("llm_delay_s") else "no LLM"
            ax.set_title(f"{run.get('rate', 0):,.0f} msg/s, {label}", fontsize=9)
            ax.set_ylabel("ms")
        axes[-1].set_xlabel("seconds since the first send")
        fig.suptitle("produce → driver event, per message")
        fig.tight_layout()
        path = out / f"{stem}-latency-series.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


_QUALITY_METHODS = ("digest", "lead", "textrank", "lexrank")


def write(results: dict[str, Any], out: Path, stem: str) -> tuple[Path, Path, list[Path]]:
    out.mkdir(parents=True, exist_ok=True)
    results["targets"] = targets(results)
    json_path = out / f"{stem}.json"
    json_path.write_text(
        json.dumps(_json_safe(results), indent=1, default=str, allow_nan=False) + "\n", "utf-8"
    )
    md_path = out / f"{stem}.md"
    md_path.write_text(markdown(results) + "\n", "utf-8")
    return json_path, md_path, charts(results, out, stem)
