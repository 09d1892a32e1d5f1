"""The config stage, in both roles: the compacted `chorus.channel-config` topic folded into
the config table.

Every other stage reads it through `streams.worker.configs.ChannelConfigs`; a record that is
not a valid config goes to the dead letters with the reason.
"""

from __future__ import annotations

from typing import Any

from streams.dead_letters import dead_letter_for
from streams.worker.configs import parse_config
from streams.worker.runtime import Runtime


def install(chorus: Runtime, dead_letters: bool = True) -> None:
    """`dead_letters`: whether this role dead-letters an invalid config (the fold role does;
    the context role reads the same topic and skips it, so each gets one dead letter)."""

    @chorus.app.agent(chorus.channel_config_topic, name="channel-config")
    async def fold_config(stream: Any) -> None:
        async for event in stream.events():
            try:
                config = parse_config(event.value)
            except ValueError as error:
                if not dead_letters:
                    continue
                letter = dead_letter_for(
                    f"invalid channel config: {error}",
                    "config",
                    topic=chorus.channel_config_topic.get_topic_name(),
                    partition=event.message.partition,
                    offset=event.message.offset,
                    key=event.key,
                    value=event.value,
                )
                await chorus.dead_letters.send(key=event.key, value=letter.to_bytes())
                continue
            chorus.configs.put(config)
