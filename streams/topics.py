"""The topics chorus owns, with explicit configs, created idempotently.

Faust declares only its internal topics (changelogs), so the public ones are
created here, by `chorus topics create` and by the worker on start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from streams.kafka import admin, consumer
from streams.settings import Settings

MESSAGES = "messages"
SUMMARIES = "summaries"
RECAPS = "recaps"
CHANNEL_CONFIG = "channel-config"
DRIVER_EVENTS = "driver-events"
DEAD_LETTERS = "dead-letters"


class TopicCreationError(RuntimeError):
    pass


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """Messages, summaries, recaps, config and driver events share one partition count:
    they are co-partitioned by the channel key, so one worker owns a channel everywhere."""
    p, rf = settings.partitions, settings.replication_factor
    message_bytes = str(settings.max_message_bytes + 64 * 1024)
    compact = {"cleanup.policy": "compact", "max.message.bytes": message_bytes}
    return [
        TopicSpec(
            settings.topic(MESSAGES),
            p,
            rf,
            {"cleanup.policy": "delete", "retention.ms": "-1", "max.message.bytes": message_bytes},
        ),
        TopicSpec(settings.topic(SUMMARIES), p, rf, compact),
        TopicSpec(settings.topic(RECAPS), p, rf, compact),
        TopicSpec(settings.topic(CHANNEL_CONFIG), p, rf, compact),
        TopicSpec(
            settings.topic(DRIVER_EVENTS),
            p,
            rf,
            {
                "cleanup.policy": "delete",
                "retention.ms": str(settings.driver_events_retention_ms),
                "max.message.bytes": message_bytes,
            },
        ),
        TopicSpec(
            settings.topic(DEAD_LETTERS),
            p,
            rf,
            {"cleanup.policy": "delete", "retention.ms": "-1", "max.message.bytes": message_bytes},
        ),
    ]


def changelog_config(settings: Settings) -> dict[str, str]:
    """What a table changelog needs beyond Faust's defaults: room for a record as large as
    a message (a summary stage keeps message bodies), like every chorus topic."""
    return {"max.message.bytes": str(settings.max_message_bytes + 64 * 1024)}


def changelog_specs(settings: Settings, names: Sequence[str]) -> list[TopicSpec]:
    """The worker's table changelogs, as Faust creates them (compacted, co-partitioned)."""
    return [
        TopicSpec(
            name,
            settings.partitions,
            settings.replication_factor,
            {"cleanup.policy": "compact", **changelog_config(settings)},
        )
        for name in names
    ]


async def wait_until_visible(
    settings: Settings, names: Sequence[str], timeout: float = 60.0
) -> None:
    """Until fresh metadata lists every partition of `names`.

    A client that fetches metadata before a new topic shows up keeps that view for up to
    metadata.max.age.ms (5 min): Faust's tables then raise PartitionsMismatch and routed
    views fail, so the worker waits here before its clients start.
    """
    kafka = consumer(settings, group_id=None)
    await kafka.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            cluster = await kafka._client.fetch_all_metadata()
            if all(len(cluster.partitions_for_topic(n) or ()) >= 1 for n in names):
                return
            if time.monotonic() > deadline:
                raise TopicCreationError(f"topics not visible after {timeout:g}s: {list(names)}")
            await asyncio.sleep(0.5)
    finally:
        await kafka.stop()


async def create_topics(settings: Settings, changelogs: Sequence[str] = ()) -> list[str]:
    """Create any missing chorus topic (and the given changelogs); returns the names created
    (existing ones are kept). Returns once every one of them is visible in metadata."""
    specs = topic_specs(settings) + changelog_specs(settings, changelogs)
    client = admin(settings)
    await client.start()
    try:
        existing = set(await client.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        if missing:
            response = await client.create_topics(
                [
                    NewTopic(
                        name=spec.name,
                        num_partitions=spec.partitions,
                        replication_factor=spec.replication_factor,
                        topic_configs=spec.config,
                    )
                    for spec in missing
                ]
            )
            # The admin client returns per-topic error codes instead of raising.
            failures = [
                f"{topic}: {message or code}"
                for topic, code, message in response.topic_errors
                if code not in (0, TopicAlreadyExistsError.errno)
            ]
            if failures:
                raise TopicCreationError("could not create topics: " + "; ".join(failures))
    finally:
        await client.close()
    await wait_until_visible(settings, [spec.name for spec in specs])
    return [spec.name for spec in missing]
