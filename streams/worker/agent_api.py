"""The agents' HTTP API on the fold role's web server, for agents in any language.

  POST /channels/{channel}/messages          send as the agent the bearer token names: 201
                                             {id, channel, correlation_id, partition, offset}
  GET  /channels/{channel}/messages?after=&for=&limit=
                                             the channel's messages read from the log by
                                             position (all of them, or those `for` one agent:
                                             addressed to it, or replies to its requests),
                                             whole, with the cursor `next` for `after`
  GET  /channels/{channel}/events?after=     the channel's driver events, server-sent
  GET  /cluster/channels                     the channels every fold worker of the group owns

Identity (`streams.agents.identity`): a POST wants an agent's token from
CHORUS_AGENT_TOKENS_FILE, which names the sender (no field does); the operator's token
(CHORUS_API_TOKEN) only reads. The GETs take either token, and are open like every other
view when no API token is set. Any worker takes a POST (the writers check reads the config
topic itself, `streams.agents.sending`); the messages of a channel are read on the worker
that owns its partition, where the fold says which requests are the agent's.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import ClientError, web
from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError
from faust.web import Request, Response, View
from pydantic import SecretStr

from projections.commitments import CommitmentProjection
from projections.inbox import DEFAULT_MESSAGES, asks, for_agent, inbox_entry, requests_of
from projections.model import Message, MessageError, channel_name_refusal
from streams.agents.identity import AgentTokens, bearer_token
from streams.agents.log import PositionReader
from streams.agents.sending import (
    AgentSender,
    WriterRefused,
    WritersUnknown,
    agent_message,
    sent_answer,
)
from streams.kafka.clients import consumer, drop_fetched_ahead, started
from streams.records import key_partition
from streams.settings import bearer_header
from streams.topology import DRIVER_EVENTS, MESSAGES
from streams.worker.http import (
    BROKER_ERRORS,
    failed,
    local_channels,
    not_yet,
    page_of,
    routable,
)

if TYPE_CHECKING:
    from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

# An events stream with nothing to send says it is alive this often (a comment line).
KEEP_ALIVE_SECONDS = 15.0


@dataclass(frozen=True)
class Caller:
    """Who asks: an agent (its token named it) or None (the operator, or anyone when no API
    token is set)."""

    agent: str | None


class Refused(Exception):
    """A request refused before its view ran: HTTP `status` with a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Callers:
    """The bearer-token check of the agents' API."""

    def __init__(self, chorus: Runtime) -> None:
        token = chorus.settings.api_token
        self.operator = token.get_secret_value() if token is not None else None
        self.agents = AgentTokens.of(chorus.settings)

    def of(self, request: Request) -> Caller:
        token = bearer_token(request.headers.get("Authorization"))
        agent = self.agents.agent_of(token) if self.agents is not None else None
        if agent is not None:
            return Caller(agent)
        if self.operator is None:
            if token is None:
                return Caller(None)
        elif token is not None and hmac.compare_digest(token.encode(), self.operator.encode()):
            return Caller(None)
        raise Refused(401, "missing or wrong bearer token")

    def agent(self, request: Request) -> str:
        """The agent a write comes from; refused without an agent's token."""
        caller = self.of(request)
        if caller.agent is None:
            raise Refused(
                403 if self.agents is not None else 401,
                "sending needs an agent's bearer token (CHORUS_AGENT_TOKENS_FILE names each "
                "agent's); the operator's token only reads",
            )
        return caller.agent


def _offset(request: Request, name: str) -> int | None:
    value = request.query.get(name)
    if value is None or value == "":
        return None
    try:
        found = int(value)
    except ValueError:
        raise Refused(400, f"{name} must be an offset (an integer), got {value!r}") from None
    if found < -1:
        raise Refused(400, f"{name} must be -1 or more, got {found}")
    return found


def _limit(request: Request, most: int) -> int:
    value = request.query.get("limit")
    if value is None or value == "":
        return DEFAULT_MESSAGES
    try:
        limit = int(value)
    except ValueError:
        raise Refused(400, f"limit must be an integer, got {value!r}") from None
    if not 1 <= limit <= most:
        raise Refused(400, f"limit must be between 1 and {most}, got {limit}")
    return limit


def install(chorus: Runtime) -> None:
    """The agents' views on the fold role's web server."""
    app = chorus.app
    settings = chorus.settings
    callers = Callers(chorus)
    sender = AgentSender(settings)
    channel_log = PositionReader(settings, settings.topic(MESSAGES), chorus.servers)
    streams: set[asyncio.Task[Any]] = set()

    async def stop(*_: Any, **__: Any) -> None:
        await sender.stop()
        await channel_log.stop()

    app.on_before_shutdown.connect(stop)

    def checked(path: str, request: Request, channel: str | None) -> Caller:
        """The request counted, its caller and its channel name checked (`Refused`)."""
        chorus.meter.requests.labels(path).inc()
        caller = callers.of(request)
        refusal = channel_name_refusal(channel) if channel is not None else None
        if refusal is not None:
            raise Refused(400, refusal)
        return caller

    async def send(view: View, request: Request, channel: str) -> Response:
        checked("POST /channels/{channel}/messages", request, channel)
        agent = callers.agent(request)
        try:
            fields = orjson.loads(await request.read())
        except orjson.JSONDecodeError as error:
            raise Refused(400, f"the body is not JSON: {error}") from None
        if not isinstance(fields, dict):
            raise Refused(400, "the body is a JSON object of the message's fields")
        try:
            sent = await sender.send(agent_message(agent, channel, fields))
        except WriterRefused as refused:
            raise Refused(403, refused.reason) from None
        except MessageError as error:
            raise Refused(400, error.reason) from None
        except (WritersUnknown, KafkaError) as error:
            return not_yet(view, f"the message was not sent: {error}")
        return view.json(sent_answer(sent), status=201)

    async def messages(view: View, request: Request, channel: str) -> Response:
        """On the worker that owns the channel: its fold says which requests are whose."""
        caller = callers.of(request)
        after = _offset(request, "after")
        limit = _limit(request, settings.agent_messages_limit)
        agent = (request.query.get("for") or "").strip() or caller.agent
        partition = chorus.ownership.messages_partition(channel)
        if partition is None:
            return not_yet(view, f"this worker no longer owns channel {channel!r}")
        requests: set[str] = set()
        if agent is not None:
            commitments = chorus.folds_of(channel).get(CommitmentProjection.name)
            requests = requests_of(commitments.state if commitments else None, agent)

        key = channel.encode()

        def kept(record: ConsumerRecord) -> Message | None:
            """The channel's message at the record, through the fold's gate (an invalid
            record or a refused sender is never answered), when it is one to answer."""
            if record.key != key:
                return None
            try:
                message = chorus.gate.validate(
                    record.key, record.value, partition, record.offset, record.timestamp
                )
            except MessageError:
                return None
            if agent is None:
                return message
            asked = asks(message, agent)
            if asked is not None:
                requests.add(asked)
            return message if for_agent(message, agent, requests) else None

        read = await channel_log.read(
            partition, after, kept, scan=settings.agent_scan_records, limit=limit
        )
        return view.json(
            {
                "channel": channel,
                "for": agent,
                "partition": partition,
                "messages": [inbox_entry(message, offset) for offset, message in read.found],
                "next": read.next,
                "more": read.next < read.end - 1,
                "end_offset": read.end,
            }
        )

    @app.page("/channels/{channel:.+}/messages", name="agent-messages")
    class Messages(View):
        async def post(self, request: Request, channel: str) -> Response:
            try:
                return await send(self, request, channel)
            except Refused as refused:
                return self.json({"error": refused.reason}, status=refused.status)
            except Exception as error:
                return failed(self, f"sending to channel {channel!r}", error)

        async def get(self, request: Request, channel: str) -> Response:
            try:
                checked("/channels/{channel}/messages", request, channel)
            except Refused as refused:
                return self.json({"error": refused.reason}, status=refused.status)
            if not routable(chorus):
                return not_yet(self, "the worker is still learning its partitions")
            try:
                return await self.routed(request, channel)
            except Exception as error:  # routing's own failure, as the other views say it
                log.warning("routing messages of %r: %r", channel, error)
                return not_yet(self, f"the channel's owner is not reachable ({error!r})")

        @app.topic_route(topic=chorus.messages, match_info="channel")
        async def routed(self, request: Request, channel: str) -> Response:
            try:
                return await messages(self, request, channel)
            except Refused as refused:
                return self.json({"error": refused.reason}, status=refused.status)
            except BROKER_ERRORS as error:
                return not_yet(self, f"the broker is not reachable ({error!r})")
            except Exception as error:
                return failed(self, f"the messages view of channel {channel!r}", error)

    async def events(view: View, request: Request, channel: str) -> Any:
        """The channel's driver events as server-sent events: from the event after `after`
        (an event's `id`, its position on chorus.driver-events; or the Last-Event-ID
        header), else from now on."""
        after = _offset(request, "after")
        last_id = request.headers.get("Last-Event-ID")
        if after is None and last_id and last_id.isdigit():
            after = int(last_id)
        if len(streams) >= settings.agent_event_streams:
            return not_yet(view, f"{len(streams)} event streams are open, the most it serves")
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        task = asyncio.current_task()
        assert task is not None
        streams.add(task)
        kafka = consumer(
            settings, bootstrap_servers=chorus.servers, enable_auto_commit=False, group_id=None
        )
        key = channel.encode()
        try:
            await started(kafka, settings)
            partition = key_partition(key, chorus.ownership.messages_partitions())
            tp = TopicPartition(settings.topic(DRIVER_EVENTS), partition)
            kafka.assign([tp])
            if after is None:
                await kafka.seek_to_end(tp)
            else:
                kafka.seek(tp, after + 1)
            while True:
                batch = await kafka.getmany(tp, timeout_ms=int(KEEP_ALIVE_SECONDS * 1000))
                records = [r for r in batch.get(tp, []) if r.key == key and r.value]
                if not records:
                    await response.write(b": keep-alive\n\n")
                for record in records:
                    await response.write(
                        b"id: %d\nevent: driver-event\ndata: %s\n\n" % (record.offset, record.value)
                    )
        except ConnectionError:
            pass  # the client went away
        finally:
            streams.discard(task)
            drop_fetched_ahead(kafka)
            await kafka.stop()
        return response

    @app.page("/channels/{channel:.+}/events", name="agent-events")
    class Events(View):
        async def get(self, request: Request, channel: str) -> Any:
            try:
                checked("/channels/{channel}/events", request, channel)
                return await events(self, request, channel)
            except Refused as refused:
                return self.json({"error": refused.reason}, status=refused.status)

    async def cluster(view: View, request: Request) -> Response:
        """A page of every channel the fold workers of the group own, in name order
        (`?after=` the last name of the page before, `?limit=`): each worker is asked for its
        own page (`/channels?with=decision`), the pages merged; when one cannot answer, or a
        partition has no owner yet, a 503 that says which."""
        if not routable(chorus):
            return not_yet(view, "the worker is still learning its partitions")
        try:
            after, limit = page_of(request)
        except ValueError as error:
            raise Refused(400, str(error)) from None
        topic = chorus.messages.get_topic_name()
        owners: dict[str, list[int]] = {
            url: sorted(topics.get(topic, []))
            for url, topics in app.assignor.external_topics_metadata().items()
        }
        partitions = chorus.ownership.messages_partitions()
        missing = set(range(partitions)) - {p for owned in owners.values() for p in owned}
        if missing:
            return not_yet(view, f"partitions {sorted(missing)} of {topic} have no owner yet")
        own = str(app.conf.canonical_url).rstrip("/")
        decisions: dict[str, Any] = {}
        more = False
        for url, owned in owners.items():
            if url.rstrip("/") == own:
                names, following = local_channels(chorus, after, limit)
                found = {name: _decision(chorus, name) for name in names}
            else:
                try:
                    found, following = await _owned_elsewhere(
                        app, url, settings.api_token, after, limit
                    )
                except (ClientError, TimeoutError, ValueError) as error:
                    return not_yet(
                        view,
                        f"cannot list the whole cluster: the worker at {url} (partitions "
                        f"{owned}) did not answer ({error!r})",
                    )
            decisions.update(found)
            more = more or following is not None
        names = sorted(decisions)[:limit]
        following = names[-1] if len(decisions) > limit or (more and names) else None
        return view.json(
            {
                "channels": names,
                "decisions": {name: decisions[name] for name in names},
                "next": following,
                "workers": len(owners),
            }
        )

    @app.page("/cluster/channels", name="agent-cluster-channels")
    class Cluster(View):
        async def get(self, request: Request) -> Response:
            try:
                checked("/cluster/channels", request, None)
                return await cluster(self, request)
            except Refused as refused:
                return self.json({"error": refused.reason}, status=refused.status)
            except Exception as error:
                return failed(self, "the cluster's channels", error)


def _decision(chorus: Runtime, channel: str) -> dict[str, Any] | None:
    found = chorus.standing(channel)
    return found.decision_json() if found is not None else None


async def _owned_elsewhere(
    app: Any, url: str, token: SecretStr | None, after: str | None, limit: int
) -> tuple[dict[str, Any], str | None]:
    """Another fold worker's page of the channels it owns, with their decisions, and its
    cursor (its `/channels` view, asked with the operator's token)."""
    query = {"with": "decision", "limit": str(limit), **({"after": after} if after else {})}
    async with app.http_client.get(
        f"{url.rstrip('/')}/channels", params=query, headers=bearer_header(token), timeout=10
    ) as response:
        if response.status != 200:
            raise ValueError(f"HTTP {response.status}")
        answer = await response.json()
    return dict(answer.get("decisions") or {}), answer.get("next")
