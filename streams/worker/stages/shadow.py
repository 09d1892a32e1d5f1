"""The shadow check: from time to time, re-fold a sample of this worker's channels from the
log (`streams.replay.checks.run_shadow_check`) and report any live state that differs, as
a metric, a log line with the diff and a `shadow-divergence:<channel>` driver event.

Off unless `CHORUS_SHADOW_CHECK_SECONDS` > 0. A round samples among the channels this worker
owns that it folded most recently (SHADOW_CANDIDATES of the fold cache), never walking every
channel.
"""

from __future__ import annotations

import logging
import random
from typing import Any

from projections.projection import live_of, load_state
from streams.records import DriverEvent, ProjectionChange
from streams.replay import Difference, render_diff
from streams.replay.checks import run_shadow_check
from streams.worker.runtime import Runtime
from streams.worker.timers import every

log = logging.getLogger(__name__)

# The channels a round samples from: those folded most recently.
SHADOW_CANDIDATES = 1_000


def replayed_live(chorus: Runtime, difference: Difference) -> Any:
    """The live part of the state the log folds into (what the event says it should be)."""
    if difference.replay is None:
        return None
    for projection in chorus.projections:
        if projection.name == difference.projection:
            return live_of(projection, load_state(projection, difference.replay.state))
    return difference.replay.state


async def report_divergence(chorus: Runtime, difference: Difference) -> None:
    """A shadow check found live state that differs from a re-fold of the log."""
    chorus.meter.divergences.labels(difference.projection, difference.kind).inc()
    log.error("shadow check: %s\n%s", difference.describe(), render_diff(difference))
    folded = difference.live or difference.replay
    partition = chorus.ownership.messages_partition(difference.channel)
    event = DriverEvent(
        source=f"shadow-divergence:{difference.channel}",
        channel=difference.channel,
        message_id="",
        partition=-1 if partition is None else partition,
        offset=folded.offset if folded else -1,
        projections={
            difference.projection: ProjectionChange(
                version=folded.version if folded else 0,
                live=replayed_live(chorus, difference),
            )
        },
        decision=None,
        applied=False,
        errors={difference.projection: difference.describe()},
    )
    await chorus.driver_events.send(
        key=difference.channel.encode(),
        value=event.fitted(chorus.settings.max_message_bytes),
        partition=partition,
    )


def install(chorus: Runtime) -> None:
    """Register the shadow-check timer (off when the interval is 0)."""
    every_seconds = chorus.settings.shadow_check_seconds
    if every_seconds <= 0:
        return
    rng = random.Random()

    async def report(difference: Difference) -> None:
        await report_divergence(chorus, difference)

    folds = chorus.folds
    if folds is None:
        raise ValueError("the shadow check runs in the fold role")
    ownership = chorus.ownership

    async def shadow(_: object) -> None:
        # The channels folded lately (the fold cache's), those this worker owns: a sample
        # read without walking every channel.
        recent = folds.recently_folded(SHADOW_CANDIDATES)
        owned = [c for c in recent if ownership.messages_partition(c) is not None]
        try:
            await run_shadow_check(chorus, owned, chorus.settings.shadow_check_sample, rng, report)
        except Exception:  # a failed check must never stop the worker
            log.exception("shadow check failed")

    every(chorus.app, chorus.meter, every_seconds, "shadow-check", shadow)
