"""The fold role with only its config and fold stages: `python -m bench.fold_worker`.

The fold's own cost (validation → projections → tables and changelogs → driver events, the
real code of the fold stage) without the shadow check and the HTTP views, so it can be set
beside Quix Streams running the same fold. Settings come from CHORUS_* as for
`chorus worker`; it writes to the topics of its CHORUS_TOPIC_PREFIX.
"""

from __future__ import annotations

import asyncio
import logging

import faust

from streams.settings import Settings
from streams.worker.compose import Stage, build_worker
from streams.worker.run import create_role_topics

FOLD_ONLY: tuple[Stage, ...] = ("config", "fold")


def main() -> None:
    settings = Settings()
    create_role_topics(settings, ("fold",))
    # asyncio.run (in create_role_topics) leaves no current loop behind; Faust needs one.
    asyncio.set_event_loop(asyncio.new_event_loop())
    runtime = build_worker(settings, stages=FOLD_ONLY).runtime
    runtime.collector.start()  # as `chorus worker`'s roles do
    app = runtime.app
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    worker = faust.Worker(app, loglevel="warning", quiet=True)
    # Faust's spinner would turn the root logger to DEBUG at WARNING: measure without that.
    worker.spinner = None
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
