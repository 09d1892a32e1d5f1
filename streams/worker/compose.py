"""The composition root: the one place that imports the stages and wires them together.

The worker runs in two roles, each a Faust app with its own consumer group, so the fold
never waits for text work and each role scales on its own (`chorus worker` starts both as
child processes and supervises them, `streams.worker.supervise`). Data goes one way,
through Kafka topics: neither role calls the other.

  fold role (app id CHORUS_APP_ID, the public HTTP API on CHORUS_WEB_PORT)
  chorus.channel-config ─► config: the config table (read by every stage)
  chorus.messages ─► fold: validate once, fold ─► fold tables ─► chorus.driver-events
                      │                 └────────────────────► chorus.dead-letters
                      └─► recent: each channel's last records (offsets; bodies in memory
                          or read back), for the views
  the fold's timers, each over what the fold holds:
    expiry: overdue commitments ─► expiry EVENTs ─► chorus.messages (the fold tells it the
            deadlines as it folds: the deadline index)
    stalls: a partition whose consumer stopped delivering ─► seek back to the next offset
  chorus.summaries, chorus.recaps ─► latest: where each channel's latest is (a table), for
            the views to read it back by position
  shadow: re-folds a sample of channels from the log now and then (off by default)
  http: the views over the read model (`streams.worker.read_model`), from this process

  context role (app id CHORUS_APP_ID-context-v3, readiness, costs and metrics on
  CHORUS_WEB_PORT + 1)
  chorus.channel-config ─► config
  chorus.messages ─► feed: validate ─► summaries: pending batch ─► task ─► chorus.summaries
                                 └──► recaps: phase + deadline ─► queue ─► chorus.recaps
  chorus.summaries ─► summaries: where each channel's latest summary is and what it covers
                      (the channel state: what the next batch builds on)
  chorus.recaps ─► recaps: the phase and where the latest recap is, in the channel state
  the timers of both read the deadline index: only what is due

Stages share the `Runtime` and reach each other only through what `build_worker` hands
them here (the fold's watchers, readers and next offsets, the readers of the feed, the
summaries' narrative the recaps read): no stage imports another.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from projections.projection import ChannelProjection
from streams.settings import Settings
from streams.topology import Role
from streams.worker import agent_api, http, latest
from streams.worker.latest import LatestViews
from streams.worker.runtime import Runtime
from streams.worker.stages import (
    config,
    expiry,
    feed,
    fold,
    recaps,
    recent,
    shadow,
    stalls,
    summaries,
)
from streams.worker.stages.expiry import CommitmentExpiry
from streams.worker.stages.feed import Feed
from streams.worker.stages.recent import RecentMessages
from streams.worker.timers import every

# How often the checkpoint timer looks whether a checkpoint is due.
CHECKPOINT_TICK_SECONDS = 0.1

Stage = Literal["config", "fold", "summaries", "recaps", "shadow", "http"]
# Per role, the stages it runs by default and those it may run.
ROLE_STAGES: dict[Role, tuple[Stage, ...]] = {
    # "http" here is the public views, with what they read besides the fold: the latest
    # summaries and recaps (`streams.worker.latest`) and the recent messages.
    "fold": ("config", "fold", "shadow", "http"),
    # "http" here is readiness, this process's LLM costs and metrics.
    "context": ("config", "summaries", "recaps", "http"),
}


@dataclass(frozen=True)
class Worker:
    """A wired worker: the runtime and the stage objects (None for a stage left out)."""

    runtime: Runtime
    folder: fold.Folder | None
    summariser: summaries.Summariser | None
    recapper: recaps.Recapper | None
    feed: Feed | None = None
    expiry: CommitmentExpiry | None = None
    views: LatestViews | None = None
    window: RecentMessages | None = None


def build_worker(
    settings: Settings,
    projections: list[ChannelProjection[Any]] | None = None,
    *,
    broker: str | None = None,
    stages: Collection[Stage] | None = None,
    role: Role = "fold",
) -> Worker:
    """A worker of `role` with `stages` (the role's, `ROLE_STAGES`, when left out)
    registered on its Faust app (agents, timers, views).

    The bench's fold-only worker runs `("config", "fold")`. The context role's recaps stage
    reads its summaries stage.
    """
    stages = ROLE_STAGES[role] if stages is None else stages
    unknown = set(stages) - set(ROLE_STAGES[role])
    if unknown:
        raise ValueError(
            f"unknown stages {sorted(unknown)} for the {role} role; "
            f"known: {list(ROLE_STAGES[role])}"
        )
    if "recaps" in stages and "summaries" not in stages:
        raise ValueError("the recaps stage reads the summaries stage: include it")
    runtime = Runtime(settings, projections, broker=broker, role=role)
    if "config" in stages:
        config.install(runtime, dead_letters=role == "fold")
    _track_messages_metadata(runtime)
    _checkpointed(runtime)
    if role == "context":
        return _context_role(runtime, stages)
    if "http" in stages and "fold" not in stages:
        raise ValueError("the http stage's views read what the fold stage takes: include it")
    # The views' recent messages, handed over by the fold as it takes them.
    window = recent.install(runtime) if "http" in stages else None
    folder = expiring = None
    if "fold" in stages:
        # The fold's timers, each a stage of its own over what the fold holds.
        expiring = expiry.install(runtime)
        readers = [window.on_record] if window is not None else []
        folder = fold.install(runtime, watchers=[expiring.on_folded], readers=readers)
        stalls.install(runtime)
    if "shadow" in stages:
        shadow.install(runtime)
    views = None
    if window is not None:
        views = latest.install(runtime)
        http.install(runtime, views, window)
        agent_api.install(runtime)  # the agents' own views (send, messages, events)
    return Worker(runtime, folder, None, None, expiry=expiring, views=views, window=window)


def _context_role(runtime: Runtime, stages: Collection[Stage]) -> Worker:
    summariser = recapper = None
    readers: list[feed.Reader] = []
    if "summaries" in stages:
        summariser = summaries.install(runtime)
        readers.append(summariser.on_message)
    if summariser is not None and "recaps" in stages:
        recapper = recaps.install(runtime, summariser.narrative)
        readers.append(recapper.on_message)
    fed = feed.install(runtime, readers) if readers else None
    if "http" in stages:
        http.install_context(runtime)
    return Worker(runtime, None, summariser, recapper, fed)


def _checkpointed(runtime: Runtime) -> None:
    """Checkpoint the role's state when it is due (`Checkpoint.due`: every
    CHORUS_CHECKPOINT_MS, or sooner at the memory bound or while partitions are revoked).
    As the app stops, `ChorusApp` checkpoints what is held before the consumer stops."""
    checkpoint = runtime.checkpoint
    writing: set[asyncio.Task[int]] = set()

    async def checkpoint_when_due(_: object) -> None:
        # The tick starts a checkpoint and returns: the checkpoint awaits the broker and
        # gives the event loop back between its slices, never holding the timer meanwhile
        # (`chorus_checkpoint_seconds` says what each took).
        if not writing and checkpoint.due(time.monotonic()):
            task = asyncio.ensure_future(checkpoint.checkpoint())
            writing.add(task)
            task.add_done_callback(writing.discard)

    every(
        runtime.app,
        runtime.meter,
        CHECKPOINT_TICK_SECONDS,
        "checkpoint",
        checkpoint_when_due,
        while_moving=True,  # what is held must be written while partitions are revoked
    )


def _track_messages_metadata(runtime: Runtime) -> None:
    @runtime.app.task
    async def track_messages_metadata() -> None:
        # Routed views hash channels with the producer's metadata, and the producer never
        # sends to chorus.messages: make it track that topic so it stays in its metadata.
        producer = runtime.app.producer._ensure_producer()
        await producer.partitions_for(runtime.messages.get_topic_name())
