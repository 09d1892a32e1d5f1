"""Starting a worker: create the topics, build the app, hand the loop to Faust."""

from __future__ import annotations

import asyncio
import logging

import faust

from streams.app import Chorus
from streams.registry import registered_projections
from streams.replay import catch_up_rebuilds
from streams.settings import Settings
from streams.topics import create_topics

log = logging.getLogger(__name__)


def run_worker(settings: Settings, loglevel: str = "info") -> None:
    asyncio.run(create_topics(settings))
    if settings.rebuild_on_start:
        # A projection or version added to a running system must not start mid-log from
        # an empty state: fold what it missed into its changelog before Faust recovers it.
        projections = registered_projections(settings.projections)
        for outcome in asyncio.run(catch_up_rebuilds(settings, projections)):
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
    chorus = Chorus(settings).install()
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    worker = faust.Worker(chorus.app, loglevel=loglevel, quiet=True)
    worker.execute_from_commandline()
