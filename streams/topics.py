"""The topics chorus owns, with explicit configs, created idempotently.

Faust declares only its internal topics (changelogs), so the public ones are
created here, by `chorus topics create` and by the worker on start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from streams.kafka import admin
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


async def create_topics(settings: Settings) -> list[str]:
    """Create any missing chorus topic; returns the names created (existing ones are kept)."""
    client = admin(settings)
    await client.start()
    try:
        existing = set(await client.list_topics())
        missing = [spec for spec in topic_specs(settings) if spec.name not in existing]
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
        return [spec.name for spec in missing]
    finally:
        await client.close()
