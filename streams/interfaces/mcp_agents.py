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
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from aiokafka import TopicPartition
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated, ServerEvent

from projections.commitments import CommitmentProjection, states_a_request
from projections.model import Message
from projections.readable import commitment_views
from streams.agents.identity import AgentTokens
from streams.agents.sending import AgentSender
from streams.interfaces.driver_events import After
from streams.interfaces.worker_api import WorkerApi
from streams.kafka.clients import consumer, started, topic_partitions
from streams.kafka.produce import SentMessage
from streams.settings import Settings
from streams.topology import DRIVER_EVENTS

log = logging.getLogger(__name__)

# Messages a server remembers by id (those it sent and those check_messages returned),
# the least recently seen forgotten first; one forgotten is looked up in the fold.
KNOWN_MESSAGES = 10_000
# The views of a channel a client can subscribe to, as resource URIs ({+channel}: a channel
# name keeps its slashes).
RESOURCE_VIEWS = ("context", "state", "summary")
RESOURCE_TEMPLATE = "chorus://channels/{{+channel}}/{view}"
# How long the notifier waits for driver events before it looks for listeners again.
NOTIFY_POLL_MS = 500
NOTIFY_RETRY_SECONDS = 2.0


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
        self.known: OrderedDict[str, Known] = OrderedDict()
        self.bus = ListenedBus(self._notify)
        self._notifier: asyncio.Task[None] | None = None

    # --- messages seen ---------------------------------------------------------------------

    def remember(self, message: Message, offset: int | None) -> None:
        self.known[message.id] = Known(
            message.channel,
            message.correlation_id,
            states_a_request(message),
            offset,
            message.created_at,
        )
        self.known.move_to_end(message.id)
        while len(self.known) > KNOWN_MESSAGES:
            self.known.popitem(last=False)

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
        async with WorkerApi(self.settings) as api:
            state = await api.state(channel)
        folded = ((state or {}).get("projections") or {}).get(CommitmentProjection.name) or {}
        for view in commitment_views(folded.get("state")):
            if view.id == message_id:
                after = After(message_id=message_id, created_at=view.since)
                return Found(view.correlation_id, True, after)
        return None

    # --- resource notifications ------------------------------------------------------------

    def _notify(self) -> None:
        if self._notifier is None or self._notifier.done():
            self._notifier = asyncio.ensure_future(self._follow_events())

    async def _follow_events(self) -> None:
        """While a client listens: each channel with new driver events, once per poll, as
        its context, state and summary changed (the views a client reads again)."""
        topic = self.settings.topic(DRIVER_EVENTS)
        while self.bus.listeners > 0:
            kafka = consumer(self.settings, enable_auto_commit=False, group_id=None)
            try:
                await started(kafka, self.settings)
                partitions = await topic_partitions(kafka, topic)
                kafka.assign([TopicPartition(topic, p) for p in sorted(partitions)])
                await kafka.seek_to_end()
                while self.bus.listeners > 0:
                    batches = await kafka.getmany(timeout_ms=NOTIFY_POLL_MS)
                    channels = {
                        record.key.decode(errors="replace")
                        for records in batches.values()
                        for record in records
                        if record.key
                    }
                    for event in _updates(channels):
                        await self.bus.publish(event)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("following %s for notifications stopped (%r)", topic, error)
                await asyncio.sleep(NOTIFY_RETRY_SECONDS)
            finally:
                await kafka.stop()

    async def stop(self) -> None:
        if self._notifier is not None:
            self._notifier.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._notifier
        await self.sender.stop()


def _updates(channels: Iterable[str]) -> list[ServerEvent]:
    return [
        ResourceUpdated(uri=resource_uri(channel, view))
        for channel in sorted(channels)
        for view in RESOURCE_VIEWS
    ]
