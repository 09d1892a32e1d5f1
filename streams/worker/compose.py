"""The composition root: the one place that imports the stages and wires them together.

Data flow, one module per stage (`streams.worker.stages`):

  chorus.channel-config ─► config: the config table (read by every stage)
  chorus.messages ─► fold: validate once, fold ─► fold tables ─► chorus.driver-events
        │               └────────────────────────────────────────► chorus.dead-letters
        │          then, in the same batch, its followers:
        ├─────────► summaries: pending batch ─► task ─► chorus.summaries (compacted)
        └─────────► recaps: phase + deadline ─► timer ─► chorus.recaps (compacted)
  chorus.summaries / chorus.recaps ─► their stage's table (tables change only from the log)
  shadow: re-folds a sample of channels from the log now and then (off by default)
  http: the worker's views over the read model (`streams.worker.read_model`)

Stages share the `Runtime` and reach each other only through what `build_worker` hands
them here (the fold stage's followers, the summaries the recap and HTTP stages read).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from projections.projection import ChannelProjection
from streams.settings import Settings
from streams.worker import http
from streams.worker.runtime import Runtime
from streams.worker.stages import config, fold, recaps, shadow, summaries

Stage = Literal["config", "fold", "summaries", "recaps", "shadow", "http"]
EVERY_STAGE: tuple[Stage, ...] = ("config", "fold", "summaries", "recaps", "shadow", "http")


@dataclass(frozen=True)
class Worker:
    """A wired worker: the runtime and the stage objects (None for a stage left out)."""

    runtime: Runtime
    folder: fold.Folder | None
    summariser: summaries.Summariser | None
    recapper: recaps.Recapper | None


def build_worker(
    settings: Settings,
    projections: list[ChannelProjection[Any]] | None = None,
    *,
    broker: str | None = None,
    stages: Collection[Stage] = EVERY_STAGE,
) -> Worker:
    """A worker with `stages` registered on its Faust app (agents, timers, views).

    The worker runs every stage; the bench's fold-only worker runs `("config", "fold")`.
    The summaries stage is needed by the recaps and HTTP stages.
    """
    unknown = set(stages) - set(EVERY_STAGE)
    if unknown:
        raise ValueError(f"unknown stages {sorted(unknown)}; known: {list(EVERY_STAGE)}")
    if "recaps" in stages and "summaries" not in stages:
        raise ValueError("the recaps stage reads the summaries stage: include it")
    if "http" in stages and not {"summaries", "recaps"} <= set(stages):
        raise ValueError("the http stage serves summaries and recaps: include both")
    runtime = Runtime(settings, projections, broker=broker)
    if "config" in stages:
        config.install(runtime)
    _track_messages_metadata(runtime)
    followers: list[fold.Follower] = []
    summariser = recapper = None
    if "summaries" in stages:
        summariser = summaries.install(runtime)
        followers.append(summariser.on_message)
    if summariser is not None and "recaps" in stages:
        recapper = recaps.install(runtime, summariser.narrative)
        followers.append(recapper.on_message)
    folder = fold.install(runtime, followers=followers) if "fold" in stages else None
    if "shadow" in stages:
        shadow.install(runtime)
    if summariser is not None and recapper is not None and "http" in stages:
        http.install(runtime, summariser, recapper)
    return Worker(runtime, folder, summariser, recapper)


def _track_messages_metadata(runtime: Runtime) -> None:
    @runtime.app.task
    async def track_messages_metadata() -> None:
        # Routed views hash channels with the producer's metadata, and the producer never
        # sends to chorus.messages: make it track that topic so it stays in its metadata.
        producer = runtime.app.producer._ensure_producer()
        await producer.partitions_for(runtime.messages.get_topic_name())
