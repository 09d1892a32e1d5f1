"""What the MCP server's agents share in one process (`streams.interfaces.mcp`): the sender
(one producer, the channels' writers), the messages it has seen (so `reply` and
`wait_for_reply` find a message by its id), the identity of each call, and the change
notifications of the channel resources, fed by the driver events.

Identity: over stdio the server is one agent (`chorus mcp --as NAME`, or CHORUS_AGENT); over
streamable HTTP each request's bearer token names its agent (`AgentTokenVerifier`, from
CHORUS_AGENT_TOKENS_FILE). No tool takes a sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

import orjson
from aiokafka import ConsumerRecord, TopicPartition
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated, ServerEvent

from projections.commitments import CommitmentProjection, states_a_request
from projections.model import NEEDS_REPLY_LINK, Message, MessageType
from projections.readable import commitment_views
from streams.agents.identity import AgentTokens
from streams.agents.log import PositionReader, logged_message
from streams.agents.sending import AgentSender
from streams.errors import ChorusError
from streams.interfaces.driver_events import After, RequestOutcome, RequestWatch, outcome_of
from streams.interfaces.worker_api import WorkerApi
from streams.kafka.clients import consumer, started, topic_partitions
from streams.kafka.produce import SentMessage
from streams.memory import ByteCache
from streams.records import DriverEvent
from streams.settings import Settings
from streams.topology import DRIVER_EVENTS, MESSAGES

log = logging.getLogger(__name__)

# Messages a server remembers by id (those it sent and those check_messages returned),
# the least recently seen forgotten first; one forgotten is looked up in the fold.
KNOWN_MESSAGES = 10_000
# What a message remembered by id weighs (its channel, correlation id, position, time).
KNOWN_BYTES = 400
# The views of a channel a client can subscribe to, as resource URIs ({+channel}: a channel
# name keeps its slashes).
RESOURCE_VIEWS = ("context", "state", "summary")
RESOURCE_TEMPLATE = "chorus://channels/{{+channel}}/{view}"
# How long the hub waits for driver events at a time, and after a failure.
HUB_POLL_MS = 500
RETRY_SECONDS = 2.0
# Requests the hub follows at once; past it the oldest is let go (its wait reads the
# events itself). Of each, the hub keeps the last messages that may end it, each up to
# TRACKED_REPLY_BYTES (at most 1,000 × 2 × 64 KiB; a larger or a dropped one is read from
# the log by its position), and an answer waits this long for its message when the hub
# read its event first.
TRACKED_REQUESTS = 1000
TRACKED_REPLIES = 2
TRACKED_REPLY_BYTES = 64 * 1024
# What a tracked request weighs besides its replies.
TRACKED_BYTES = 2_000
MESSAGE_GRACE_SECONDS = 1.0


# The messages that may end a request: the replies, and the fold's expiry event.
ENDINGS = NEEDS_REPLY_LINK | {MessageType.EVENT}


def resource_uri(channel: str, view: str) -> str:
    return f"chorus://channels/{channel}/{view}"


@dataclass(frozen=True)
class Known:
    """A message this server has seen: enough to reply to it or wait for it."""

    channel: str
    correlation_id: str | None
    is_request: bool
    offset: int | None
    created_at: datetime


@dataclass(frozen=True)
class Found:
    """A message found by its id: its correlation id, and where a wait for it starts."""

    correlation_id: str | None
    is_request: bool
    after: After


class AgentTokenVerifier:
    """The MCP SDK's token check over HTTP: a token names its agent (`AccessToken.client_id`)
    or nothing (the SDK answers 401). The token itself is kept nowhere."""

    def __init__(self, tokens: AgentTokens) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        agent = self.tokens.agent_of(token)
        if agent is None:
            return None
        digest = hashlib.sha256(token.encode()).hexdigest()
        return AccessToken(token=digest, client_id=agent, scopes=[])


def caller_over_http() -> str | None:
    """The agent the current HTTP request's bearer token names."""
    token = get_access_token()
    return token.client_id if token is not None else None


class ListenedBus(InMemorySubscriptionBus):
    """The SDK's in-process bus for `subscriptions/listen`, counting its listeners, so the
    driver events are followed only while a client listens."""

    def __init__(self, on_listener: Callable[[], None]) -> None:
        super().__init__()
        self.listeners = 0
        self.on_listener = on_listener

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        unsubscribe = super().subscribe(listener)
        self.listeners += 1
        self.on_listener()
        gone = False

        def once() -> None:
            nonlocal gone
            if not gone:
                gone = True
                self.listeners -= 1
                unsubscribe()

        return once


class AgentServices:
    """The process's shared clients and memory; `stop` ends them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sender = AgentSender(settings)
        self.known: ByteCache[str, Known] = ByteCache(
            "known-messages", KNOWN_MESSAGES * KNOWN_BYTES
        )
        self.bus = ListenedBus(lambda: self.hub.start())
        self.hub = EventHub(settings, self.bus)
        self.reader = PositionReader(settings, settings.topic(MESSAGES))
        self._api: WorkerApi | None = None

    @property
    def api(self) -> WorkerApi:
        """The worker's HTTP API, one client (and its connections) for every call."""
        if self._api is None:
            self._api = WorkerApi(self.settings)
        return self._api

    # --- messages seen ---------------------------------------------------------------------

    def remember(self, message: Message, offset: int | None) -> None:
        known = Known(
            message.channel,
            message.correlation_id,
            states_a_request(message),
            offset,
            message.created_at,
        )
        self.known.put(message.id, known, KNOWN_BYTES)

    def sent(self, sent: SentMessage) -> None:
        self.remember(sent.message, sent.offset)

    async def find(self, channel: str, message_id: str) -> Found | None:
        """The message `message_id` of `channel`: one this server has seen, else the request
        that opened one of the fold's commitments (its id is the commitment's); None when
        neither knows it."""
        known = self.known.get(message_id)
        if known is not None and known.channel == channel:
            if known.offset is not None:
                after = After(offset=known.offset)
            else:
                after = After(message_id=message_id, created_at=known.created_at)
            return Found(known.correlation_id, known.is_request, after)
        state = await self.api.state(channel)
        folded = ((state or {}).get("projections") or {}).get(CommitmentProjection.name) or {}
        for view in commitment_views(folded.get("state")):
            if view.id == message_id:
                after = After(message_id=message_id, created_at=view.since)
                return Found(view.correlation_id, True, after)
        return None

    async def outcome(self, tracked: Tracked) -> RequestOutcome:
        """How a tracked request ended, with the message that ended it: as the hub read it
        from the log (it comes before its event; a moment is given to a hub that read the
        event first), else read by its position."""
        event = await asyncio.shield(tracked.ended)
        position = (event.partition, event.offset)
        if position not in tracked.replies:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tracked.replied(position), MESSAGE_GRACE_SECONDS)
        message = tracked.replies.get(position)
        if message is None:
            read = await self.reader.read(
                event.partition,
                event.offset - 1,
                lambda record: logged_message(record, self.settings),
                scan=1,
                limit=1,
            )
            message = read.found[0][1] if read.found else None
        return outcome_of(event, tracked.watch.correlation_id, message)

    async def stop(self) -> None:
        await self.hub.stop()
        await self.reader.stop()
        await self.sender.stop()
        if self._api is not None:
            await self._api.aclose()


@dataclass
class Tracked:
    """A request this server sent, followed from the moment before it was sent: its own
    driver event starts it, then every event of its channel goes through its watch until
    one ends it (`ended`); the messages of its correlation id are kept by their position
    (`replies`, the last `TRACKED_REPLIES`), so the one that ended it is at hand."""

    channel: str
    request_id: str
    watch: RequestWatch
    ended: asyncio.Future[DriverEvent]
    started: bool = False
    replies: ByteCache[tuple[int, int], Message] = field(
        default_factory=lambda: ByteCache("tracked-replies", TRACKED_REPLIES * TRACKED_REPLY_BYTES)
    )
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def keep(self, partition: int, offset: int, message: Message) -> None:
        """Keep a message of the request's correlation id (once it ended, only the one that
        ended it)."""
        position = (partition, offset)
        if self.ended.done() and position != self.ending():
            return
        self.replies.put(position, message, TRACKED_REPLY_BYTES)
        self.arrived.set()

    def ending(self) -> tuple[int, int] | None:
        if not self.ended.done() or self.ended.exception() is not None:
            return None
        event = self.ended.result()
        return (event.partition, event.offset)

    async def replied(self, position: tuple[int, int]) -> None:
        while position not in self.replies:
            self.arrived.clear()
            await self.arrived.wait()

    def feed(self, event: DriverEvent) -> None:
        if self.ended.done():
            return
        if not self.started:
            if event.message_id != self.request_id:
                return  # an event of an earlier message
            self.started = True
        if self.watch(event):
            self.ended.set_result(event)
            position = (event.partition, event.offset)
            for kept in [p for p in self.replies if p != position]:
                self.replies.pop(kept)


class HubLost(ChorusError):
    """The hub stopped following (a broker that went away) or let the request go at its
    bound: a wait looks for the request's events itself."""


class EventHub:
    """One consumer of chorus.driver-events and chorus.messages over every partition, from
    where they ended when it started: each event of a tracked request's channel goes to that
    request's watch (a wait needs no consumer of its own), the messages of its correlation
    id are kept with it (its answer needs no read), and each channel with new events is
    announced to the clients that listen to its resources. After a failure it starts again
    from the end, and the requests it tracked are let go (`HubLost`)."""

    def __init__(self, settings: Settings, bus: ListenedBus) -> None:
        self.settings = settings
        self.bus = bus
        self.tracked: ByteCache[str, Tracked] = ByteCache(
            "tracked-requests",
            TRACKED_REQUESTS * TRACKED_BYTES,
            lambda _, gone: self._let_go(gone, f"tracks at most {TRACKED_REQUESTS} requests"),
        )
        self.channels: dict[str, set[str]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def ready(self) -> None:
        """Once the hub follows every partition from a known position (raises what stopped
        it, when it stopped)."""
        self.start()
        task = self._task
        assert task is not None
        waiting = asyncio.ensure_future(self._ready.wait())
        done, _ = await asyncio.wait({waiting, task}, return_when=asyncio.FIRST_COMPLETED)
        if waiting not in done:
            waiting.cancel()
            task.result()  # what stopped it
            raise HubLost("the driver events are not followed")

    def track(self, message: Message) -> Tracked:
        """Follow the request `message` (call it before sending it)."""
        assert message.correlation_id is not None
        tracked = Tracked(
            message.channel,
            message.id,
            RequestWatch(message.correlation_id),
            asyncio.get_running_loop().create_future(),
        )
        self.channels.setdefault(message.channel, set()).add(message.id)
        self.tracked.put(message.id, tracked, TRACKED_BYTES)
        return tracked

    def untrack(self, request_id: str) -> None:
        gone = self.tracked.pop(request_id)
        if gone is not None:
            self._let_go(gone, "no longer tracks it")

    def _let_go(self, gone: Tracked, why: str) -> None:
        ids = self.channels.get(gone.channel)
        if ids is not None:
            ids.discard(gone.request_id)
            if not ids:
                del self.channels[gone.channel]
        if not gone.ended.done():
            gone.ended.set_exception(HubLost(f"the server {why}"))
            gone.ended.exception()  # a wait that is not waiting is not told

    async def _run(self) -> None:
        events, messages = (self.settings.topic(name) for name in (DRIVER_EVENTS, MESSAGES))
        while True:
            kafka = consumer(self.settings, enable_auto_commit=False, group_id=None)
            try:
                await started(kafka, self.settings)
                assigned = [
                    TopicPartition(topic, partition)
                    for topic in (events, messages)
                    for partition in sorted(await topic_partitions(kafka, topic))
                ]
                kafka.assign(assigned)
                await kafka.seek_to_end(*assigned)
                for tp in assigned:
                    await kafka.position(tp)  # resolved now: what follows is followed
                self._ready.set()
                while True:
                    batches = await kafka.getmany(timeout_ms=HUB_POLL_MS)
                    for tp, records in batches.items():
                        if tp.topic == messages:
                            self._keep(records)
                    for tp, records in batches.items():
                        if tp.topic == events:
                            self._take(records)
                    changed = {
                        r.key.decode(errors="replace")
                        for tp, records in batches.items()
                        if tp.topic == events
                        for r in records
                        if r.key
                    }
                    if self.bus.listeners and changed:
                        for update in _updates(changed):
                            await self.bus.publish(update)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("following %s stopped (%r); again in %gs", events, error, RETRY_SECONDS)
                self._ready.clear()
                for request_id in self.tracked:
                    self.untrack(request_id)
                if isinstance(error, ChorusError):
                    raise  # no broker, no topic: said to whoever waits for the hub
                await asyncio.sleep(RETRY_SECONDS)
            finally:
                await kafka.stop()

    def _keep(self, records: list[ConsumerRecord]) -> None:
        """The messages of tracked requests' correlation ids, kept with their requests."""
        for record in records:
            channel = record.key.decode(errors="replace") if record.key else ""
            ids = self.channels.get(channel)
            if not ids:
                continue
            if record.value is None or len(record.value) > TRACKED_REPLY_BYTES:
                continue
            message = logged_message(record, self.settings)
            if message is None or message.correlation_id is None:
                continue
            if message.type not in ENDINGS:
                continue
            for request_id in ids:
                tracked = self.tracked.peek(request_id)
                if tracked is not None and tracked.watch.correlation_id == message.correlation_id:
                    tracked.keep(record.partition, record.offset, message)

    def _take(self, records: list[ConsumerRecord]) -> None:
        for record in records:
            channel = record.key.decode(errors="replace") if record.key else ""
            ids = self.channels.get(channel)
            if not ids or record.value is None:
                continue
            event = DriverEvent.model_validate(orjson.loads(record.value))
            for request_id in list(ids):
                tracked = self.tracked.peek(request_id)
                if tracked is not None:
                    tracked.feed(event)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def _updates(channels: Iterable[str]) -> list[ServerEvent]:
    return [
        ResourceUpdated(uri=resource_uri(channel, view))
        for channel in sorted(channels)
        for view in RESOURCE_VIEWS
    ]
