"""Create a worker's table changelog topics before the worker starts.

On a fresh cluster Faust creates them itself at start-up, and its first table write can
race the metadata of the topic it just created: the agent crashes with PartitionsMismatch
("the changelog topic ... has 0 partitions") and restarts until the metadata refreshes,
minutes later. Creating them beforehand, exactly as Faust would (compacted, the source's
partition count), takes the race out of the measurement. Run in the worker's own
environment, so a checkout under test (BENCH_WORKER_SRC) lists its own tables:

    python -m bench.changelogs streams.interfaces.cli.main|bench.fold_worker|bench.faust_floor
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from streams.settings import Settings
from streams.worker.compose import EVERY_STAGE


def app_for(module: str, settings: Settings) -> Any:
    if module == "bench.faust_floor":
        from bench.faust_floor import build

        return build(settings, "table", settings.topic("floor-out"))
    from bench.fold_worker import FOLD_ONLY
    from streams.worker.compose import build_worker

    stages = FOLD_ONLY if module == "bench.fold_worker" else EVERY_STAGE
    return build_worker(settings, stages=stages).runtime.app


async def create(settings: Settings, names: list[str]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [name for name in names if name not in existing]
        if missing:
            await admin.create_topics(
                [
                    NewTopic(
                        name=name,
                        num_partitions=settings.partitions,
                        replication_factor=settings.replication_factor,
                        topic_configs={"cleanup.policy": "compact"},
                    )
                    for name in missing
                ]
            )
    finally:
        await admin.close()


def main() -> None:
    settings = Settings()
    app = app_for(sys.argv[1] if len(sys.argv) > 1 else "streams.interfaces.cli", settings)
    names = sorted(table.changelog_topic.get_topic_name() for table in app.tables.values())
    asyncio.run(create(settings, names))
    print("\n".join(names))


if __name__ == "__main__":
    main()
