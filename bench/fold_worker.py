"""A chorus worker running only the fold stage (channel config + fold agent), for the bench.

It is `streams.worker.run.run_worker` with the summary and recap stages left out, so
the fold's own cost (validation → projections → tables → driver events, the real code of
streams/worker/stages/fold.py) can be set beside the whole worker's and the peer's. Driver
events go to `<prefix>driver-events-<suffix>` so this run does not mix with the full worker's.

    python -m bench.fold_worker --driver-events-suffix fold-only
"""

from __future__ import annotations

import argparse
import asyncio
import logging

import faust

from streams.ops.topics import create_topics
from streams.settings import Settings
from streams.worker.compose import Stage, build_worker
from streams.worker.runtime import RAW

# The fold stage alone: the worker without its summary, recap, shadow and HTTP stages.
FOLD_ONLY: tuple[Stage, ...] = ("config", "fold")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--driver-events-suffix", default="fold-only")
    parser.add_argument("--loglevel", default="warning")
    args = parser.parse_args()
    settings = Settings()
    asyncio.run(create_topics(settings))
    asyncio.set_event_loop(asyncio.new_event_loop())
    chorus = build_worker(settings, stages=FOLD_ONLY).runtime
    chorus.driver_events = chorus.app.topic(
        f"{settings.topic('driver-events')}-{args.driver_events_suffix}", **RAW
    )
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    worker = faust.Worker(chorus.app, loglevel=args.loglevel, quiet=True)
    # Faust's terminal spinner turns the root logger to DEBUG at loglevel >= WARNING, and
    # every debug call on the hot path then builds a record: measure without that.
    worker.spinner = None
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
