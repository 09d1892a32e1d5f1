"""The config stage, in both roles: the compacted `chorus.channel-config` topic folded into
the config table.

Every other stage reads it through `streams.worker.configs.ChannelConfigs`, and is told of
a channel whose config changed (`ChannelConfigs.listeners`); a record that is not a valid
config goes to the dead letters with the reason.
"""

from __future__ import annotations

from typing import Any

from streams.worker.configs import parse_config
from streams.worker.runtime import Runtime


def install(chorus: Runtime, dead_letters: bool = True) -> None:
    """`dead_letters`: whether this role dead-letters an invalid config (the fold role does;
    the context role reads the same topic and skips it, so each gets one dead letter)."""

    @chorus.app.agent(chorus.channel_config_topic, name="channel-config")
    async def fold_config(stream: Any) -> None:
        checkpoint = chorus.checkpoint
        async for event in stream.events():
            try:
                config = parse_config(event.value)
            except ValueError as error:
                if not dead_letters:
                    continue
                await chorus.gate.dead_letter(
                    f"invalid channel config: {error}",
                    "config",
                    event.key,
                    event.value,
                    event.message.partition,
                    event.message.offset,
                    topic=chorus.channel_config_topic.get_topic_name(),
                )
                continue
            # What the stages derive from it (a deadline moved sooner) is checkpointed
            # before the config record is committed.
            async with checkpoint.between_batches():
                checkpoint.hold(event.message)
                chorus.configs.put(config)
