"""What chorus's topics and tables are called and how they are configured.

The names and specs only; `streams.ops.topics` creates them. Faust declares only its
internal topics (changelogs), so the public ones are created by `chorus topics create` and
by the worker on start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from projections.projection import ChannelProjection
from streams.settings import Settings

MESSAGES = "messages"
SUMMARIES = "summaries"
RECAPS = "recaps"
CHANNEL_CONFIG = "channel-config"
DRIVER_EVENTS = "driver-events"
DEAD_LETTERS = "dead-letters"
# The compacted topic where `chorus replay --rebuild` records a new projection version's
# progress, read by a rebuild that resumes (streams.replay.tables).
REBUILDS = "rebuilds"

# The worker's two roles, each a Faust app with its own consumer group (`streams.worker`).
Role = Literal["fold", "context"]
ROLES: tuple[Role, ...] = ("fold", "context")
# The context role's group, versioned by the form of its stored state: a new version is a
# new group, which reads the log and its own outputs afresh (docs/operators.md, "Upgrading").
# v3: the deadline index (`deadlines`) and the latest summary's position in the channel
# state, no longer a follower's memory.
CONTEXT_GROUP = "context-v3"

# Each role's tables besides the fold role's one per projection (`fold_table_name`): the
# channel configs, the next offset to apply per partition, the time-ordered index of what
# falls due (`streams.worker.deadlines`), and the fold role's positions of each channel's
# latest summary and recap, or the context role's per-channel state.
CONFIG_TABLE = "channel-config"
POSITIONS_TABLE: dict[Role, str] = {"fold": "fold-positions", "context": "context-positions"}
DEADLINES_TABLE = "deadlines"
LATEST_TABLE = "latest"
CHANNEL_STATE_TABLE = "channel-state"
ROLE_TABLES: dict[Role, tuple[str, ...]] = {
    "fold": (CONFIG_TABLE, POSITIONS_TABLE["fold"], DEADLINES_TABLE, LATEST_TABLE),
    "context": (CONFIG_TABLE, POSITIONS_TABLE["context"], DEADLINES_TABLE, CHANNEL_STATE_TABLE),
}


def role_app_id(settings: Settings, role: Role) -> str:
    """The role's Faust app id (its consumer group, the prefix of its changelogs): the fold
    role keeps CHORUS_APP_ID, so the fold tables' changelogs of earlier versions stay valid."""
    return settings.app_id if role == "fold" else f"{settings.app_id}-{CONTEXT_GROUP}"


def role_table_names(role: Role, projections: Sequence[ChannelProjection[Any]]) -> list[str]:
    """Every table of `role`: the fold role's fold tables, then the role's own."""
    folds = [fold_table_name(p) for p in projections] if role == "fold" else []
    return [*folds, *ROLE_TABLES[role]]


def role_changelogs(
    settings: Settings, role: Role, projections: Sequence[ChannelProjection[Any]]
) -> list[str]:
    """The changelog topics of `role`'s tables (Faust's `<app id>-<table>-changelog`),
    derived without building the role."""
    app_id = role_app_id(settings, role)
    return [changelog_of(app_id, table) for table in role_table_names(role, projections)]


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """Messages, summaries, recaps, config and driver events share one partition count:
    they are co-partitioned by the channel key, so one worker owns a channel everywhere."""
    p, rf = settings.partitions, settings.replication_factor
    message_bytes = str(settings.topic_max_message_bytes)
    compact = compacted_config(settings)
    return [
        TopicSpec(
            settings.topic(MESSAGES),
            p,
            rf,
            {"cleanup.policy": "delete", "retention.ms": "-1", "max.message.bytes": message_bytes},
        ),
        TopicSpec(settings.topic(SUMMARIES), p, rf, compact),
        TopicSpec(settings.topic(RECAPS), p, rf, compact),
        TopicSpec(settings.topic(CHANNEL_CONFIG), p, rf, compact),
        TopicSpec(
            settings.topic(DRIVER_EVENTS),
            p,
            rf,
            {
                "cleanup.policy": "delete",
                "retention.ms": str(settings.driver_events_retention_ms),
                "max.message.bytes": message_bytes,
            },
        ),
        TopicSpec(
            settings.topic(DEAD_LETTERS),
            p,
            rf,
            {"cleanup.policy": "delete", "retention.ms": "-1", "max.message.bytes": message_bytes},
        ),
    ]


def changelog_config(settings: Settings) -> dict[str, str]:
    """What a compacted topic or table changelog needs beyond Kafka's defaults: room for a
    record as large as a message, like every chorus topic, and segments small enough that
    the cleaner compacts the history a restore reads (see `Settings.compacted_segment_bytes`
    and `compacted_segment_ms`)."""
    return {
        "max.message.bytes": str(settings.topic_max_message_bytes),
        "segment.bytes": str(settings.compacted_segment_bytes),
        "segment.ms": str(settings.compacted_segment_ms),
    }


def compacted_config(settings: Settings) -> dict[str, str]:
    """A compacted chorus topic's config, as Faust creates a table changelog."""
    return {"cleanup.policy": "compact", **changelog_config(settings)}


def changelog_specs(settings: Settings, names: Sequence[str]) -> list[TopicSpec]:
    """The worker's table changelogs, as Faust creates them (compacted, co-partitioned)."""
    return [
        TopicSpec(
            name,
            settings.partitions,
            settings.replication_factor,
            compacted_config(settings),
        )
        for name in names
    ]


def fold_table_name(projection: ChannelProjection[Any]) -> str:
    """Versioned, so a new projection version folds into a table of its own."""
    return f"fold-{projection.name}-v{projection.version}"


# The suffixes of the second tables of version 2's split folds (`streams.fold_store`): the
# commitments' `-ended`, the others' `-parts`. Folds are stored whole since version 3, so
# no worker writes them; `chorus replay --drop-old` finds their changelogs by these.
SPLIT_FOLD_TABLE_SUFFIXES = ("-ended", "-parts")


def changelog_of(app_id: str, table: str) -> str:
    """The changelog Faust keeps for `table` of app `app_id`."""
    return f"{app_id}-{table}-changelog"


def changelog_name(settings: Settings, table: str) -> str:
    """The changelog Faust keeps for the fold role's `table`."""
    return changelog_of(settings.app_id, table)
