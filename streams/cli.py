"""The `chorus` command line."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TextIO, TypeVar

import click
import orjson

from projections.model import ActorType, MessageError, MessageType
from streams.kafka import NoBrokerError, local_run_dir
from streams.records import RECORDS_BY_TOPIC
from streams.settings import get_settings

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    try:
        return asyncio.run(coroutine)
    except NoBrokerError as error:
        raise click.ClickException(str(error)) from None


def print_json(value: Any, out: TextIO = sys.stdout) -> None:
    out.write(orjson.dumps(value).decode() + "\n")
    out.flush()


@click.group()
def main() -> None:
    """chorus: always-current context for multi-agent channels, on Kafka and Faust."""


# --- broker -----------------------------------------------------------------------------------


@main.group()
def broker() -> None:
    """The embedded local Kafka broker (KRaft, jars from Maven Central)."""


@broker.command("start")
@click.option("--nodes", default=1, show_default=True, help="KRaft nodes on this machine.")
@click.option("--port", type=int, default=None, help="Broker port (default CHORUS_BROKER_PORT).")
def broker_start(nodes: int, port: int | None) -> None:
    """Start the local broker (or cluster) and print its bootstrap address."""
    from streams.broker import BrokerError, start_cluster

    settings = get_settings()
    if settings.bootstrap_servers:
        click.echo(f"CHORUS_BOOTSTRAP_SERVERS is set; using {settings.bootstrap_servers}")
        return
    try:
        cluster = start_cluster(
            home=settings.broker_home,
            run_dir=local_run_dir(settings),
            nodes=nodes,
            base_port=port or settings.broker_port,
            kafka_version=settings.kafka_version,
            timeout=settings.broker_start_timeout,
        )
    except BrokerError as error:
        raise click.ClickException(str(error)) from None
    click.echo(cluster.bootstrap_servers)


@broker.command("stop")
def broker_stop() -> None:
    """Stop the local broker started by `chorus broker start`."""
    from streams.broker import stop_cluster

    stopped = stop_cluster(local_run_dir(get_settings()))
    click.echo("stopped" if stopped else "no local broker was running")


@broker.command("status")
def broker_status() -> None:
    """Show the local broker's nodes; exit 1 when none is running."""
    from streams.broker import cluster_status

    cluster = cluster_status(local_run_dir(get_settings()))
    if cluster is None:
        click.echo("no local broker running")
        sys.exit(1)
    click.echo(f"bootstrap {cluster.bootstrap_servers}")
    for node in cluster.nodes:
        click.echo(f"node {node.node_id} port {node.port} pid {node.pid} log {node.log_file}")


# --- topics and schema ------------------------------------------------------------------------


@main.group()
def topics() -> None:
    """chorus's Kafka topics."""


@topics.command("create")
def topics_create() -> None:
    """Create the chorus topics with their configs (idempotent)."""
    from streams.topics import create_topics, topic_specs

    settings = get_settings()
    created = run(create_topics(settings))
    for spec in topic_specs(settings):
        state = "created" if spec.name in created else "exists"
        click.echo(f"{spec.name}\t{state}\tpartitions={spec.partitions}\t{spec.config}")


@main.command()
def schema() -> None:
    """Print the JSON Schema of the record on every chorus topic."""
    settings = get_settings()
    print_json(
        {
            settings.topic(name): model.model_json_schema()
            for name, model in RECORDS_BY_TOPIC.items()
        }
    )


# --- produce and consume ----------------------------------------------------------------------


def _report_delivered(delivered: list[Any]) -> None:
    for item in delivered:
        click.echo(
            f"{item.message.channel}\t{item.message.id}\tpartition={item.partition}"
            f"\toffset={item.offset}"
        )


@main.command()
@click.option("--file", "source", type=click.File("r"), help="JSON lines ('-' for stdin).")
@click.option("--channel")
@click.option("--sender")
@click.option("--type", "type_", type=click.Choice([t.value for t in MessageType]))
@click.option("--content")
@click.option("--actor-type", type=click.Choice([a.value for a in ActorType]), default="AGENT")
@click.option("--correlation-id")
@click.option("--in-reply-to")
@click.option("--target")
@click.option("--topic", default="general")
def produce(
    source: TextIO | None,
    channel: str | None,
    sender: str | None,
    type_: str | None,
    content: str | None,
    actor_type: str,
    correlation_id: str | None,
    in_reply_to: str | None,
    target: str | None,
    topic: str,
) -> None:
    """Send one message from flags, or JSON lines from --file. Exit 2 if any line was bad."""
    from streams.produce import parse_json_lines, prepare, send_messages

    settings = get_settings()
    if source is not None:
        messages, errors = parse_json_lines(source)
    else:
        if not (channel and sender and type_):
            raise click.UsageError("give --file, or --channel, --sender and --type")
        record = {
            "channel": channel,
            "sender": sender,
            "type": type_,
            "content": content,
            "actor_type": actor_type,
            "correlation_id": correlation_id,
            "in_reply_to": in_reply_to,
            "target": target,
            "topic": topic,
        }
        try:
            messages, errors = [prepare(record)], []
        except MessageError as error:
            raise click.ClickException(f"invalid message: {error.reason}") from None
    for line_error in errors:
        click.echo(f"error: {line_error}", err=True)
    if messages:
        _report_delivered(run(send_messages(settings, messages)))
    if errors:
        sys.exit(2)


@main.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True)
@click.option("--channel", "channels", multiple=True, help="Only these channel keys.")
@click.option("--follow", is_flag=True, help="Keep reading new records.")
def consume(topic: str, from_beginning: bool, channels: tuple[str, ...], follow: bool) -> None:
    """Print a topic's records as JSON lines (TOPIC may omit the chorus. prefix)."""
    from streams.consume import read_topic

    settings = get_settings()
    name = topic if "." in topic else settings.topic(topic)

    async def dump() -> None:
        async for record in read_topic(
            settings, name, from_beginning=from_beginning, channels=channels, follow=follow
        ):
            print_json(record.as_json())

    try:
        run(dump())
    except LookupError as error:
        raise click.ClickException(str(error)) from None
    except KeyboardInterrupt:
        pass


# --- worker and state -------------------------------------------------------------------------


@main.command()
@click.option("--loglevel", default="info", show_default=True)
def worker(loglevel: str) -> None:
    """Run a Faust worker: fold channels, summarise, recap, serve the HTTP API."""
    from streams.worker import run_worker

    try:
        run_worker(get_settings(), loglevel)
    except NoBrokerError as error:
        raise click.ClickException(str(error)) from None


def worker_get(path: str) -> Any:
    """GET a worker view; the worker routes per-channel requests to the owner."""
    import httpx

    settings = get_settings()
    headers = {}
    if settings.api_token:
        headers["Authorization"] = f"Bearer {settings.api_token.get_secret_value()}"
    url = f"http://{settings.web_host}:{settings.web_port}{path}"
    try:
        response = httpx.get(url, headers=headers, timeout=10.0)
    except httpx.HTTPError as error:
        raise click.ClickException(
            f"cannot reach the worker at {url} ({type(error).__name__}); "
            "is `chorus worker` running?"
        ) from None
    if response.status_code >= 400:
        raise click.ClickException(f"{response.status_code}: {response.text}")
    return response.json()


@main.command()
@click.argument("channel")
def state(channel: str) -> None:
    """Print a channel's projection states (from the worker that owns it)."""
    print_json(worker_get(f"/channels/{channel}/state"))


@main.command()
def channels() -> None:
    """List the channels the worker has folded."""
    for name in worker_get("/channels")["channels"]:
        click.echo(name)


if __name__ == "__main__":
    main()
