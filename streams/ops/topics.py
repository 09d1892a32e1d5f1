"""Creating chorus's topics (and the worker's changelogs) on a cluster, idempotently."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from streams.errors import ChorusError
from streams.kafka.clients import admin, consumer, started
from streams.settings import Settings
from streams.topology import changelog_specs, topic_specs


class TopicCreationError(ChorusError):
    pass


async def wait_until_visible(
    settings: Settings, names: Sequence[str], timeout: float = 60.0
) -> None:
    """Until fresh metadata lists every partition of `names`.

    A client that fetches metadata before a new topic shows up keeps that view for up to
    metadata.max.age.ms (5 min): Faust's tables then raise PartitionsMismatch and routed
    views fail, so the worker waits here before its clients start.
    """
    kafka = consumer(settings, group_id=None)
    await started(kafka, settings)
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
    await started(client, settings)
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
