"""A role's tables brought to the end of their changelogs before it joins its group (both
roles): a cold start restores at the rate the changelogs read.

Faust's recovery reads a changelog record by record: each one goes through the consumer's
per-message callback (four tasks), becomes an event, crosses a queue to the recovery loop
(a task per record) and is followed by a count of what every partition has left to read. A
profile of a cold start showed that path using most of both roles' CPU, and restoring
1,000,000 channels took 325–392 s; this way both roles are ready in about 30 s
(`bench/results/issue-40-investigations.md`, "The cold restore").

This reads them as Kafka Streams' restore consumer does: a consumer of its own (no group,
nothing committed) fetches record batches from where each store is, and each partition's
fetched records go to its store in one write batch through `Table.apply_changelog_batch`,
as Faust's recovery and a checkpoint write them (the records' bytes, then the changelog
offset the store is at). Faust's recovery then starts at each store's offset and finds
nothing left to read.

When: as the role's app starts, before its consumer joins the group, and only when no other
worker is a member of the role's group: this one will then be assigned every partition. A
member with this worker's static instance id (KIP-345, `streams.kafka.groups`) is this
worker's own earlier process, not another worker. With other members it reads nothing and
Faust's recovery restores what the assignment gives it, since reading every partition would
cost each of several workers the whole changelogs. Two workers starting at once may both
restore everything: more reading, the same stores. Only RocksDB stores are restored here; a
table in memory (tests) starts empty and Faust's recovery fills it.

Costs: per record, a copy of its bytes into a write batch; memory, what the consumer has
fetched (CHORUS_CONSUMER_FETCH_BYTES per partition, at most aiokafka's 50 MiB a request) and
one partition's write batch. Nothing is kept per channel. It gives the event loop back after
each fetch and stops there when the app stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from streams.kafka.clients import (
    MissingTopicError,
    admin,
    consumer,
    drop_fetched_ahead,
    started,
    topic_partitions,
    with_retries,
)
from streams.settings import Settings
from streams.worker.store import ChangelogEvent, ChangelogMessage

log = logging.getLogger(__name__)

# How long one fetch waits for records before the partitions still behind are read again.
FETCH_WAIT_MS = 500


def other_members(member_ids: Iterable[str], instance_id: str | None) -> list[str]:
    """The members of a group that are not this worker: a static member's id is its
    instance id, a dash and what the coordinator added (Kafka's `generateMemberId`)."""
    mine = f"{instance_id}-" if instance_id else None
    return [m for m in member_ids if mine is None or not m.startswith(mine)]


async def group_members(settings: Settings, group: str) -> list[str] | None:
    """The member ids of `group` as its coordinator describes it (none when it is empty or
    unknown); None when it could not be described."""
    client = admin(settings)
    try:
        await started(client, settings)
        # A fresh cluster elects the group's coordinator as the first group is described.
        responses = await with_retries(lambda: client.describe_consumer_groups([group]))
    except Exception as error:
        log.warning("could not describe group %s: %r", group, error)
        return None
    finally:
        await client.close()
    members: list[str] = []
    for response in responses:
        for described in response.groups:
            error_code, members_of = described[0], described[5]
            if error_code != 0:
                log.warning("describing group %s answered error code %s", group, error_code)
                return None
            members += [member[0] for member in members_of]
    return members


@dataclass
class Restored:
    """What a restore read: records, the partitions it read from, seconds."""

    records: int = 0
    partitions: int = 0
    seconds: float = 0.0
    skipped: str | None = None


async def restore_before_joining(app: Any, settings: Settings, tables: Sequence[Any]) -> Restored:
    """Bring `tables`' RocksDB stores to their changelogs' ends when no other worker is in
    the app's group (see the module); what was read, or why nothing was."""
    stored = [table for table in tables if hasattr(table.data, "_db_for_partition")]
    if not stored:
        return Restored(skipped="no table in RocksDB")
    members = await group_members(settings, app.conf.id)
    if members is None:
        return Restored(skipped="the group could not be described")
    others = other_members(members, app.conf.consumer_group_instance_id)
    if others:
        return Restored(skipped=f"{len(others)} other member(s) in the group")
    kafka = consumer(
        settings,
        enable_auto_commit=False,
        group_id=None,
        max_partition_fetch_bytes=settings.consumer_fetch_bytes,
    )
    await started(kafka, settings)
    try:
        return await restore_stores(app, kafka, stored)
    finally:
        drop_fetched_ahead(kafka)
        await kafka.stop()


async def restore_stores(app: Any, kafka: AIOKafkaConsumer, tables: Sequence[Any]) -> Restored:
    """Read each of `tables`' changelog partitions with `kafka` (a consumer of no group)
    from after its store's offset to the end it has now, each fetch of a partition one write
    batch; stop after the fetch under way when `app` stops."""
    started_at = time.monotonic()
    by_topic: dict[str, Any] = {}
    assigned: list[TopicPartition] = []
    for table in tables:
        topic = table.changelog_topic.get_topic_name()
        try:
            partitions = await topic_partitions(kafka, topic)
        except MissingTopicError:  # Faust creates it as it starts: nothing to restore
            continue
        by_topic[topic] = table
        assigned += [TopicPartition(topic, p) for p in sorted(partitions)]
    if not assigned:
        return Restored(skipped="no changelog yet")
    kafka.assign(assigned)
    ends = await kafka.end_offsets(assigned)
    firsts = await kafka.beginning_offsets(assigned)
    behind: dict[TopicPartition, int] = {}
    for tp in assigned:
        persisted = by_topic[tp.topic].data.persisted_offset(tp)
        start = max(firsts[tp], -1 if persisted is None else persisted + 1)
        if start < ends[tp]:
            kafka.seek(tp, start)
            behind[tp] = ends[tp]
    kafka.pause(*(tp for tp in assigned if tp not in behind))
    restored = Restored(partitions=len(behind))
    while behind and not app.should_stop:
        fetched = await kafka.getmany(*behind, timeout_ms=FETCH_WAIT_MS)
        for tp, records in fetched.items():
            if records:
                by_topic[tp.topic].apply_changelog_batch(_events(tp, records))
                restored.records += len(records)
        for tp in list(behind):
            # The position, not the last record: offsets past it may hold no record.
            if await kafka.position(tp) >= behind[tp]:
                del behind[tp]
                kafka.pause(tp)
        await asyncio.sleep(0)
    restored.seconds = time.monotonic() - started_at
    return restored


def _events(tp: TopicPartition, records: Sequence[ConsumerRecord]) -> list[ChangelogEvent]:
    """The records as what a store's `apply_changelog_batch` reads of an event."""
    events = []
    for record in records:
        key: bytes = record.key
        message = ChangelogMessage(tp, record.offset, tp.partition, key, record.value)
        events.append(ChangelogEvent(key, record.value, message))
    return events
