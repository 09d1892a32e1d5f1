"""The `chorus` command line."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import click
import orjson
from aiokafka.errors import KafkaError

from projections.context import DEFAULT_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS, budget_refusal
from projections.model import ActorType, MessageError, MessageType, utc_now
from streams.interfaces.cli.failures import ChorusGroup
from streams.interfaces.cli.replay import replay_command
from streams.interfaces.worker_api import ChannelRefused, WorkerApi, WorkerUnavailable
from streams.kafka.clients import MissingTopicError, NoBrokerError, local_run_dir
from streams.settings import get_settings

if TYPE_CHECKING:
    from streams.interfaces.control import LatestView
    from streams.kafka.produce import SentMessage

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
    from streams.ops.broker import BrokerError, start_cluster

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
    from streams.ops.broker import stop_cluster

    stopped = stop_cluster(local_run_dir(get_settings()))
    click.echo("stopped" if stopped else "no local broker was running")


@broker.command("status")
def broker_status() -> None:
    """Show the local broker's nodes; exit 1 when none is running."""
    from streams.ops.broker import cluster_status

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
    """Create the chorus topics with their configs (idempotent); say what each is."""
    from streams.interfaces.cli.show import topic_line
    from streams.ops.topics import create_topics
    from streams.topology import topic_specs

    settings = get_settings()
    created = run(create_topics(settings))
    for spec in topic_specs(settings):
        click.echo(topic_line(spec, spec.name in created))


@main.command()
def schema() -> None:
    """Print the JSON Schema of the record on every chorus topic."""
    from pydantic import BaseModel

    from projections.model import Message
    from streams.records import ChannelConfig, DeadLetter, DriverEvent, RecapRecord, SummaryRecord
    from streams.topology import (
        CHANNEL_CONFIG,
        DEAD_LETTERS,
        DRIVER_EVENTS,
        MESSAGES,
        RECAPS,
        SUMMARIES,
    )

    records: dict[str, type[BaseModel]] = {
        MESSAGES: Message,
        DRIVER_EVENTS: DriverEvent,
        DEAD_LETTERS: DeadLetter,
        CHANNEL_CONFIG: ChannelConfig,
        SUMMARIES: SummaryRecord,
        RECAPS: RecapRecord,
    }
    settings = get_settings()
    print_json({settings.topic(name): model.model_json_schema() for name, model in records.items()})


# --- produce and consume ----------------------------------------------------------------------


def parse_deadline(_: click.Context, __: click.Parameter, text: str | None) -> datetime | None:
    """An ISO 8601 time (no zone: UTC), or a delay from now such as 90, 30s, 5m or 1h."""
    if text is None:
        return None
    if text[:1].isdigit() and (text[-1:] in "smh" or text.replace(".", "", 1).isdigit()):
        delay = parse_duration(text)
        if delay <= 0:
            raise click.BadParameter(f"{text!r}: a delay must be more than 0 seconds")
        return utc_now() + timedelta(seconds=delay)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither an ISO time (2026-05-01T12:00:00Z) nor a delay like 30s, 5m"
        ) from None


def parse_payload(_: click.Context, __: click.Parameter, text: str | None) -> Any:
    if text is None:
        return None
    try:
        payload = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise click.BadParameter(f"not valid JSON: {error}") from None
    if not isinstance(payload, dict):
        raise click.BadParameter(f"must be a JSON object, got {type(payload).__name__}")
    return payload


def _report_sent(sent: list[SentMessage], as_json: bool) -> None:
    for item in sent:
        if as_json:
            where = {
                "channel": item.channel,
                "id": item.id,
                "correlation_id": item.correlation_id,
                "partition": item.partition,
                "offset": item.offset,
            }
            click.echo(orjson.dumps(where).decode())
        else:
            click.echo(
                f"{item.channel}\t{item.id}\tcorrelation_id={item.correlation_id or '-'}"
                f"\tpartition={item.partition}\toffset={item.offset}"
            )


@main.command()
@click.option(
    "--file",
    "source",
    type=click.File("r"),
    help="JSON lines ('-' for stdin), one message each; no message flags beside it.",
)
@click.option("--channel", help="e.g. team/plan: lowercase kebab-case segments.")
@click.option("--sender", help="Who sends it (an agent's or a person's name).")
@click.option(
    "--type",
    "type_",
    type=click.Choice([t.value for t in MessageType], case_sensitive=False),
    help="Message type, in any case.",
)
@click.option("--content", help="The text (none for EVENT).")
@click.option(
    "--actor-type",
    type=click.Choice([a.value for a in ActorType], case_sensitive=False),
    help="Who sends it, in any case (default AGENT).",
)
@click.option("--correlation-id", help="Generated for QUERY, COMMAND and PROPOSE when omitted.")
@click.option("--in-reply-to", help="Id of the message this one answers.")
@click.option("--target", help="instance:<id>, capability:<tag> or role:<name>.")
@click.option("--topic", help="Topic within the channel (default general).")
@click.option(
    "--deadline",
    help="When the request is due: an ISO time (no zone: UTC) or a delay from now of more "
    "than 0, such as 30s, 5m or 1h.",
    callback=parse_deadline,
)
@click.option("--payload", help="Structured data: a JSON object.", callback=parse_payload)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message sent.")
def produce(
    source: TextIO | None,
    as_json: bool,
    **flags: Any,
) -> None:
    """Send one message from flags, or JSON lines from --file; print each message's channel,
    id, correlation_id, partition and offset. Exit 2 if any line was bad."""
    from streams.kafka.produce import parse_json_lines, prepare, send_messages

    settings = get_settings()
    given = [name for name, value in flags.items() if value is not None]
    if source is not None:
        if given:
            options = ", ".join("--" + name.rstrip("_").replace("_", "-") for name in given)
            raise click.UsageError(
                f"{options} cannot be used with --file: each JSON line holds its own fields"
            )
        messages, errors = parse_json_lines(source)
    else:
        if not (flags["channel"] and flags["sender"] and flags["type_"]):
            raise click.UsageError("give --file, or --channel, --sender and --type")
        record = {name.rstrip("_"): value for name, value in flags.items() if value is not None}
        try:
            messages, errors = [prepare(record)], []
        except MessageError as error:
            raise click.ClickException(f"invalid message: {error.reason}") from None
    for line_error in errors:
        click.echo(f"error: {line_error}", err=True)
    if messages:
        _report_sent(run(send_messages(settings, messages)), as_json)
    if errors:
        sys.exit(2)


@main.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True)
@click.option("--channel", "channels", multiple=True, help="Only these channel keys.")
@click.option("--follow", is_flag=True, help="Keep reading new records.")
def consume(topic: str, from_beginning: bool, channels: tuple[str, ...], follow: bool) -> None:
    """Print a topic's records as JSON lines (TOPIC without a prefix reads chorus.TOPIC)."""
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
@click.option(
    "--role",
    type=click.Choice(["fold", "context"]),
    default=None,
    help="Run one role in this process: fold (fold, driver events, the HTTP API on "
    "CHORUS_WEB_PORT) or context (summaries and recaps; readiness on CHORUS_WEB_PORT + 1). "
    "Without it, both run as supervised child processes.",
)
def worker(loglevel: str, role: str | None) -> None:
    """Run the worker: fold channels, summarise, recap, serve the HTTP API."""
    settings = get_settings()  # a bad setting stops it before the framework is loaded
    try:
        if role is None:
            from streams.worker.supervise import supervise

            sys.exit(supervise(settings, loglevel))
        from streams.worker.run import run_worker

        run_worker(settings, loglevel, "fold" if role == "fold" else "context")
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
    except (WorkerUnavailable, ChannelRefused) as error:
        raise click.ClickException(str(error)) from None


def channel_argument(channel: str) -> str:
    """The channel name, or a one-line error with the rule it breaks (exit 1)."""
    from projections.model import channel_name_refusal

    refusal = channel_name_refusal(channel)
    if refusal is not None:
        raise click.ClickException(refusal)
    return channel


def json_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--json`: the answer as JSON for scripts, instead of text for a person."""
    return click.option("--json", "as_json", is_flag=True, help=f"{what} as JSON, for scripts.")


def note(text: str) -> None:
    """A note for the person at the terminal, on stderr and on a line of its own: whatever
    was printed before it is out first and ends its line."""
    sys.stdout.flush()
    click.echo(text, err=True)


@main.command()
@click.argument("channel")
@json_option("Every projection's whole state, the decision and the config")
def state(channel: str, as_json: bool) -> None:
    """Where a channel stands, from the worker that owns it: its termination decision
    (CONTINUE, COMPLETE, FAILED or ESCALATE, with its detail), who takes part, the open and
    the recently ended commitments, the termination conditions."""
    from streams.interfaces.cli.show import state_text

    channel_argument(channel)
    found = api_call(lambda api: api.state(channel))
    if found is None:
        raise click.ClickException(f"no messages folded for channel {channel!r}")
    if as_json:
        print_json(found)
    else:
        click.echo(state_text(found))


@main.command()
@json_option("The channels and each one's decision")
def channels(as_json: bool) -> None:
    """List the channels the worker has folded, each with its decision."""
    from streams.interfaces.cli.show import channels_text

    decisions = api_call(lambda api: api.channel_decisions())
    if as_json:
        print_json({"channels": sorted(decisions), "decisions": decisions})
    else:
        click.echo(channels_text(decisions))


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


class ChannelFirstGroup(ChorusGroup):
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
    view: LatestView,
    channel: str,
    call: Callable[[WorkerApi], Awaitable[Any]],
    shown: Callable[[Any], str] | None,
) -> None:
    """Print the worker's answer (`shown` as text for a person; None: as JSON); when no
    worker answers, the view of the channel's latest record on its compacted topic instead
    (`view_or_latest`). Which source answered is a note on stderr (stdout stays what was
    asked for)."""
    from streams.interfaces.control import view_or_latest

    settings = get_settings()

    async def ask() -> tuple[Any, str | None]:
        async with WorkerApi(settings) as api:
            return await view_or_latest(settings, view, channel, lambda: call(api))

    try:
        found, topic = run(ask())
    except (WorkerUnavailable, ChannelRefused) as error:
        raise click.ClickException(str(error)) from None
    if shown is None:
        print_json(found)
    else:
        click.echo(shown(found))
    note("(from the worker)" if topic is None else f"(from {topic}; no worker answered)")


@summary.command("show")
@click.argument("channel")
@json_option("The summary record with its annotations (content null when there is none yet)")
def summary_show(channel: str, as_json: bool) -> None:
    """Print the latest summary: what it covers and when it was written, then what was said
    and the commitments as they stand, then when the next one comes; from chorus.summaries
    when no worker is running."""
    from streams.interfaces.cli.show import summary_due, summary_text
    from streams.records import ChannelConfig, configured

    channel_argument(channel)
    settings = get_settings()

    async def with_due(api: WorkerApi) -> Any:
        view = await api.summary(channel)
        state = await api.state(channel)
        raw = (state or {}).get("config")
        config = ChannelConfig.model_validate(raw) if raw else None
        thresholds = (
            configured(config, "summary_after_messages", settings),
            configured(config, "summary_after_seconds", settings),
        )
        return {**view, "next": summary_due(state, view, thresholds)}

    # Without a worker, when the next comes is said from this command's settings.
    defaults = {
        "after_messages": settings.summary_after_messages,
        "after_seconds": settings.summary_after_seconds,
        "pending": None,
    }
    if as_json:
        from_worker_or_topic("summary", channel, lambda api: api.summary(channel), None)
        return
    from_worker_or_topic(
        "summary", channel, with_due, lambda found: summary_text({"next": defaults, **found})
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
    from streams.worker.summary_simulation import simulate

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
    help="max-messages:N, all-commitments-resolved, escalate-on-decline:N, "
    "fail-on-failure[:N], escalate-on-expiry[:N] or never (repeatable; N >= 0, "
    "max-messages N >= 1)",
)
def channel_configure(name: str, termination: tuple[str, ...]) -> None:
    """Set the termination conditions evaluated after every fold of the channel. Without
    any: all-commitments-resolved | fail-on-failure:0 | escalate-on-expiry:0."""
    configure(name, termination=list(termination) if termination else None)


@main.group(cls=ChannelFirstGroup)
def recap() -> None:
    """Idle recaps: show a channel's recap status, or configure its debounce."""


@recap.command("show")
@click.argument("channel")
@json_option("The recap status and the latest recap record")
def recap_show(channel: str, as_json: bool) -> None:
    """Print a channel's title, when its next recap is due, and its latest recap; from
    chorus.recaps (no countdown) when no worker is running."""
    from streams.interfaces.cli.show import recap_text

    channel_argument(channel)
    from_worker_or_topic(
        "recap", channel, lambda api: api.recap(channel), None if as_json else recap_text
    )


def budget_option(_: click.Context, __: click.Parameter, max_tokens: int) -> int:
    """--max-tokens, or a usage error with the rule it breaks (exit 2)."""
    refusal = budget_refusal(max_tokens)
    if refusal is not None:
        raise click.BadParameter(refusal)
    return max_tokens


@main.command()
@click.argument("channel")
@click.option(
    "--max-tokens",
    type=int,
    callback=budget_option,
    default=DEFAULT_CONTEXT_TOKENS,
    show_default=True,
    help=f"Token budget, 0 to {MAX_CONTEXT_TOKENS} (about 4 characters a token).",
)
@click.option(
    "--for",
    "for_agent",
    default=None,
    help="An agent (sender name or role): what it owes and is owed, and the messages to it, "
    "come first.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="The text, the decision and the parts as JSON."
)
def context(channel: str, max_tokens: int, for_agent: str | None, as_json: bool) -> None:
    """What an agent should read first, within --max-tokens: where the channel stands (its
    decision), the open commitments, what ended badly, the newest messages, the summary
    and the recap. An unknown channel is an error (exit 1)."""
    channel_argument(channel)
    found = api_call(lambda api: api.context(channel, max_tokens, for_agent))
    if as_json:
        print_json(found)
        return
    click.echo(found["text"])
    note(f"({found['tokens']} of {max_tokens} tokens)")


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


@main.command(
    help=f"""Serve chorus to agents over MCP: stdio (one agent, `--as NAME`), or streamable
    HTTP on HOST:PORT/mcp (each request's bearer token names its agent, from
    CHORUS_AGENT_TOKENS_FILE). Tools:

    \b
    send_message(channel, type, content, target, correlation_id, in_reply_to,
        deadline_seconds, topic): post as you
    reply(channel, to, type, content): answer a message
    wait_for_reply(channel, request_id, timeout_seconds=60): how your request ended
    check_messages(channel, after, limit=20): what is addressed to you, by position
    my_commitments(channel): what you owe and are owed
    configure_channel(channel, termination, summary_after_messages, summary_after_seconds,
        recap_debounce_seconds, writers)
    get_channel_context(channel, max_tokens={DEFAULT_CONTEXT_TOKENS}, for_agent=None):
        what to read first
    get_channel_summary(channel), get_channel_state(channel), list_channels()
    """
)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio for one agent's host; http (streamable HTTP) for many agents.",
)
@click.option(
    "--as",
    "agent",
    default=None,
    help="Over stdio: the agent this server is (default CHORUS_AGENT; none: it only reads).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Over HTTP: the address.")
@click.option("--port", default=8765, show_default=True, type=int, help="Over HTTP: the port.")
@click.option(
    "--loglevel",
    default="warning",
    show_default=True,
    help="What the server logs on stderr, the host's log: debug, info, warning or error.",
)
def mcp(transport: str, agent: str | None, host: str, port: int, loglevel: str) -> None:
    from streams.errors import ChorusError
    from streams.interfaces.mcp import LOG_LEVELS, Transport, serve

    level = LOG_LEVELS.get(loglevel.lower())
    if level is None:
        raise click.BadParameter(f"{loglevel!r}: one of {', '.join(LOG_LEVELS)}")
    settings = get_settings()
    if transport == "http" and agent is not None:
        raise click.UsageError("--as is for stdio: over HTTP each bearer token names its agent")
    chosen: Transport = "http" if transport == "http" else "stdio"
    try:
        serve(settings, level, chosen, agent=agent or settings.agent, host=host, port=port)
    except ChorusError as error:
        raise click.ClickException(str(error)) from None


main.add_command(replay_command)


if __name__ == "__main__":
    main()
