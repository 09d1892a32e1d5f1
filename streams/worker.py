"""Starting a worker: create the topics, build the app, hand the loop to Faust."""

from __future__ import annotations

import asyncio
import logging

import faust

from streams.app import Chorus
from streams.settings import Settings
from streams.topics import create_topics


def run_worker(settings: Settings, loglevel: str = "info") -> None:
    asyncio.run(create_topics(settings))
    # asyncio.run leaves no current loop behind; Faust's worker needs one.
    asyncio.set_event_loop(asyncio.new_event_loop())
    chorus = Chorus(settings).install()
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    worker = faust.Worker(chorus.app, loglevel=loglevel, quiet=True)
    worker.execute_from_commandline()
