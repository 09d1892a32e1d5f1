"""What the replay tests share: a log of messages with junk mixed in, and what the
worker's fold leaves in its tables for the same log."""

from __future__ import annotations

from typing import Any

import orjson

from projections.channel import MAX_STATE_BYTES, step
from projections.commitments import CommitmentProjection
from projections.model import Message, MessageError, encode_message
from projections.overview import ChannelOverviewProjection
from projections.projection import Folded
from streams.records import validate_record
from streams.replay import Rec, Replayer
from tests.replay_projections import PairsProjection, TallyV1
from tests.sample_projections import WordCountProjection

MAX = 1024 * 1024
CHANNELS = ["team/alpha", "team/beta", "ops/x"]
COMMITMENTS = CommitmentProjection()
BUILTINS: list[Any] = [COMMITMENTS, ChannelOverviewProjection()]
ALL: list[Any] = [*BUILTINS, WordCountProjection(), PairsProjection(), TallyV1()]


def records_of(messages: list[Message], junk_every: int = 0) -> list[Rec]:
    """The log: each message keyed by its channel, with invalid records mixed in."""
    records: list[Rec] = []
    for message in messages:
        if junk_every and len(records) % junk_every == junk_every - 1:
            records.append(Rec(len(records), message.channel.encode(), b"{not json"))
            records.append(Rec(len(records), b"wrong/key", encode_message(message)))
        stamp = int(message.created_at.timestamp() * 1000)
        records.append(Rec(len(records), message.channel.encode(), encode_message(message), stamp))
    return records


def worker_fold(
    projections: list[Any], records: list[Rec], max_state_bytes: int = MAX_STATE_BYTES
) -> dict[str, dict[str, Folded]]:
    """What `streams.worker.stages.fold.Folder.fold` leaves in rocksdb tables: `step` per record,
    every applied fold stored as JSON and read back for the next record."""
    tables: dict[str, dict[str, bytes]] = {p.name: {} for p in projections}
    for record in records:
        try:
            message = validate_record(record.key, record.value, MAX, partition=0, partitions=1)
        except MessageError:
            continue
        channel = message.channel
        stored = {
            name: Folded.model_validate(orjson.loads(table[channel])) if channel in table else None
            for name, table in tables.items()
        }
        for done in step(
            projections, stored, message, record.offset, max_state_bytes=max_state_bytes
        ):
            if done.applied:
                tables[done.projection.name][channel] = orjson.dumps(
                    done.folded.model_dump(mode="json")
                )
    result: dict[str, dict[str, Folded]] = {}
    for name, table in tables.items():
        for channel, raw in table.items():
            result.setdefault(channel, {})[name] = Folded.model_validate(orjson.loads(raw))
    return result


def dumped(folds: dict[str, Folded]) -> dict[str, Any]:
    return {name: f.model_dump(mode="json") for name, f in folds.items()}


def replayed(replayer: Replayer) -> dict[str, dict[str, Any]]:
    return {c: dumped(replayer.folds(c)) for c in replayer.channels if replayer.folds(c)}


def folded(offset: int, state: Any, version: int = 1, name: str = "overview") -> Folded:
    return Folded(projection=name, version=version, offset=offset, state=state)
