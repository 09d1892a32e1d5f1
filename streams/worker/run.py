"""Starting one role of the worker: create the topics, build the app, hand the loop to
Faust. `chorus worker` starts both roles as child processes (`streams.worker.supervise`)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import faust

from streams.kafka.clients import with_retries
from streams.kafka.groups import leave_group
from streams.ops.topics import create_topics
from streams.registry import registered_projections
from streams.replay import catch_up_rebuilds, mark_served
from streams.settings import Settings
from streams.topology import ROLES, Role, role_changelogs
from streams.worker.allocator import map_large_blocks_apart
from streams.worker.app import role_data_dir
from streams.worker.compose import build_worker

log = logging.getLogger(__name__)


# How long a worker may take to stop after SIGTERM or Ctrl-C before it exits anyway. With
# its broker gone, Faust waits 60 s for its consumer thread and its producer would wait for
# the broker for ever. Leaving early is a crash as far as the log is concerned, which the
# fold survives by design: records after the committed offsets fold again, idempotently.
STOP_GRACE_SECONDS = 8.0
# The exit status of a worker that did not stop in time: that of a process ended by SIGTERM.
EXIT_STOPPED_LATE = 128 + signal.SIGTERM


class StopDeadline:
    """Calls `exit` once `seconds` after `arm`, unless the process has ended by then: a
    daemon thread, so it fires even when the event loop is stuck in a client's stop."""

    def __init__(self, seconds: float, exit: Callable[[], None]) -> None:
        self.seconds = seconds
        self._exit = exit
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        if self._timer is not None:
            return
        self._timer = threading.Timer(self.seconds, self._exit)
        self._timer.daemon = True
        self._timer.start()


def exit_stopped_late() -> None:
    log.error(
        "the worker did not stop within %gs of the signal (is its broker reachable?); "
        "exiting now: the records after the committed offsets fold again when it restarts",
        STOP_GRACE_SECONDS,
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(EXIT_STOPPED_LATE)


class ChorusWorker(faust.Worker):
    """Faust's worker, with a deadline on stopping (`StopDeadline`), that leaves its
    consumer group once stopped (a static member does not by itself: `streams.kafka.groups`),
    and whose stop does not collect the garbage of the whole heap once per table."""

    def __init__(self, app: faust.App, settings: Settings, **kwargs: object) -> None:
        super().__init__(app, **kwargs)
        self.settings = settings
        self.stop_deadline = StopDeadline(STOP_GRACE_SECONDS, exit_stopped_late)

    def _schedule_shutdown(self, signal: signal.Signals) -> None:
        self.stop_deadline.arm()
        # Faust's RocksDB stores each run a full garbage collection as they stop (to drop
        # their databases): seconds for every table with a large heap. Everything alive now
        # lives until the process ends anyway, so the collector skips it from here on.
        gc.freeze()
        super()._schedule_shutdown(signal)

    def stop_and_shutdown(self) -> None:
        super().stop_and_shutdown()
        group, instance_id = self.app.conf.id, self.app.conf.consumer_group_instance_id
        if instance_id:
            asyncio.run(leave_group(self.settings, group, instance_id))


def create_role_topics(settings: Settings, roles: tuple[Role, ...] = ROLES) -> None:
    """The chorus topics and the changelogs of `roles`' tables. Faust creates the changelogs
    itself, but only as its clients start: create them first and wait until metadata lists
    them, so no client starts with a view that predates them. Raises (one line) when the
    broker cannot be reached."""
    projections = registered_projections(settings.projections, settings)
    changelogs = [name for role in roles for name in role_changelogs(settings, role, projections)]
    asyncio.run(create_topics(settings, sorted(set(changelogs))))


# The context role's scheduling priority below the fold role's (Linux nice): when both
# want the CPU, the fold, which wakes agents, gets it first; summaries and recaps, which
# nothing waits on, catch up in what is left (its own consumer group keeps its place).
CONTEXT_NICENESS = 10


def run_worker(settings: Settings, loglevel: str = "info", role: Role = "fold") -> None:
    """Run one role in this process until it is stopped (the context role below the fold
    role's priority: `CONTEXT_NICENESS`), its large blocks mapped apart from glibc's heap
    (`streams.worker.allocator`)."""
    map_large_blocks_apart()
    if role == "context":
        os.nice(CONTEXT_NICENESS)
    create_role_topics(settings, (role,))
    # Faust creates its data directory but not its parents (the context role's is inside the
    # fold role's, which may not exist yet).
    Path(role_data_dir(settings, role)).mkdir(parents=True, exist_ok=True)
    projections = registered_projections(settings.projections, settings)
    if settings.rebuild_on_start and role == "fold":
        # A projection or version added to a running system must not start mid-log from
        # an empty state: fold what it missed into its changelog before Faust recovers it.
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
    if role == "fold":  # no rebuild writes these tables from now on
        asyncio.run(with_retries(lambda: mark_served(settings, projections)))
    # asyncio.run leaves no current loop behind; Faust's worker needs one.
    asyncio.set_event_loop(asyncio.new_event_loop())
    chorus = build_worker(settings, role=role).runtime
    chorus.collector.start()
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    worker = ChorusWorker(chorus.app, settings, loglevel=loglevel, quiet=True)
    worker.spinner = None  # else Faust sets the root logger to DEBUG at WARNING and above
    worker.execute_from_commandline()
