"""The `chorus` command line."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TextIO, TypeVar

import click
import orjson
from aiokafka.errors import KafkaError

from projections.model import ActorType, MessageError, MessageType
from streams.interfaces.cli.failures import ChorusGroup
from streams.interfaces.cli.replay import replay_command
from streams.interfaces.worker_api import WorkerApi, WorkerUnavailable, WorkerUnreachable
from streams.kafka.clients import MissingTopicError, NoBrokerError, local_run_dir
from streams.records import RECORDS_BY_TOPIC
from streams.settings import get_settings

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    try:
        return asyncio.run(coroutine)
    except (NoBrokerError, MissingTopicError) as error:
        raise click.ClickException(str(error)) from None
    except KafkaError as error:
        raise click.ClickException(kafka_failure(error)) from None


def kafka_failure(error: KafkaError) -> str:
    """One line naming where and how chorus connected; never the password."""
    settings = get_settings()
    how = settings.security_protocol + (
        f" with SASL {settings.sasl_mechanism} as {settings.sasl_username}"
        if settings.sasl_mechanism
        else ""
    )
    where = settings.bootstrap_servers or "the local broker"
    return f"Kafka error ({type(error).__name__}) talking to {where} over {how}: {error}"


def print_json(value: Any, out: TextIO = sys.stdout) -> None:
    out.write(orjson.dumps(value).decode() + "\n")
    out.flush()


@click.group(cls=ChorusGroup)
def main() -> None:
    """chorus: always-current context for multi-agent channels, on Kafka and Faust."""
    # aiokafka logs every failed connection itself; with no logging configured (any command
    # before the worker's Faust sets it up) Python would print those lines beside chorus's
    # own one-line error. Configured handlers (the worker's) still get them.
    logging.getLogger("aiokafka").addHandler(logging.NullHandler())


# --- broker -----------------------------------------------------------------------------------


@main.group()
def broker() -> None:
    """The embedded local Kafka broker (KRaft, jars from Maven Central)."""


@broker.command("start")
@click.option("--nodes", default=1, show_default=True, help="KRaft nodes on this machine.")
@click.option("--port", type=int, default=None, help="Broker port (default CHORUS_BROKER_PORT).")
def broker_start(nodes: int, port: int | None) -> None:
    """Start the local broker (or cluster) and print its bootstrap address."""
    from streams.ops.broker.cluster import BrokerError, start_cluster

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
    from streams.ops.broker.cluster import stop_cluster

    stopped = stop_cluster(local_run_dir(get_settings()))
    click.echo("stopped" if stopped else "no local broker was running")


@broker.command("status")
def broker_status() -> None:
    """Show the local broker's nodes; exit 1 when none is running."""
    from streams.ops.broker.cluster import cluster_status

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
    from streams.ops.topics import create_topics
    from streams.topology import topic_specs

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
    from streams.kafka.produce import parse_json_lines, prepare, send_messages

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
    from streams.kafka.consume import read_topic

    settings = get_settings()
    name = topic if "." in topic else settings.topic(topic)

    async def dump() -> None:
        async for record in read_topic(
            settings, name, from_beginning=from_beginning, channels=channels, follow=follow
        ):
            print_json(record.as_json())

    with contextlib.suppress(KeyboardInterrupt):
        run(dump())


# --- worker and state -------------------------------------------------------------------------


@main.command()
@click.option("--loglevel", default="info", show_default=True)
def worker(loglevel: str) -> None:
    """Run a Faust worker: fold channels, summarise, recap, serve the HTTP API."""
    from streams.worker.run import run_worker

    try:
        run_worker(get_settings(), loglevel)
    except NoBrokerError as error:
        raise click.ClickException(str(error)) from None


def ask_worker(call: Callable[[WorkerApi], Awaitable[T]]) -> T:
    async def go() -> T:
        async with WorkerApi(get_settings()) as api:
            return await call(api)

    return asyncio.run(go())


def api_call(call: Callable[[WorkerApi], Awaitable[T]]) -> T:
    try:
        return ask_worker(call)
    except WorkerUnavailable as error:
        raise click.ClickException(str(error)) from None


@main.command()
@click.argument("channel")
def state(channel: str) -> None:
    """Print a channel's projection states (from the worker that owns it)."""
    found = api_call(lambda api: api.state(channel))
    if found is None:
        raise click.ClickException(f"no messages folded for channel {channel!r}")
    print_json(found)


@main.command()
def channels() -> None:
    """List the channels the worker has folded."""
    for name in api_call(lambda api: api.channels()):
        click.echo(name)


@main.command()
def costs() -> None:
    """LLM calls, tokens and latency per purpose and model (summaries, recaps)."""
    rows = api_call(lambda api: api.costs())["llm"]
    if not rows:
        click.echo("no LLM calls yet")
    for row in rows:
        click.echo(
            f"{row['purpose']:8} {row['model']:24} calls={row['calls']} "
            f"failures={row['failures']} tokens_in={row['prompt_tokens']} "
            f"tokens_out={row['completion_tokens']} mean_latency_ms={row['mean_latency_ms']}"
        )


class ChannelFirstGroup(click.Group):
    """`chorus summary CHANNEL` shows; `chorus summary set|configure CHANNEL ...` acts."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands:
            args = ["show", *args]
        return super().resolve_command(ctx, args)


def parse_duration(text: str) -> float:
    """`30`, `30s`, `5m`, `1h` to seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a duration like 30s, 5m or 1h") from None


@main.group(cls=ChannelFirstGroup)
def summary() -> None:
    """A channel's running summary: show it, set it by hand, or configure when it updates."""


def from_worker_or_topic(
    call: Callable[[WorkerApi], Awaitable[Any]],
    topic: str,
    channel: str,
    view: Callable[[dict[str, Any] | None], Any],
) -> None:
    """Print the worker's answer; when no worker answers, the channel's latest record on the
    compacted `topic` instead. Which source answered goes to stderr (stdout stays JSON)."""
    try:
        print_json(ask_worker(call))
        click.echo("(from the worker)", err=True)
        return
    except WorkerUnreachable:
        pass
    except WorkerUnavailable as error:
        raise click.ClickException(str(error)) from None
    from streams.kafka.consume import read_topic

    settings = get_settings()
    name = settings.topic(topic)

    async def latest() -> dict[str, Any] | None:
        found = None
        async for record in read_topic(settings, name, channels=[channel]):
            found = record.value if isinstance(record.value, dict) else found
        return found

    print_json(view(run(latest())))
    click.echo(f"(from {name}; no worker answered)", err=True)


@summary.command("show")
@click.argument("channel")
def summary_show(channel: str) -> None:
    """Print the latest summary (content null when there is none yet); from chorus.summaries
    when no worker is running."""
    from streams.records import summary_view

    from_worker_or_topic(
        lambda api: api.summary(channel),
        "summaries",
        channel,
        lambda record: summary_view(channel, record),
    )


@summary.command("simulate")
@click.option(
    "--file", "source", type=click.File("r"), required=True, help="JSON lines ('-' for stdin)."
)
@click.option("--json", "as_json", is_flag=True, help="One SummaryRecord JSON object per line.")
def summary_simulate(source: TextIO, as_json: bool) -> None:
    """Summarise messages offline as the summary stage would: its batching (time from each
    message's created_at; what is pending at the end is summarised as the time threshold
    would) and the default tiers without an LLM. No Kafka. Exit 2 if any line was bad."""
    from streams.kafka.produce import parse_json_lines
    from streams.worker.stages.summaries import simulate

    messages, errors = parse_json_lines(source)
    for line_error in errors:
        click.echo(f"error: {line_error}", err=True)
    records = asyncio.run(simulate(messages, get_settings()))
    for channel, record in records.items():
        if as_json:
            click.echo(orjson.dumps(record.model_dump(mode="json")).decode())
        else:
            click.echo(f"== {channel} ({record.total_messages} messages) ==\n{record.text}\n")
    if errors:
        sys.exit(2)


@summary.command("set")
@click.argument("channel")
@click.argument("text")
@click.option("--by", default="user:cli", show_default=True)
def summary_set(channel: str, text: str, by: str) -> None:
    """Replace the summary text by hand; annotations are kept."""
    from streams.interfaces.control import set_summary

    record = run(set_summary(get_settings(), channel, text, by))
    print_json(record.model_dump(mode="json"))


@summary.command("configure")
@click.argument("channel")
@click.option("--after-messages", type=click.IntRange(min=1))
@click.option("--after-seconds", type=str, help="e.g. 300, 90s, 5m")
def summary_configure(channel: str, after_messages: int | None, after_seconds: str | None) -> None:
    """Summarise after N new messages or S seconds, whichever comes first."""
    configure(
        channel,
        summary_after_messages=after_messages,
        summary_after_seconds=parse_duration(after_seconds) if after_seconds else None,
    )


def configure(channel: str, **changes: Any) -> None:
    from pydantic import ValidationError

    from streams.interfaces.control import configure_channel

    try:
        config = run(configure_channel(get_settings(), channel, **changes))
    except (ValueError, ValidationError) as error:
        raise click.ClickException(str(error)) from None
    print_json(config.model_dump(mode="json"))


@main.group()
def channel() -> None:
    """Per-channel configuration (on the compacted chorus.channel-config topic)."""


@channel.command("configure")
@click.argument("name")
@click.option(
    "--termination",
    multiple=True,
    help="max-messages:N, all-commitments-resolved, escalate-on-decline:N (repeatable)",
)
def channel_configure(name: str, termination: tuple[str, ...]) -> None:
    """Set the termination conditions evaluated after every fold of the channel."""
    configure(name, termination=list(termination) if termination else None)


@main.group(cls=ChannelFirstGroup)
def recap() -> None:
    """Idle recaps: show a channel's recap status, or configure its debounce."""


@recap.command("show")
@click.argument("channel")
def recap_show(channel: str) -> None:
    """Print the recap phase, countdown and latest recap of a channel; from chorus.recaps
    (phase, text and the record, no countdown) when no worker is running."""
    from_worker_or_topic(
        lambda api: api.recap(channel),
        "recaps",
        channel,
        lambda record: {
            "channel": channel,
            "phase": record.get("phase") if record else "IDLE",
            "text": record.get("text") if record else None,
            "recap": record,
        },
    )


@main.command()
@click.argument("channel")
@click.option("--max-tokens", type=click.IntRange(min=0), default=1000, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The text and its parts as JSON.")
def context(channel: str, max_tokens: int, as_json: bool) -> None:
    """What an agent should read first: the channel's summary, open commitments, latest recap
    and recent messages, within --max-tokens (about 4 characters a token)."""
    found = api_call(lambda api: api.context(channel, max_tokens))
    if as_json:
        print_json(found)
        return
    click.echo(found["text"] or "(nothing in this channel yet)")
    click.echo(f"({found['tokens']} of {max_tokens} tokens)", err=True)


@recap.command("configure")
@click.argument("channel")
@click.option("--debounce", required=True, help="Quiet time before a recap, e.g. 30s or 2m.")
def recap_configure(channel: str, debounce: str) -> None:
    """Write a recap after the channel has been quiet for --debounce."""
    configure(channel, recap_debounce_seconds=parse_duration(debounce))


@main.command()
@click.argument("channels", nargs=-1)
@click.option("--refresh", default=0.5, show_default=True, help="Seconds between updates.")
@click.option("--once", is_flag=True, help="Print one frame and exit.")
def watch(channels: tuple[str, ...], refresh: float, once: bool) -> None:
    """Live status lines: model | #messages | title | tools | recap status | activity."""
    from streams.interfaces.watch import watch as run_watch

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_watch(get_settings(), channels, refresh, once))


@main.command()
@click.option("--turns", default=40, show_default=True, help="Messages to stream.")
@click.option("--rate", default=8.0, show_default=True, help="Messages per second.")
@click.option("--debounce", default="5s", show_default=True, help="Recap debounce.")
@click.option("--no-worker", is_flag=True, help="Use a worker that is already running.")
def demo(turns: int, rate: float, debounce: str, no_worker: bool) -> None:
    """Stream a real conversation and show it folding: state, summaries, the recap."""
    from streams.interfaces.demo import run_demo

    try:
        run_demo(get_settings(), turns, rate, parse_duration(debounce), worker=not no_worker)
    except (NoBrokerError, MissingTopicError, RuntimeError) as error:
        raise click.ClickException(str(error)) from None


@main.command()
def mcp() -> None:
    """Serve get_channel_summary, get_channel_state and list_channels over MCP (stdio)."""
    from streams.interfaces.mcp import build_server

    build_server(get_settings()).run("stdio")


main.add_command(replay_command)


if __name__ == "__main__":
    main()
