"""The Python client for agents: send and reply to channel messages, wait for decisions,
read what an agent should know.

    async with Client() as chorus:            # settings from the CHORUS_* environment
        ask = await chorus.send("team/plan", sender="planner", type="command",
                                content="write the release notes", target="role:writer")
        await chorus.reply(ask, sender="writer", type="done", content="done: notes.md")
        outcome = await chorus.wait_for(ask)  # how the request ended: FULFILLED
        event = await chorus.wait("team/plan", after=ask)  # the first decision since ask
        print((await chorus.context("team/plan", for_agent="writer")).text)

`SyncClient` offers the same methods, blocking, for scripts and notebooks. Every exception
a method raises is exported here: chorus's own are `ChorusError`s, each with a one-line
message; besides them `ValueError` for an argument that breaks its rule and aiokafka's
`KafkaError` for a send the broker did not acknowledge (docs/agents.md, "Errors", lists
when each is raised).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar
from urllib.parse import quote, urlencode

import httpx
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from projections.commitments import CommitmentState, states_a_request
from projections.context import DEFAULT_CONTEXT_TOKENS
from projections.inbox import DEFAULT_MESSAGES
from projections.model import ActorType, Message, MessageError, MessageType, utc_now
from streams.errors import ChorusError
from streams.interfaces.control import LatestView, configure_channel, view_or_latest
from streams.interfaces.driver_events import (
    After,
    RequestOutcome,
    RequestWatch,
    decided,
    driver_events,
    wait_for_event,
    wait_for_request,
)
from streams.interfaces.worker_api import (
    NOT_READY_PATIENCE_SECONDS,
    ChannelRefused,
    WorkerApi,
    WorkerUnavailable,
    WorkerUnreachable,
)
from streams.kafka.clients import BrokerUnreachable, MissingTopicError, NoBrokerError
from streams.kafka.produce import (
    SentMessage,
    deliver,
    encoded,
    enum_member,
    prepare,
    started_producer,
)
from streams.records import ChannelConfig, DecisionRecord, DriverEvent
from streams.settings import Settings
from streams.topology import MESSAGES

__all__ = [
    "ActorType",
    "AgentContext",
    "BrokerUnreachable",
    "ChannelConfig",
    "ChannelNotFound",
    "ChannelRefused",
    "ChorusError",
    "Client",
    "CommitmentState",
    "DecisionRecord",
    "DriverEvent",
    "KafkaError",
    "Message",
    "MessageError",
    "MessageType",
    "MissingTopicError",
    "NoBrokerError",
    "RequestOutcome",
    "SentMessage",
    "SyncClient",
    "WaitTimeout",
    "WorkerUnavailable",
    "WorkerUnreachable",
    "decided",
    "driver_events",
]

P = ParamSpec("P")
T = TypeVar("T")


class ChannelNotFound(ChorusError, LookupError):
    """The worker has folded no message of this channel."""


class WaitTimeout(ChorusError, TimeoutError):
    """No driver event satisfied the condition in time."""


@dataclass(frozen=True)
class AgentContext:
    """What an agent reads first: `text` within the token budget, the channel's `decision`
    (None when the worker does not send one), the `parts` it was made of, and the worker's
    whole answer in `raw` (keys this client does not know included)."""

    channel: str
    text: str
    decision: DecisionRecord | None
    parts: dict[str, Any] = field(default_factory=dict)
    tokens: int | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, channel: str, answer: dict[str, Any]) -> AgentContext:
        parts = answer.get("parts")
        return cls(
            channel=channel,
            text=str(answer.get("text") or ""),
            decision=_decision_of(answer.get("decision")),
            parts=parts if isinstance(parts, dict) else {},
            tokens=answer.get("tokens"),
            raw=answer,
        )


def _decision_of(value: Any) -> DecisionRecord | None:
    """The context's decision, None when the worker sent none it can read."""
    try:
        return DecisionRecord.model_validate(value) if isinstance(value, dict) else None
    except ValidationError:
        return None


def _start_of(channel: str, after: SentMessage | Message | int | None) -> After | None:
    """Where a wait on `channel` starts: at a message of that channel (sent or received), or
    at a partition offset."""
    if after is None:
        return None
    if isinstance(after, int):
        return After(offset=after)
    if after.channel != channel:
        raise ValueError(f"message {after.id!r} is in channel {after.channel!r}, not {channel!r}")
    if isinstance(after, SentMessage):
        return After(offset=after.offset)
    return After(message_id=after.id, created_at=after.created_at)


class _Counted:
    """`until`, counting the driver events a wait examined."""

    def __init__(self, until: Callable[[DriverEvent], bool]) -> None:
        self.until = until
        self.seen = 0

    def __call__(self, event: DriverEvent) -> bool:
        self.seen += 1
        return self.until(event)

    def count(self) -> int:
        return self.seen


def _deadline_of(deadline: datetime | timedelta | None) -> datetime | None:
    return utc_now() + deadline if isinstance(deadline, timedelta) else deadline


class Client:
    """An async context manager over one producer and the worker's HTTP API.

    Settings come from the `CHORUS_*` environment unless given. Kafka is connected on the
    first `send`; the HTTP calls retry a worker that answers 503 (starting, rebalancing) for
    at most `patience` seconds (`transport`: httpx's, to reach the worker another way).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        patience: float = NOT_READY_PATIENCE_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self._api = WorkerApi(
            self.settings, patience=patience, transport=transport, await_start=True
        )
        self._producer: AIOKafkaProducer | None = None
        self._producer_lock = asyncio.Lock()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        await self._api.aclose()

    # --- messages -----------------------------------------------------------------------------

    async def send(
        self,
        channel: str,
        *,
        sender: str,
        type: MessageType | str,
        content: str | None = None,
        target: str | None = None,
        in_reply_to: str | None = None,
        correlation_id: str | None = None,
        deadline: datetime | timedelta | None = None,
        payload: dict[str, Any] | None = None,
        topic: str | None = None,
        actor_type: ActorType | str | None = None,
    ) -> SentMessage:
        """Send one message and return it with its partition and offset once the broker has
        acknowledged it. A QUERY, COMMAND or PROPOSE without `correlation_id` gets a new one;
        `deadline` is a time or a delay from now. An invalid message raises `MessageError`
        (the field and the rule) before anything is sent."""
        record: dict[str, Any] = {
            "channel": channel,
            "sender": sender,
            "type": enum_member(MessageType, "type", type).value,
            "content": content,
            "target": target,
            "in_reply_to": in_reply_to,
            "correlation_id": correlation_id,
            "deadline": _deadline_of(deadline),
            "payload": payload,
        }
        if topic is not None:
            record["topic"] = topic
        if actor_type is not None:
            record["actor_type"] = enum_member(ActorType, "actor_type", actor_type).value
        records = encoded(self.settings, [prepare(record)])
        (sent,) = await deliver(await self._started_producer(), self.settings, records)
        return sent

    async def reply(
        self,
        to: SentMessage | Message,
        *,
        sender: str,
        type: MessageType | str,
        content: str | None = None,
        target: str | None = None,
        deadline: datetime | timedelta | None = None,
        payload: dict[str, Any] | None = None,
        topic: str | None = None,
        actor_type: ActorType | str | None = None,
    ) -> SentMessage:
        """Answer `to` (a sent or a received message) in its channel, with its correlation_id
        and `in_reply_to` set to its id."""
        original = to.message if isinstance(to, SentMessage) else to
        return await self.send(
            original.channel,
            sender=sender,
            type=type,
            content=content,
            target=target,
            in_reply_to=original.id,
            correlation_id=original.correlation_id,
            deadline=deadline,
            payload=payload,
            topic=topic,
            actor_type=actor_type,
        )

    async def _started_producer(self) -> AIOKafkaProducer:
        async with self._producer_lock:
            if self._producer is None:
                self._producer = await started_producer(self.settings)
            return self._producer

    async def configure(
        self,
        channel: str,
        *,
        termination: Sequence[str] | None = None,
        summary_after_messages: int | None = None,
        summary_after_seconds: float | None = None,
        recap_debounce_seconds: float | None = None,
        writers: Sequence[str] | None = None,
    ) -> ChannelConfig:
        """Change the channel's configuration (what is not given is kept), e.g. when its work
        is over: `termination=["all-commitments-resolved", "escalate-on-decline:1"]`.
        `writers` (agent names or `role:x`; `[]`: anyone) limits who may write: the fold
        dead-letters a message from any other sender. An unknown condition or a value out
        of range raises `ValueError`."""
        return await configure_channel(
            self.settings,
            channel,
            termination=list(termination) if termination is not None else None,
            summary_after_messages=summary_after_messages,
            summary_after_seconds=summary_after_seconds,
            recap_debounce_seconds=recap_debounce_seconds,
            writers=list(writers) if writers is not None else None,
        )

    # --- driver events ------------------------------------------------------------------------

    async def wait(
        self,
        channel: str,
        *,
        until: Callable[[DriverEvent], bool] = decided,
        after: SentMessage | Message | int | None = None,
        timeout: float | None = None,
    ) -> DriverEvent:
        """The driver event of `channel` that satisfies `until` (by default the first
        decision other than CONTINUE).

        Without `after`: at once when the channel's latest event already does (is it
        decided?). With `after` (a message you sent, one you received, or a partition
        offset of the channel's messages): the first event for that message or a later one
        that does, never one before it (what came of my message?). Raises `WaitTimeout`
        after `timeout` seconds."""
        seen = _Counted(until)
        start = _start_of(channel, after)
        return await self._waited(
            wait_for_event(self.settings, channel, seen, after=start),
            channel,
            timeout,
            seen.count,
            "no driver event satisfied the condition",
        )

    async def wait_for(
        self, request: SentMessage, *, timeout: float | None = None
    ) -> RequestOutcome:
        """Wait until the request you sent (a QUERY, COMMAND, PROPOSE or HANDOFF) has ended,
        and say how: `RequestOutcome.state` (FULFILLED, DECLINED, FAILED or EXPIRED), the
        commitment whole, the driver event of the message that ended it and that message
        (`RequestOutcome.message`, read from the log: the answer's content whole). A
        hand-off is followed to the commitment it opened. Raises `WaitTimeout` after
        `timeout` seconds, `ValueError` for a message that asks nothing."""
        correlation_id = request.correlation_id
        if correlation_id is None or not states_a_request(request.message):
            raise ValueError(
                f"message {request.id!r} is a {request.message.type.value}, not a request "
                "(QUERY, COMMAND, PROPOSE or HANDOFF): no commitment to wait for"
            )
        watch = RequestWatch(correlation_id)
        return await self._waited(
            wait_for_request(self.settings, request.channel, watch, after=After(request.offset)),
            request.channel,
            timeout,
            lambda: watch.seen,
            f"request {correlation_id!r} did not end",
        )

    async def _waited(
        self,
        waiting: Awaitable[T],
        channel: str,
        timeout: float | None,
        seen: Callable[[], int],
        what: str,
    ) -> T:
        """`waiting` within `timeout`; `WaitTimeout` says what did not happen, and when no
        driver event of the channel came at all, the likely cause."""
        try:
            return await asyncio.wait_for(waiting, timeout=timeout)
        except TimeoutError:
            if seen():
                raise WaitTimeout(f"channel {channel!r}: {what} within {timeout:g} s") from None
            raise WaitTimeout(
                f"channel {channel!r}: no driver event came within {timeout:g} s: is a worker "
                f"folding {self.settings.topic(MESSAGES)}? (check CHORUS_BOOTSTRAP_SERVERS "
                f"and CHORUS_TOPIC_PREFIX={self.settings.topic_prefix!r}, as the worker has "
                "them)"
            ) from None

    def events(
        self,
        channel: str | None = None,
        *,
        until: Callable[[DriverEvent], bool] | None = None,
        from_beginning: bool = False,
    ) -> AsyncIterator[DriverEvent]:
        """Driver events (of one channel, or all), each once, in per-channel order; the
        event that satisfies `until` is the last."""
        return driver_events(
            self.settings, channel=channel, until=until, from_beginning=from_beginning
        )

    # --- views from the worker ----------------------------------------------------------------

    async def messages(
        self,
        channel: str,
        *,
        after: int | None = None,
        for_agent: str | None = None,
        limit: int = DEFAULT_MESSAGES,
    ) -> dict[str, Any]:
        """The channel's messages read from the log by position after offset `after` (from
        the start when None), whole (`messages`: each with its `offset`), at most `limit`;
        with `for_agent`, those addressed to that agent and the replies to its requests.
        Pass `next` as `after` to go on; `more` says whether the log holds more."""
        found: dict[str, Any] = await self._api.messages(channel, after, for_agent, limit)
        return found

    async def context(
        self,
        channel: str,
        *,
        max_tokens: int = DEFAULT_CONTEXT_TOKENS,
        for_agent: str | None = None,
    ) -> AgentContext:
        """What an agent should read first, within `max_tokens`; with `for_agent`, written
        for that agent (what it owes first)."""
        query = {"max_tokens": max_tokens, **({"for": for_agent} if for_agent else {})}
        answer = await self._channel_view(channel, f"context?{urlencode(query)}")
        return AgentContext.from_json(channel, answer)

    async def state(self, channel: str) -> dict[str, Any]:
        """Every projection's state of the channel, its offset and the channel's config."""
        found: dict[str, Any] = await self._channel_view(channel, "state")
        return found

    async def summary(self, channel: str) -> dict[str, Any]:
        """The channel's running summary (`content` None when there is none yet); from
        `chorus.summaries` when no worker answers."""
        return await self._view_or_latest(channel, "summary")

    async def recap(self, channel: str) -> dict[str, Any]:
        """The channel's recap status and latest recap; from `chorus.recaps` (no countdown)
        when no worker answers."""
        return await self._view_or_latest(channel, "recap")

    async def _channel_view(self, channel: str, view: str) -> Any:
        found = await self._api.get(f"/channels/{quote(channel)}/{view}", missing_ok=True)
        if found is None:
            raise ChannelNotFound(f"no messages folded for channel {channel!r} (HTTP 404)")
        return found

    async def _view_or_latest(self, channel: str, view: LatestView) -> dict[str, Any]:
        found: dict[str, Any]
        found, _ = await view_or_latest(
            self.settings, view, channel, lambda: self._channel_view(channel, view)
        )
        return found


def _blocking(
    method: Callable[Concatenate[Client, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[SyncClient, P], T]:
    """`method` of the async client, run on the sync client's loop until it returns."""

    def call(self: SyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._client, *args, **kwargs))

    call.__name__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class SyncClient:
    """The client for scripts and notebooks: the same methods, blocking. It runs a `Client`
    on an event loop of its own, in a daemon thread; `close()` (or leaving the `with`
    block) stops both."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        patience: float = NOT_READY_PATIENCE_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="chorus-client", daemon=True
        )
        self._thread.start()
        self._client = self._run(_made_on_this_loop(settings, patience, transport))

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    send = _blocking(Client.send)
    reply = _blocking(Client.reply)
    configure = _blocking(Client.configure)
    wait = _blocking(Client.wait)
    wait_for = _blocking(Client.wait_for)
    messages = _blocking(Client.messages)
    context = _blocking(Client.context)
    state = _blocking(Client.state)
    summary = _blocking(Client.summary)
    recap = _blocking(Client.recap)

    def events(
        self,
        channel: str | None = None,
        *,
        until: Callable[[DriverEvent], bool] | None = None,
        from_beginning: bool = False,
    ) -> Iterator[DriverEvent]:
        """`Client.events`, as a blocking iterator."""
        events = self._client.events(channel, until=until, from_beginning=from_beginning)
        try:
            while True:
                try:
                    yield self._run(_next(events))
                except StopAsyncIteration:
                    return
        finally:
            self._run(_closed(events))

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self._client.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


async def _made_on_this_loop(
    settings: Settings | None, patience: float, transport: httpx.AsyncBaseTransport | None
) -> Client:
    """A client made on the loop that will use it (its lock and HTTP client belong there)."""
    return Client(settings, patience=patience, transport=transport)


async def _next(events: AsyncIterator[DriverEvent]) -> DriverEvent:
    return await anext(events)


async def _closed(events: AsyncIterator[DriverEvent]) -> None:
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()
