"""`chorus replay`: the command line over the replay modules."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click
import orjson
from aiokafka.errors import KafkaError

from projections.model import Message
from projections.projection import (
    ChannelProjection,
)
from projections.summarise import batch, default_summariser, summarise_batches
from projections.summarise.pending import summarisable
from streams.interfaces.cli.failures import ChorusCommand
from streams.kafka.clients import NoBrokerError
from streams.registry import ProjectionImportError, registered_projections
from streams.replay.checks import VerifyReport, verify
from streams.replay.compare import live_folds, render_diff
from streams.replay.core import TimeField, state_view
from streams.replay.log import ReplayError
from streams.replay.run import ReplayRun, replay
from streams.replay.speed import measure_replay_vs_raw
from streams.replay.tables import drop_old_versions, rebuild
from streams.settings import Settings, get_settings

if TYPE_CHECKING:
    from streams.interfaces.worker_api import WorkerApi

T = TypeVar("T")


async def recompute_summary(
    messages: Sequence[Message], after_messages: int, small: int, medium: int
) -> dict[str, Any] | None:
    """The channel's summary with the non-LLM tiers, over batches of `after_messages`
    summarisable messages (the live stage's count threshold; a final partial batch is
    included, as the time threshold eventually summarises it)."""
    items = [m for m in messages if summarisable(m)]
    if not items:
        return None
    summariser = default_summariser(None, small, medium)
    last = None
    batches = 0
    async for result in summarise_batches(summariser, batch(items, after_messages)):
        last = result
        batches += 1
    assert last is not None
    return {
        "text": last.text,
        "annotations": last.annotations,
        "batches": batches,
        "total_messages": len(items),
    }


# --- the command ------------------------------------------------------------------------------


def parse_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 time") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def select_projections(settings: Settings, names: Sequence[str]) -> list[ChannelProjection[Any]]:
    """The registered projections named in `names` (all of them when none is named)."""
    try:
        every = registered_projections(settings.projections, settings)
    except ProjectionImportError as error:
        raise click.UsageError(str(error)) from None
    if not names:
        return every
    known = {p.name: p for p in every}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise click.UsageError(
            f"unknown projection(s) {', '.join(unknown)}; registered: {', '.join(known)}"
        )
    return [known[n] for n in dict.fromkeys(names)]


def _run(coroutine: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coroutine

    try:
        return asyncio.run(main())
    except (NoBrokerError, KafkaError) as error:
        raise ReplayError(f"{type(error).__name__}: {error}") from None


def _with_worker(settings: Settings, use: Callable[[WorkerApi], Awaitable[T]]) -> T:
    """`use` the worker's HTTP API; a worker that cannot be reached is a `ReplayError`."""
    from streams.interfaces.worker_api import WorkerApi, WorkerUnavailable

    async def go() -> T:
        async with WorkerApi(settings) as api:
            return await use(api)

    try:
        result: T = _run(go())
    except WorkerUnavailable as error:
        raise ReplayError(str(error)) from None
    return result


def _echo(text: str, err: bool = False) -> None:
    click.echo(text, err=err)


def _print_summary(run: ReplayRun, out_err: bool) -> None:
    stats = run.replayer.stats
    lines = [
        f"replayed {stats.records:,} records from {len(run.spans)} partitions "
        f"in {run.seconds:.2f}s ({run.rate:,.0f} msg/s)",
        f"  folded {stats.folded:,} messages into {len(run.replayer.channels):,} channels; "
        f"skipped {stats.invalid:,} invalid (dead-lettered by the worker)",
    ]
    if stats.filtered:
        lines.append(f"  {stats.filtered:,} records of other channels")
    if stats.beyond or stats.after_cutoff:
        lines.append(f"  {stats.beyond + stats.after_cutoff:,} records after the cut-off")
    for name, errors in stats.errors.items():
        if errors:
            lines.append(f"  {name}: apply raised on {errors:,} messages (state kept)")
    for span in run.spans:
        lines.append(f"  partition {span.partition}: offsets {span.start}..{span.stop}")
    for line in lines:
        _echo(line, err=out_err)


@click.command("replay", cls=ChorusCommand)
@click.option("--projection", "names", multiple=True, help="Only this projection (repeatable).")
@click.option("--channel", "channels", multiple=True, help="Only this channel (repeatable).")
@click.option(
    "--to-offset",
    type=click.IntRange(min=0),
    help="Fold each partition's records at offsets < N (its first N records).",
)
@click.option("--as-of", "as_of", help="Fold each channel up to this ISO 8601 time.")
@click.option(
    "--time-field",
    type=click.Choice(["created_at", "record"]),
    default="created_at",
    show_default=True,
    help="--as-of compares the message's created_at or the Kafka record timestamp.",
)
@click.option(
    "--verify", is_flag=True, help="Compare with the live worker; exit 1 on a difference."
)
@click.option("--rebuild", is_flag=True, help="Build the projections' current versions' tables.")
@click.option("--drop-old", is_flag=True, help="Delete older versions' changelogs (after switch).")
@click.option("--dry-run", is_flag=True, help="With --rebuild/--drop-old: change nothing.")
@click.option("--summaries", is_flag=True, help="Print recomputed (non-LLM) summaries.")
@click.option("--states/--no-states", "show_states", default=None, help="Print channel states.")
@click.option("--benchmark", is_flag=True, help="Replay messages/s next to a raw read.")
@click.option("--exact", is_flag=True, help="Fold with the worker's per-message step (slower).")
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    help="Read and fold the partitions in N processes (0: one per CPU). Default: 1; with "
    "--benchmark, one per CPU (it measures one process too).",
)
@click.option("--progress/--no-progress", default=True, show_default=True)
def replay_command(
    names: tuple[str, ...],
    channels: tuple[str, ...],
    to_offset: int | None,
    as_of: str | None,
    time_field: TimeField,
    verify: bool,
    rebuild: bool,
    drop_old: bool,
    dry_run: bool,
    summaries: bool,
    show_states: bool | None,
    benchmark: bool,
    exact: bool,
    workers: int | None,
    progress: bool,
) -> None:
    """Fold chorus.messages again from the beginning with the worker's projection code.

    Prints a summary; with --channel, --to-offset or --as-of also the channel states as JSON
    lines (the shape of `chorus state`). See streams/replay/ for the exact semantics.
    """
    settings = get_settings()
    chosen = select_projections(settings, names)
    moment = parse_time(as_of) if as_of else None
    if to_offset is not None and moment is not None:
        raise click.UsageError("give --to-offset or --as-of, not both")
    modes = [
        m
        for m, on in (("--verify", verify), ("--rebuild", rebuild), ("--benchmark", benchmark))
        if on
    ]
    if len(modes) > 1:
        raise click.UsageError(f"{' and '.join(modes)} cannot be combined")
    if modes and (to_offset is not None or moment is not None):
        raise click.UsageError(f"{modes[0]} works on the whole log; drop --to-offset/--as-of")
    if (rebuild or drop_old) and channels:
        raise click.UsageError("--rebuild/--drop-old work on whole tables; drop --channel")

    if benchmark:
        result = _run(measure_replay_vs_raw(settings, chosen, workers=workers or 0))
        click.echo(orjson.dumps(result.as_json()).decode())
        return
    workers = 1 if workers is None else workers
    if verify:
        _verify_command(settings, chosen, channels, exact, progress, workers)
        return
    if rebuild or drop_old:
        if rebuild:
            _rebuild_command(settings, chosen, dry_run, exact, progress, workers)
        if drop_old:
            _drop_old_command(settings, chosen, dry_run)
        return

    states = (
        show_states
        if show_states is not None
        else bool(channels or to_offset is not None or moment)
    )
    run: ReplayRun = _run(
        replay(
            settings,
            chosen,
            channels=channels or None,
            to_offset=to_offset,
            as_of=moment,
            time_field=time_field,
            keep_messages=summaries,
            exact=exact,
            progress=progress,
            workers=workers,
        )
    )
    replayer = run.replayer
    selected = list(channels) if channels else sorted(replayer.channels)
    if states:
        for channel in selected:
            click.echo(orjson.dumps(state_view(channel, replayer.folds(channel))).decode())
    if summaries:

        async def summarise_all() -> list[dict[str, Any] | None]:
            return [
                await recompute_summary(
                    replayer.messages_of(channel),
                    settings.summary_after_messages,
                    settings.summary_small_threshold,
                    settings.summary_medium_threshold,
                )
                for channel in selected
            ]

        recomputed = _run(summarise_all())
        for channel, summary in zip(selected, recomputed, strict=True):
            click.echo(orjson.dumps({"channel": channel, "summary": summary}).decode())
    _print_summary(run, out_err=states or summaries)


def _verify_command(
    settings: Settings,
    projections: list[ChannelProjection[Any]],
    channels: Sequence[str],
    exact: bool,
    progress: bool,
    workers: int = 1,
) -> None:
    async def go(api: WorkerApi) -> VerifyReport:
        return await verify(
            settings,
            projections,
            fetch_state=api.state,
            list_channels=api.channels,
            channels=channels,
            exact=exact,
            progress=progress,
            workers=workers,
        )

    report: VerifyReport = _with_worker(settings, go)
    for note in report.notes:
        click.echo(f"note: {note}")
    for difference in report.differences:
        click.echo(difference.describe())
        click.echo(render_diff(difference))
    differing = sorted({d.channel for d in report.differences})
    click.echo(
        f"verified {report.channels:,} channels ({report.compared:,} folds) against the log "
        f"({report.records:,} records, {report.seconds:.2f}s): "
        + (f"{len(differing)} differ: {', '.join(differing)}" if differing else "all match")
    )
    if differing:
        sys.exit(1)


def _rebuild_command(
    settings: Settings,
    projections: list[ChannelProjection[Any]],
    dry_run: bool,
    exact: bool,
    progress: bool,
    workers: int = 1,
) -> None:
    outcomes = _run(
        rebuild(
            settings, projections, dry_run=dry_run, exact=exact, progress=progress, workers=workers
        )
    )
    for o in outcomes:
        where = ", ".join(f"{p}:{n}" for p, n in sorted(o.through.items()))
        detail = (
            f"{o.written:,} folds of {o.channels:,} channels from {o.records:,} records, "
            f"through {{{where}}}"
            if o.mode not in ("live", "not-needed")
            else ""
        )
        click.echo(f"{o.projection} v{o.version} → {o.changelog}: {o.mode} ({o.reason}) {detail}")


def _drop_old_command(
    settings: Settings, projections: list[ChannelProjection[Any]], dry_run: bool
) -> None:
    async def served(api: WorkerApi) -> dict[str, int]:
        versions: dict[str, int] = {}
        for channel in (await api.channels())[:20]:
            for name, folded in live_folds(await api.state(channel)).items():
                versions[name] = min(versions.get(name, folded.version), folded.version)
        return versions

    versions = _with_worker(settings, served)
    dropped = _run(drop_old_versions(settings, projections, served=versions, dry_run=dry_run))
    verb = "would delete" if dry_run else "deleted"
    for topic in dropped:
        click.echo(f"{verb} {topic}")
    if not dropped:
        click.echo("no older versions to delete")
