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

from streams.ops.topics import create_topics
from streams.settings import Settings


def apps_for(module: str, settings: Settings) -> list[Any]:
    """The Faust apps `module` runs: `chorus worker` runs both roles."""
    if module == "bench.faust_floor":
        from bench.faust_floor import build

        return [build(settings, "table", settings.topic("floor-out"))]
    from bench.fold_worker import FOLD_ONLY
    from streams.worker.compose import build_worker

    if module == "bench.fold_worker":
        return [build_worker(settings, stages=FOLD_ONLY).runtime.app]
    return [
        build_worker(settings).runtime.app,
        build_worker(settings, role="context").runtime.app,
    ]


def main() -> None:
    settings = Settings()
    apps = apps_for(sys.argv[1] if len(sys.argv) > 1 else "streams.interfaces.cli", settings)
    names = sorted(
        table.changelog_topic.get_topic_name() for app in apps for table in app.tables.values()
    )
    asyncio.run(create_topics(settings, names))
    print("\n".join(names))


if __name__ == "__main__":
    main()
