"""What Faust itself costs per message: the floor under chorus's fold stage.

A Faust app configured like chorus's (streams/app.py: same broker options, rocksdb store,
acks=-1, raw serialisers) with one agent on the messages topic that does, per record:
  read   — nothing but one tiny record to the output topic (the measurement's marker);
  send   — two records of the size of chorus's driver events to the output topic;
  table  — that, plus two table reads and two table writes of a fold-sized value, as the
           fold stage does (changelogged).
No validation and no projection: the gap from `table` to chorus's fold stage is chorus's own
code (validation, projections, pydantic), the rest is the framework's.

    python -m bench.faust_floor --mode table --output TOPIC
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

import faust

from streams.ops.topics import create_topics
from streams.settings import Settings
from streams.worker.runtime import RAW

EVENT_BYTES = 2500
STATE = {"note": "x" * 2000, "offset": 0}


def build(settings: Settings, mode: str, output: str) -> faust.App:
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{server}" for server in (settings.bootstrap_servers or "").split(",")],
        store=settings.store,
        datadir=str(settings.data_dir),
        topic_partitions=settings.partitions,
        topic_allow_declare=True,
        web_enabled=False,
        producer_acks=-1,
        consumer_auto_offset_reset="earliest",
        table_standby_replicas=0,
        key_serializer="raw",
        value_serializer="raw",
    )
    messages = app.topic(settings.topic("messages"), **RAW)
    out = app.topic(output, **RAW)
    tables = [app.Table(f"floor-{i}", partitions=settings.partitions) for i in range(2)]
    payload = b"e" * EVENT_BYTES

    @app.agent(messages, name="floor")
    async def floor(stream: Any) -> None:
        async for event in stream.events():
            key = event.key
            if mode == "read":
                await out.send(key=key, value=b"1", partition=event.message.partition)
                continue
            if mode == "table":
                channel = key.decode()
                for table in tables:
                    current = table.get(channel) or STATE
                    table[channel] = {**current, "offset": event.message.offset}
            for _ in range(2):
                await out.send(key=key, value=payload, partition=event.message.partition)

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("read", "send", "table"), required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--loglevel", default="warning")
    args = parser.parse_args()
    settings = Settings()
    asyncio.run(create_topics(settings))
    asyncio.set_event_loop(asyncio.new_event_loop())
    app = build(settings, args.mode, args.output)
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    worker = faust.Worker(app, loglevel=args.loglevel, quiet=True)
    worker.spinner = None  # see bench/fold_worker.py
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
