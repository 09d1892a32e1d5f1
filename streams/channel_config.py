"""Per-channel configuration: the compacted `chorus.channel-config` topic folded into a table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from projections.model import describe_validation_error
from projections.termination import parse_conditions
from streams.folding import dead_letter_for
from streams.records import ChannelConfig

if TYPE_CHECKING:
    from streams.app import Chorus


def parse_config(value: bytes | None) -> ChannelConfig:
    """A config record, with its termination specs checked, or ValueError with the reason."""
    if value is None:
        raise ValueError("config record value is null")
    try:
        config = ChannelConfig.model_validate_json(value)
    except ValidationError as error:
        raise ValueError(describe_validation_error(error)) from None
    parse_conditions(config.termination)
    return config


def install(chorus: Chorus) -> None:
    @chorus.app.agent(chorus.channel_config_topic, name="channel-config")
    async def fold_config(stream: Any) -> None:
        async for event in stream.events():
            try:
                config = parse_config(event.value)
            except ValueError as error:
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
            chorus.channel_config[config.channel] = config.model_dump(mode="json")
