"""Blue-green rebuilds of fold tables from the log, and dropping old versions' changelogs."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from aiokafka import TopicPartition
from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from pydantic import BaseModel, ConfigDict, Field

from projections.projection import (
    ChannelProjection,
    Folded,
)
from streams.replay.log import (
    ReplayError,
    administering,
    committed_offsets,
    producing,
    read_spans,
    reading,
    topic_spans,
)
from streams.replay.run import replay
from streams.settings import Settings
from streams.topology import (
    MESSAGES,
    REBUILDS,
    SPLIT_FOLD_TABLE_SUFFIXES,
    changelog_name,
    changelog_specs,
    fold_table_name,
)


def changelog_topic(settings: Settings, projection: ChannelProjection[Any]) -> str:
    """The changelog Faust gives the projection's table: `<app_id>-<table>-changelog`."""
    return changelog_name(settings, fold_table_name(projection))


def changelog_record(channel: str, folded: Folded) -> tuple[bytes, bytes]:
    """Key and value as Faust's json codec writes a fold table entry."""
    return orjson.dumps(channel), orjson.dumps(folded.model_dump(mode="json"))


class RebuildMarker(BaseModel):
    """What a rebuild wrote, on the compacted `<prefix>rebuilds` topic (key: app and table).

    `through[p]`: the source partition's records before this offset are folded in.
    `changelog_end[p]`: the changelog's end offsets right after the rebuild wrote. When they
    have moved on, a worker folds the table itself and the rebuild is over. `served`: a
    worker has started folding the table (`mark_served`): no rebuild writes it any more,
    although the worker writes its changelog only at its first checkpoint.
    """

    model_config = ConfigDict(extra="ignore")

    app_id: str
    projection: str
    version: int
    table: str
    changelog: str
    status: Literal["building", "built", "served"]
    through: dict[int, int] = {}
    changelog_end: dict[int, int] = {}
    channels: int = 0
    written: int = 0
    updated_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    def key(self) -> bytes:
        return f"{self.app_id}/{self.table}".encode()


def marker_key(settings: Settings, projection: ChannelProjection[Any]) -> bytes:
    return f"{settings.app_id}/{fold_table_name(projection)}".encode()


@dataclass(frozen=True)
class RebuildPlan:
    projection: ChannelProjection[Any]
    mode: Literal["full", "incremental", "live", "not-needed"]
    reason: str
    marker: RebuildMarker | None = None


def plan_rebuild(
    projection: ChannelProjection[Any],
    changelog_end: Mapping[int, int] | None,
    marker: RebuildMarker | None,
    *,
    deployed: bool = True,
) -> RebuildPlan:
    """Decide how to bring a projection's table up to the log.

    - no changelog data: a full rebuild (`deployed=False`, a group that has committed
      nothing, means a worker will fold from the start anyway: not needed);
    - a finished rebuild nobody has written after: incremental, from where it stopped;
    - an unfinished rebuild: full again (its partial writes are all overwritten);
    - a table a worker has started serving, and anything else: a worker already folds this
      table, and a second writer would corrupt its changelog, so it is left alone.
    """
    written = changelog_end is not None and any(end > 0 for end in changelog_end.values())
    if marker is not None and marker.status == "served":
        return RebuildPlan(projection, "live", "a worker serves this table", marker)
    if marker is not None and marker.status == "building":
        return RebuildPlan(projection, "full", "an earlier rebuild did not finish", marker)
    if not written and marker is None:
        if not deployed:
            return RebuildPlan(projection, "not-needed", "no worker has folded yet")
        return RebuildPlan(projection, "full", "the table has never been written")
    if marker is not None and dict(changelog_end or {}) == marker.changelog_end:
        return RebuildPlan(projection, "incremental", "resuming the previous rebuild", marker)
    return RebuildPlan(projection, "live", "a worker already folds this table", marker)


@dataclass
class RebuildOutcome:
    projection: str
    version: int
    changelog: str
    mode: str
    reason: str
    channels: int = 0
    written: int = 0
    records: int = 0
    through: dict[int, int] = field(default_factory=dict)


async def end_offsets(settings: Settings, *topics: str) -> dict[str, dict[int, int] | None]:
    """Each topic's end offsets per partition (None: no such topic), with one consumer."""
    result: dict[str, dict[int, int] | None] = {}
    async with reading(settings) as kafka:
        metadata = await kafka._client.fetch_all_metadata()
        for topic in topics:
            known = metadata.partitions_for_topic(topic)
            if not known:
                result[topic] = None
                continue
            ends = await kafka.end_offsets([TopicPartition(topic, p) for p in sorted(known)])
            result[topic] = {tp.partition: offset for tp, offset in ends.items()}
    return result


async def _read_latest(settings: Settings, topic: str) -> dict[int, dict[bytes, bytes | None]]:
    """The latest value per key of a (compacted) topic, per partition."""
    latest: dict[int, dict[bytes, bytes | None]] = {}

    def keep(partition: int, records: list[Any]) -> None:
        table = latest.setdefault(partition, {})
        for record in records:
            if record.key is not None:
                table[record.key] = record.value

    async with reading(settings) as kafka:
        try:
            spans = await topic_spans(kafka, topic)
        except ReplayError:
            return {}
        await read_spans(kafka, topic, spans, keep)
    return latest


async def read_markers(settings: Settings) -> dict[bytes, RebuildMarker]:
    markers = {}
    for values in (await _read_latest(settings, settings.topic(REBUILDS))).values():
        for key, value in values.items():
            if value is not None:
                markers[key] = RebuildMarker.model_validate_json(value)
    return markers


async def _ensure_topic(
    settings: Settings, name: str, partitions: int, config: dict[str, str]
) -> None:
    async with administering(settings) as client:
        if name in set(await client.list_topics()):
            return
        new = NewTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=settings.replication_factor,
            topic_configs=config,
        )
        response = await client.create_topics([new])
    for topic, code, message in response.topic_errors:
        if code not in (0, TopicAlreadyExistsError.errno):
            raise ReplayError(f"cannot create {topic}: {message or code}")


async def _write_marker(
    settings: Settings,
    projection: ChannelProjection[Any],
    status: Literal["building", "built", "served"],
    **progress: Any,
) -> None:
    """Record a rebuild of `projection`'s table (`progress`: the other marker fields)."""
    marker = RebuildMarker(
        app_id=settings.app_id,
        projection=projection.name,
        version=projection.version,
        table=fold_table_name(projection),
        changelog=changelog_topic(settings, projection),
        status=status,
        **progress,
    )
    await _ensure_topic(settings, settings.topic(REBUILDS), 1, {"cleanup.policy": "compact"})
    value = orjson.dumps(marker.model_dump(mode="json"))
    async with producing(settings) as kafka:
        await kafka.send_and_wait(settings.topic(REBUILDS), key=marker.key(), value=value)


async def _write_folds(
    settings: Settings, topic: str, entries: Iterable[tuple[int, str, Folded]]
) -> int:
    futures = []
    async with producing(settings, linger_ms=20) as kafka:
        for partition, channel, folded in entries:
            key, value = changelog_record(channel, folded)
            futures.append(await kafka.send(topic, key=key, value=value, partition=partition))
        await asyncio.gather(*futures)
    return len(futures)


async def _load_seeds(
    settings: Settings, projections: Sequence[ChannelProjection[Any]]
) -> dict[str, tuple[int, dict[str, Folded]]]:
    seeds: dict[str, tuple[int, dict[str, Folded]]] = {}
    for projection in projections:
        latest = await _read_latest(settings, changelog_topic(settings, projection))
        for partition, values in latest.items():
            for key, value in values.items():
                if value is None:
                    continue
                channel = orjson.loads(key)
                seeds.setdefault(channel, (partition, {}))[1][projection.name] = (
                    Folded.model_validate_json(value)
                )
    return seeds


async def rebuild(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]],
    *,
    dry_run: bool = False,
    automatic: bool = False,
    exact: bool = False,
    progress: bool = False,
    workers: int = 1,
) -> list[RebuildOutcome]:
    """Fold each projection's current version into its own table's changelog.

    Full rebuilds share one pass over the log; an incremental one resumes from its marker
    with the folds it wrote. `automatic` (a worker starting): only what is needed before a
    worker folds, never a table a worker already writes.
    """
    messages = settings.topic(MESSAGES)
    changelogs = [changelog_topic(settings, p) for p in projections]
    ends = await end_offsets(settings, messages, *changelogs)
    source_ends = ends[messages]
    if source_ends is None:
        raise ReplayError(f"topic {messages!r} does not exist")
    committed = await committed_offsets(settings)
    deployed = any(offset > 0 for offset in committed.values()) or not automatic
    markers = await read_markers(settings)
    plans = [
        plan_rebuild(
            projection,
            ends[topic],
            markers.get(marker_key(settings, projection)),
            deployed=deployed,
        )
        for projection, topic in zip(projections, changelogs, strict=True)
    ]

    outcomes = []
    full = [plan for plan in plans if plan.mode == "full"]
    groups: list[tuple[list[RebuildPlan], dict[int, int]]] = []
    if full:
        groups.append((full, {}))
    for plan in plans:
        if plan.mode == "incremental" and plan.marker is not None:
            groups.append(([plan], dict(plan.marker.through)))
        elif plan.mode in ("live", "not-needed"):
            outcomes.append(
                RebuildOutcome(
                    plan.projection.name,
                    plan.projection.version,
                    changelog_topic(settings, plan.projection),
                    plan.mode,
                    plan.reason,
                )
            )
    for group, starts in groups:
        chosen = [plan.projection for plan in group]
        seeds = await _load_seeds(settings, chosen) if starts else {}
        if not dry_run:
            for plan in group:
                await _prepare_changelog(settings, plan, len(source_ends), starts)
        run = await replay(
            settings,
            chosen,
            start_offsets=starts,
            stop_offsets=source_ends,
            seeds=seeds,
            exact=exact,
            progress=progress,
            workers=workers,
        )
        replayer = run.replayer
        changed = replayer.channels if not starts else replayer.dirty
        for plan in group:
            projection = plan.projection
            topic = changelog_topic(settings, projection)
            entries = [
                (replayer.channels[c].partition, c, folded)
                for c in sorted(changed)
                for folded in [replayer.folds(c).get(projection.name)]
                if folded is not None and (not starts or _moved(seeds, c, folded))
            ]
            written = 0 if dry_run else await _write_folds(settings, topic, entries)
            outcome = RebuildOutcome(
                projection.name,
                projection.version,
                topic,
                "dry-run " + plan.mode if dry_run else plan.mode,
                plan.reason,
                channels=sum(1 for c in replayer.channels if projection.name in replayer.folds(c)),
                written=written if not dry_run else len(entries),
                records=run.records,
                through=dict(source_ends),
            )
            outcomes.append(outcome)
            unchanged = plan.marker is not None and plan.marker.through == source_ends
            if not dry_run and not (starts and unchanged and not written):
                await _write_marker(
                    settings,
                    projection,
                    "built",
                    through=dict(source_ends),
                    changelog_end=(await end_offsets(settings, topic))[topic] or {},
                    channels=outcome.channels,
                    written=(plan.marker.written if starts and plan.marker else 0) + written,
                )
    return outcomes


def _moved(seeds: Mapping[str, tuple[int, Mapping[str, Folded]]], channel: str, f: Folded) -> bool:
    before = seeds.get(channel, (0, {}))[1].get(f.projection)
    return before is None or before.offset != f.offset


async def _prepare_changelog(
    settings: Settings, plan: RebuildPlan, partitions: int, starts: Mapping[int, int]
) -> None:
    """Create the table's changelog as Faust would (compacted, co-partitioned with the
    messages) and, for a full rebuild, mark it as building first."""
    topic = changelog_topic(settings, plan.projection)
    (spec,) = changelog_specs(settings, [topic])
    await _ensure_topic(settings, topic, partitions, spec.config)
    if not starts:
        await _write_marker(settings, plan.projection, "building")


async def mark_served(settings: Settings, projections: Sequence[ChannelProjection[Any]]) -> None:
    """Record that a worker folds each of `projections`' tables from now on (called as the
    fold role starts, after `catch_up_rebuilds`): a worker writes a table's changelog only
    at its checkpoints, so a changelog that has not moved yet does not mean nobody folds it.
    """
    markers = await read_markers(settings)
    for projection in projections:
        marker = markers.get(marker_key(settings, projection))
        if marker is not None and marker.status == "served":
            continue
        progress = (
            {"through": marker.through, "changelog_end": marker.changelog_end}
            if marker is not None
            else {}
        )
        await _write_marker(settings, projection, "served", **progress)


async def catch_up_rebuilds(
    settings: Settings, projections: Sequence[ChannelProjection[Any]]
) -> list[RebuildOutcome]:
    """Run before a worker starts folding (see the lead's wiring in `streams.worker.run`).

    Brings every fold table that a worker has not taken over yet up to the log: resumes a
    finished rebuild from where it stopped (the records folded by old-version workers in the
    meantime), and builds a projection version that was deployed without a rebuild in an
    existing deployment (which would otherwise start from its identity in mid-log).
    """
    return await rebuild(settings, projections, automatic=True)


def old_version_changelogs(
    app_id: str, projection: ChannelProjection[Any], topics: Iterable[str]
) -> list[str]:
    """The changelogs among `topics` of `projection`'s fold tables of versions before its
    current one, with the second tables of version 2's split folds."""
    pattern = re.compile(
        rf"^{re.escape(app_id)}-fold-{re.escape(projection.name)}"
        rf"-v(\d+)(?:{'|'.join(map(re.escape, SPLIT_FOLD_TABLE_SUFFIXES))})?-changelog$"
    )
    return [
        topic
        for topic in sorted(topics)
        for match in [pattern.match(topic)]
        if match and int(match.group(1)) < projection.version
    ]


async def drop_old_versions(
    settings: Settings,
    projections: Sequence[ChannelProjection[Any]],
    *,
    served: Mapping[str, int],
    dry_run: bool = False,
) -> list[str]:
    """Delete the changelogs of older versions of `projections`.

    Refuses for a projection whose current version is not what the workers serve
    (`served`: name → the lowest version seen on the worker's API): the old table may still
    be in use. Workers' local stores of old tables (under their data dir) are not touched.
    """
    async with administering(settings) as client:
        topics = set(await client.list_topics())
        doomed = []
        for projection in projections:
            if served.get(projection.name) != projection.version:
                raise ReplayError(
                    f"the worker does not serve {projection.name} v{projection.version} yet "
                    f"(it serves {served.get(projection.name, 'nothing')}); switch workers "
                    "first, then drop the old versions"
                )
            doomed += old_version_changelogs(settings.app_id, projection, topics)
        if doomed and not dry_run:
            await client.delete_topics(doomed)
    return doomed
