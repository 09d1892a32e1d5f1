"""The same per-channel fold as chorus's fold stage, written with Quix Streams.

Runs in its own virtualenv (.venv-quix at the repository root; quixstreams caps pydantic
below 2.14) with the repository root on PYTHONPATH, so it folds with chorus's own pure
code: the record is validated (`streams.records.validate_record`), every registered projection steps
(`projections.channel.step`), the channel's termination decision is taken (`decide`), the
new folds are stored in Quix's per-key RocksDB state (changelogged, at-least-once) and one
driver event per message (`streams.records.driver_event`, the same v3 JSON) goes to the
output topic, keyed by channel. Invalid records go to the dead-letter topic like chorus's.

    python -m bench.quix_peer.peer --bootstrap HOST:PORT --input T --output T2 --group G
        --dead-letters T3 --state-dir DIR --partitions N
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from quixstreams import Application, message_context

from projections.channel import decide, step
from projections.model import MessageError
from projections.projection import Folded
from projections.termination import decision_to_json, parse_conditions
from streams.records import driver_event, validate_record
from streams.registry import registered_projections

MAX_MESSAGE_BYTES = 1024 * 1024


def build(args: argparse.Namespace) -> tuple[Application, Any]:
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee="at-least-once",
        state_dir=args.state_dir,
        loglevel="WARNING",
    )
    source = app.topic(args.input, key_deserializer="bytes", value_deserializer="bytes")
    output = app.topic(args.output, key_serializer="bytes", value_serializer="bytes")
    dead_letters = app.topic(args.dead_letters, key_serializer="bytes", value_serializer="bytes")
    projections = registered_projections([])
    conditions = parse_conditions([])  # no channel-config in the bench: the default condition

    def fold(value: bytes, key: bytes, timestamp: int, headers: Any, state: Any) -> list[Any]:
        context = message_context()
        partition, offset = context.partition, context.offset
        try:
            message = validate_record(
                key, value, MAX_MESSAGE_BYTES, partition=partition, partitions=args.partitions
            )
        except MessageError as error:
            return [{"dead_letter": error.reason}]
        stored = {}
        for projection in projections:
            raw = state.get(projection.name)
            stored[projection.name] = Folded.model_validate(raw) if raw is not None else None
        steps = step(projections, stored, message, offset)
        decision = decision_to_json(decide(conditions, steps))
        for done in steps:
            if done.applied:
                state.set(done.projection.name, done.folded.model_dump(mode="json"))
        return [driver_event(message, partition, offset, steps, decision).to_bytes()]

    sdf = app.dataframe(source)
    sdf = sdf.apply(fold, stateful=True, metadata=True, expand=True)
    errors = sdf.filter(lambda value: isinstance(value, dict))
    errors.apply(lambda value: value["dead_letter"].encode()).to_topic(dead_letters)
    sdf = sdf.filter(lambda value: isinstance(value, bytes))
    # Quix stamps output records with the input's timestamp; stamp them with the time they
    # were folded instead, as chorus's producer does, so both are measured the same way.
    sdf = sdf.set_timestamp(lambda value, key, timestamp, headers: int(time.time() * 1000))
    sdf.to_topic(output)
    return app, sdf


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--dead-letters", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--partitions", type=int, required=True, help="of the input topic")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    app, sdf = build(args)
    app.run(sdf)


if __name__ == "__main__":
    main()
