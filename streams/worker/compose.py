"""The composition root: the one place that imports the stages and wires them together.

The worker runs in two roles, each a Faust app with its own consumer group, so the fold
never waits for text work and each role scales on its own (`chorus worker` starts both as
child processes and supervises them, `streams.worker.supervise`):

  fold role (app id CHORUS_APP_ID, the public HTTP API on CHORUS_WEB_PORT)
  chorus.channel-config ─► config: the config table (read by every stage)
  chorus.messages ─► fold: validate once, fold ─► fold tables ─► chorus.driver-events
                        └────────────────────────────────────────► chorus.dead-letters
  shadow: re-folds a sample of channels from the log now and then (off by default)
  http: the views over the read model (`streams.worker.read_model`); summaries, recaps and
  recent messages are the context role's: the views ask it (`streams.worker.context_source`)

  context role (app id CHORUS_APP_ID-context, its web server on CHORUS_WEB_PORT + 1:
  readiness, and the summary and recap views the fold role's views read)
  chorus.channel-config ─► config
  chorus.messages ─► feed: validate ─► summaries: pending batch ─► task ─► chorus.summaries
                                 │        a message that may change commitments ─► the
                                 │        state part again in 2 s, once the fold folded it
                                 └──► recaps: phase + deadline ─► timer ─► chorus.recaps
  chorus.summaries / chorus.recaps ─► their tables (what the next batch builds on)
  commitments at generation time: GET /channels/{c}/state of the fold role
  (`streams.worker.fold_state`; unreachable: logged once, retried at the next check)

Stages share the `Runtime` and reach each other only through what `build_worker` hands
them here (the followers of the feed, the summaries the recaps and the views read).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from projections.projection import ChannelProjection
from streams.settings import Settings
from streams.worker import http
from streams.worker.context_source import ContextSource
from streams.worker.fold_state import FoldState, RemoteFoldState
from streams.worker.runtime import Role, Runtime
from streams.worker.stages import config, feed, fold, recaps, shadow, summaries
from streams.worker.stages.feed import Feed

# How often the checkpoint timer looks whether a checkpoint is due.
CHECKPOINT_TICK_SECONDS = 0.1

Stage = Literal["config", "fold", "summaries", "recaps", "shadow", "http"]
# Per role, the stages it runs by default and those it may run. The fold role's views read
# summaries and recaps from the context role, which owns them.
ROLE_STAGES: dict[Role, tuple[Stage, ...]] = {
    "fold": ("config", "fold", "shadow", "http"),
    # "http" here is readiness, this process's LLM costs and metrics, and the views of the
    # summaries and recaps that the fold role's views read.
    "context": ("config", "summaries", "recaps", "http"),
}


@dataclass(frozen=True)
class Worker:
    """A wired worker: the runtime and the stage objects (None for a stage left out).

    The `summariser` and `recapper` are the context role's; the fold role's views read what
    they own through `context_role` (`streams.worker.context_source`)."""

    runtime: Runtime
    folder: fold.Folder | None
    summariser: summaries.Summariser | None
    recapper: recaps.Recapper | None
    feed: Feed | None = None
    context_role: ContextSource | None = None


def build_worker(
    settings: Settings,
    projections: list[ChannelProjection[Any]] | None = None,
    *,
    broker: str | None = None,
    stages: Collection[Stage] | None = None,
    role: Role = "fold",
    fold_state: FoldState | None = None,
    context_source: ContextSource | None = None,
) -> Worker:
    """A worker of `role` with `stages` (the role's, `ROLE_STAGES`, when left out)
    registered on its Faust app (agents, timers, views).

    The bench's fold-only worker runs `("config", "fold")`. The context role's recaps stage
    reads its summaries stage. The context role reads folds through `fold_state` (the fold
    role's HTTP API when left out); the fold role's views read summaries and recaps through
    `context_source` (the context role's web server when left out).
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
    if role == "context":
        remote_fold = fold_state or RemoteFoldState(settings)
        if isinstance(remote_fold, RemoteFoldState):
            _closed_on_shutdown(runtime, remote_fold)
        return _context_role(runtime, stages, remote_fold)
    folder = fold.install(runtime) if "fold" in stages else None
    if folder is not None:
        _checkpointed(runtime)
    if "shadow" in stages:
        shadow.install(runtime)
    context_role = None
    if "http" in stages:
        context_role = context_source or ContextSource(settings)
        _closed_on_shutdown(runtime, context_role)
        http.install(runtime, context_role)
    return Worker(runtime, folder, None, None, context_role=context_role)


def _context_role(runtime: Runtime, stages: Collection[Stage], fold_state: FoldState) -> Worker:
    summariser = recapper = None
    followers: list[feed.Follower] = []
    if "summaries" in stages:
        summariser = summaries.install(runtime, fold_state)
        followers.append(summariser.on_message)
    if summariser is not None and "recaps" in stages:
        recapper = recaps.install(runtime, summariser.narrative, fold_state)
        followers.append(recapper.on_message)
    fed = feed.install(runtime, followers) if followers else None
    if "http" in stages:
        http.install_context(runtime, summariser, recapper)
    return Worker(runtime, None, summariser, recapper, fed)


def _closed_on_shutdown(runtime: Runtime, client: RemoteFoldState | ContextSource) -> None:
    """Close the client's HTTP session when the app stops (no unclosed-session warning)."""

    @runtime.app.on_before_shutdown.connect
    async def close_role_client(app: Any, **_: Any) -> None:
        await client.close()


def _checkpointed(runtime: Runtime) -> None:
    """Checkpoint the role's state when it is due (`Checkpoint.due`: every
    CHORUS_CHECKPOINT_MS, or sooner at the memory bound or while partitions are revoked).
    As the app stops, `ChorusApp` checkpoints what is held before the consumer stops."""
    checkpoint = runtime.checkpoint

    @runtime.app.timer(CHECKPOINT_TICK_SECONDS, name="checkpoint")
    async def checkpoint_when_due() -> None:
        if checkpoint.due(time.monotonic()):
            await checkpoint.checkpoint()


def _track_messages_metadata(runtime: Runtime) -> None:
    @runtime.app.task
    async def track_messages_metadata() -> None:
        # Routed views hash channels with the producer's metadata, and the producer never
        # sends to chorus.messages: make it track that topic so it stays in its metadata.
        producer = runtime.app.producer._ensure_producer()
        await producer.partitions_for(runtime.messages.get_topic_name())
