"""Starting a worker: create the topics, build the app, hand the loop to Faust."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import faust
from aiokafka.errors import KafkaError

from streams.ops.topics import create_topics
from streams.registry import registered_projections
from streams.replay import catch_up_rebuilds
from streams.settings import Settings
from streams.worker.compose import build_worker

log = logging.getLogger(__name__)

T = TypeVar("T")


async def with_retries(
    call: Callable[[], Awaitable[T]], attempts: int = 10, delay: float = 2.0
) -> T:
    """Retry Kafka's transient start-up errors, e.g. a group coordinator that a fresh
    cluster has not elected yet."""
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except KafkaError as error:
            if not error.retriable or attempt == attempts:
                raise
            log.warning("%s; retrying in %.0fs (%d/%d)", error, delay, attempt, attempts)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def run_worker(settings: Settings, loglevel: str = "info") -> None:
    # Faust creates the changelogs itself, but only as its clients start: create them first
    # and wait until metadata lists them, so no client starts with a view that predates them.
    asyncio.run(create_topics(settings, build_worker(settings).runtime.changelog_topics()))
    if settings.rebuild_on_start:
        # A projection or version added to a running system must not start mid-log from
        # an empty state: fold what it missed into its changelog before Faust recovers it.
        projections = registered_projections(settings.projections, settings)
        for outcome in asyncio.run(with_retries(lambda: catch_up_rebuilds(settings, projections))):
            if outcome.mode in ("full", "incremental"):
                log.warning(
                    "caught up %s v%s (%s): %d folds from %d records",
                    outcome.projection,
                    outcome.version,
                    outcome.mode,
                    outcome.written,
                    outcome.records,
                )
    # asyncio.run leaves no current loop behind; Faust's worker needs one.
    asyncio.set_event_loop(asyncio.new_event_loop())
    chorus = build_worker(settings).runtime
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    worker = faust.Worker(chorus.app, loglevel=loglevel, quiet=True)
    worker.spinner = None  # else Faust sets the root logger to DEBUG at WARNING and above
    worker.execute_from_commandline()
