"""`chorus mcp`: agents take part in channels over MCP (stdio or streamable HTTP).

Tools that take part: send_message, reply, wait_for_reply, check_messages, my_commitments,
configure_channel; tools that read: get_channel_context, get_channel_summary,
get_channel_state, list_channels. Resource templates for a channel's context, state and
summary, with a change notification to a client that listens (`subscriptions/listen`)
whenever the channel's driver events say its state changed.

Each tool answers with text content an agent reads as it is and, where it has parts, the
same answer as structured content. A refusal is a tool error (`isError`) whose text says why
in one line: no identity for a tool that acts as an agent, a rule the message breaks (the
fold's own words), a sender the channel's writers leave out, the worker down, the channel
unknown.

Identity (`streams.interfaces.mcp_agents`): over stdio the server is one agent (`--as NAME`,
or CHORUS_AGENT); over HTTP each request's bearer token names its agent. No tool takes a
sender. Messages go to `chorus.messages` from this process (the channel's writers checked
first); the views come from the worker's HTTP API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

import anyio
import orjson
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp_types import CallToolResult, TextContent

from projections.commitments import CommitmentProjection, states_a_request
from projections.context import DEFAULT_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS, budget_refusal
from projections.inbox import DEFAULT_MESSAGES, commitments_for
from projections.model import Message, MessageError, channel_name_refusal
from streams.agents.identity import AgentTokens
from streams.agents.sending import WritersUnknown, agent_message, sent_answer
from streams.errors import ChorusError
from streams.interfaces.control import configure_channel as write_config
from streams.interfaces.driver_events import RequestOutcome, RequestWatch, wait_for_request
from streams.interfaces.mcp_agents import (
    RESOURCE_TEMPLATE,
    AgentServices,
    AgentTokenVerifier,
    HubLost,
    caller_over_http,
)
from streams.interfaces.worker_api import WorkerApi
from streams.settings import Settings

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
# `chorus mcp --loglevel`'s choices.
LOG_LEVELS: dict[str, LogLevel] = {
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "error": "ERROR",
}
Transport = Literal["stdio", "http"]
# Where `chorus mcp --transport http` listens by default, and its path.
HTTP_HOST = "127.0.0.1"
HTTP_PORT = 8765
HTTP_PATH = "/mcp"
# How long an HTTP server stopping lets its open sessions finish.
SHUTDOWN_SECONDS = 5
# The most channels list_channels answers (page after page of the cluster's).
LISTED_CHANNELS = 1000
# A waiting wait_for_reply tells a caller that asked for progress this often.
PROGRESS_SECONDS = 10.0

INSTRUCTIONS = (
    "You take part in chorus channels as the agent this server names you. Read first: "
    "get_channel_context(channel, max_tokens, for_agent) says where a channel stands (its "
    "decision), what is owed and by whom, the newest messages and the summary. Take part: "
    "check_messages(channel, after) lists what is addressed to you and the replies to your "
    "requests, each whole, with a cursor (`next`) to pass as `after` next time; "
    "send_message(channel, type, ...) posts a QUERY, COMMAND, STATUS, ... as you; "
    "reply(channel, to, type, content) answers a message (RESPONSE or DONE fulfils a "
    "request, DECLINE or FAILURE ends it, STATUS acknowledges it); "
    "wait_for_reply(channel, request_id) blocks until a request you sent has ended and "
    "answers how, with the answer's content. my_commitments(channel) lists what you owe and "
    "are owed; configure_channel sets a channel's termination, summaries and writers."
)

# get_channel_context's description (a docstring could not name the maximum).
CONTEXT_TOOL = (
    "What to read first about a channel, within max_tokens (about 4 characters a token, up "
    f"to {MAX_CONTEXT_TOKENS}; at least what its header line needs, about 30, else the "
    "answer says the minimum): its decision, open commitments, what ended badly, the newest "
    "messages, the summary and the recap. for_agent (a sender name or role) puts what that "
    "agent owes and is owed first. The text is the content; the parts are structured content."
)


def package_version() -> str:
    try:
        return version("chorus")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "0"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def answered(text: Any, structured: dict[str, Any] | None = None) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=_text(text))], structured_content=structured
    )


def refused(reason: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=reason)], is_error=True)


def no_identity(tool: str) -> str:
    return (
        f"{tool} acts as an agent and this server names none: start it as one "
        "(`chorus mcp --as NAME`, or CHORUS_AGENT) over stdio, or call it with an agent's "
        "bearer token over HTTP"
    )


async def _ask(
    services: AgentServices, call: Callable[[WorkerApi], Awaitable[CallToolResult]]
) -> CallToolResult:
    try:
        return await call(services.api)
    except ChorusError as error:
        return refused(str(error))


async def _folded(api: WorkerApi, channel: str) -> dict[str, Any]:
    """The channel's state; a ChorusError when no worker folded it."""
    state: dict[str, Any] | None = await api.state(channel)
    if state is None:
        raise ChorusError(f"no messages folded for channel {channel!r}")
    return state


def message_line(entry: dict[str, Any]) -> str:
    """A message as check_messages shows it: its position, who to whom, its ids, and its
    content whole."""
    to = f" → {entry['target']}" if entry.get("target") else ""
    ids = [f"id {entry['id']}"]
    if entry.get("correlation_id"):
        ids.append(f"correlation_id {entry['correlation_id']}")
    if entry.get("in_reply_to"):
        ids.append(f"in reply to {entry['in_reply_to']}")
    head = f"[offset {entry['offset']}] {entry['sender']}{to}, {entry['type']} ({'; '.join(ids)})"
    return f"{head}: {entry['content']}" if entry.get("content") else head


def _ended_by(message: Message | None) -> dict[str, Any] | None:
    if message is None:
        return None
    return {
        "id": message.id,
        "sender": message.sender,
        "type": message.type.value,
        "content": message.content,
        "created_at": message.created_at.isoformat(),
    }


def build_server(
    settings: Settings,
    log_level: LogLevel = "WARNING",
    *,
    agent: str | None = None,
    tokens: AgentTokens | None = None,
    services: AgentServices | None = None,
) -> MCPServer:
    """The server; it logs at `log_level` and above (an agent host shows the server's
    stderr in its log: one line per HTTP call at INFO would drown what matters).

    With `tokens` it is served over HTTP, each request's bearer token naming its agent;
    else its agent is `agent` (None: it only reads)."""
    services = services or AgentServices(settings)
    auth: dict[str, Any] = {}
    if tokens is not None:
        auth = {
            "auth": AuthSettings(issuer_url=f"http://{HTTP_HOST}", resource_server_url=None),
            "token_verifier": AgentTokenVerifier(tokens),
        }
    server: MCPServer = MCPServer(
        "chorus",
        version=package_version(),
        instructions=INSTRUCTIONS,
        log_level=log_level,
        subscriptions=services.bus,
        **auth,
    )

    def caller() -> str | None:
        return caller_over_http() if tokens is not None else agent

    def acting(tool: str, channel: str) -> str | CallToolResult:
        """The agent calling `tool` on `channel`, or the refusal: no identity, or a channel
        name that breaks the rule."""
        me = caller()
        if me is None:
            return refused(no_identity(tool))
        reason = channel_name_refusal(channel)
        return refused(reason) if reason is not None else me

    # --- reading --------------------------------------------------------------------------

    @server.tool(structured_output=False, description=CONTEXT_TOOL)
    async def get_channel_context(
        channel: str, max_tokens: int = DEFAULT_CONTEXT_TOKENS, for_agent: str | None = None
    ) -> CallToolResult:
        reason = channel_name_refusal(channel) or budget_refusal(max_tokens)
        if reason is not None:
            return refused(reason)

        async def call(api: WorkerApi) -> CallToolResult:
            found: dict[str, Any] = await api.context(channel, max_tokens, for_agent)
            least = found.get("min_tokens")
            if isinstance(least, int) and max_tokens < least:
                return refused(
                    f"max_tokens {max_tokens} is below the {least} tokens the header line of "
                    f"channel {channel!r} needs: ask for at least {least}"
                )
            return answered(found["text"], found)

        return await _ask(services, call)

    @server.tool(structured_output=False)
    async def get_channel_summary(channel: str) -> CallToolResult:
        """The channel's latest summary: content (null when none yet) and annotations."""
        reason = channel_name_refusal(channel)
        if reason is not None:
            return refused(reason)

        async def call(api: WorkerApi) -> CallToolResult:
            summary: dict[str, Any] = await api.summary(channel)
            return answered(summary, summary)

        return await _ask(services, call)

    @server.tool(structured_output=False)
    async def get_channel_state(channel: str) -> CallToolResult:
        """Every projection's state of the channel (commitments, overview, ...) and its
        termination decision (`decision`: CONTINUE, COMPLETE, FAILED or ESCALATE)."""
        reason = channel_name_refusal(channel)
        if reason is not None:
            return refused(reason)

        async def call(api: WorkerApi) -> CallToolResult:
            state = await _folded(api, channel)
            return answered(state, state)

        return await _ask(services, call)

    @server.tool(structured_output=False)
    async def list_channels() -> CallToolResult:
        """Every channel the cluster's fold workers hold, in name order, each with its
        decision (the first 1,000; `more` says when there are more), or, when a worker
        cannot answer, which one and why."""

        async def call(api: WorkerApi) -> CallToolResult:
            decisions: dict[str, Any] = {}
            after: str | None = None
            while True:
                page = await api.cluster_channels(after)
                decisions.update(page["decisions"])
                after = page.get("next")
                if after is None or len(decisions) >= LISTED_CHANNELS:
                    break
            names = sorted(decisions)[:LISTED_CHANNELS]
            listed = {
                "channels": names,
                "decisions": {name: decisions[name] for name in names},
                "more": after is not None,
            }
            return answered(listed, listed)

        return await _ask(services, call)

    # --- taking part ----------------------------------------------------------------------

    async def send(tool: str, channel: str, fields: dict[str, Any]) -> CallToolResult:
        me = acting(tool, channel)
        if isinstance(me, CallToolResult):
            return me
        try:
            message = agent_message(me, channel, fields)
        except MessageError as error:
            return refused(error.reason)
        request = states_a_request(message)
        try:
            if request:  # followed from before it is sent: its answer cannot slip past
                await services.hub.ready()
                services.hub.track(message)
            sent = await services.sender.send(message)
        except (ChorusError, OSError) as error:
            services.hub.untrack(message.id)
            if isinstance(error, MessageError):
                return refused(error.reason)
            return refused(f"{tool} did not send: {error}")
        services.sent(sent)
        answer = sent_answer(sent)
        kind = sent.message.type.value
        text = (
            f"Sent {kind} {sent.id} to {channel} as {me} (partition {sent.partition}, offset "
            f"{sent.offset}, correlation_id {sent.correlation_id})."
        )
        if states_a_request(sent.message):
            text += f" wait_for_reply(channel, request_id={sent.id!r}) waits for its answer."
        return answered(text, answer)

    @server.tool(structured_output=False)
    async def send_message(
        channel: str,
        type: str,
        content: str | None = None,
        target: str | None = None,
        correlation_id: str | None = None,
        in_reply_to: str | None = None,
        deadline_seconds: float | None = None,
        topic: str | None = None,
    ) -> CallToolResult:
        """Post a message to a channel as you. type: QUERY, COMMAND or PROPOSE ask (each
        opens a commitment: target names who owes it, instance:<id> or role:<name>;
        deadline_seconds bounds it; a correlation_id is made when none is given); STATUS
        says how it goes, RESPONSE or DONE fulfil a request, DECLINE or FAILURE end it (with
        content saying why), HANDOFF passes it on to target (these take in_reply_to and
        correlation_id: reply does that for you). Answers the message's id, correlation_id,
        partition and offset. Refused, with the rule, when the message breaks one or the
        channel's writers leave you out."""
        fields = {
            "type": type,
            "content": content,
            "target": target,
            "correlation_id": correlation_id,
            "in_reply_to": in_reply_to,
            "deadline_seconds": deadline_seconds,
            "topic": topic,
        }
        return await send("send_message", channel, fields)

    @server.tool(structured_output=False)
    async def reply(channel: str, to: str, type: str, content: str | None = None) -> CallToolResult:
        """Answer the message `to` (its id, as check_messages or send_message gave it) of the
        channel: its correlation_id and in_reply_to are taken from it. type: RESPONSE
        (answers a QUERY), DONE (a COMMAND or PROPOSE is done), DECLINE or FAILURE (content:
        why), STATUS (acknowledged, working on it)."""
        me = acting("reply", channel)
        if isinstance(me, CallToolResult):
            return me
        try:
            found = await services.find(channel, to)
        except ChorusError as error:
            return refused(f"cannot find message {to!r}: {error}")
        if found is None:
            return refused(
                f"no message {to!r} known in channel {channel!r}: reply to one check_messages "
                "gave you (or send_message with in_reply_to and correlation_id)"
            )
        fields = {
            "type": type,
            "content": content,
            "in_reply_to": to,
            "correlation_id": found.correlation_id,
        }
        return await send("reply", channel, fields)

    @server.tool(structured_output=False)
    async def wait_for_reply(
        channel: str, request_id: str, ctx: Context, timeout_seconds: float = 60
    ) -> CallToolResult:
        """Wait until the request `request_id` (a QUERY, COMMAND, PROPOSE or HANDOFF of the
        channel) has ended, following a hand-off, or until timeout_seconds pass (at most
        CHORUS_AGENT_MAX_WAIT_SECONDS). Answers {state, ended_by: {id, sender, type, content,
        created_at} | null, decision, still_open}: FULFILLED with the answer's content, or
        DECLINED, FAILED, EXPIRED; a timeout answers still_open true (call it again to go on
        waiting). Sends progress notifications while it waits when you ask for them."""
        reason = channel_name_refusal(channel)
        if reason is not None:
            return refused(reason)
        if timeout_seconds < 0:
            return refused(f"timeout_seconds must be 0 or more, got {timeout_seconds:g}")
        longest = min(timeout_seconds, settings.agent_max_wait_seconds)
        started = time.monotonic()
        tracked = services.hub.tracked.get(request_id)
        if tracked is not None and tracked.channel == channel:
            try:
                outcome = await _waited(services.outcome(tracked), longest, ctx, request_id)
                return _wait_answer(request_id, tracked.watch, outcome, longest, timeout_seconds)
            except HubLost:
                longest -= time.monotonic() - started  # what is left, waited the long way
        try:
            found = await services.find(channel, request_id)
        except ChorusError as error:
            return refused(f"cannot find request {request_id!r}: {error}")
        if found is None or not found.is_request or found.correlation_id is None:
            return refused(
                f"no request {request_id!r} in channel {channel!r}: not one this server "
                "sent or read, and no commitment of the fold was opened by it"
            )
        watch = RequestWatch(found.correlation_id)
        waiting = wait_for_request(settings, channel, watch, after=found.after)
        try:
            outcome = await _waited(waiting, longest, ctx, request_id)
        except ChorusError as error:
            return refused(f"wait_for_reply stopped: {error}")
        return _wait_answer(request_id, watch, outcome, longest, timeout_seconds)

    @server.tool(structured_output=False)
    async def check_messages(
        channel: str, after: int | None = None, limit: int = DEFAULT_MESSAGES
    ) -> CallToolResult:
        """The channel's messages for you, oldest first, each whole: those addressed to you
        (your name, role:<name> or instance:<name>) and the replies to your requests. Read
        from the log by position: pass the answer's `next` as `after` to get only newer
        ones (none: from the channel's start); `more` says whether the log holds more."""
        me = acting("check_messages", channel)
        if isinstance(me, CallToolResult):
            return me
        if not 1 <= limit <= settings.agent_messages_limit:
            return refused(
                f"limit must be between 1 and {settings.agent_messages_limit}, got {limit}"
            )

        async def call(api: WorkerApi) -> CallToolResult:
            page: dict[str, Any] = await api.messages(channel, after, me, limit)
            for entry in page["messages"]:
                fields = {k: v for k, v in entry.items() if k != "offset"}
                services.remember(Message.model_validate(fields), entry["offset"])
            lines = [message_line(entry) for entry in page["messages"]]
            head = (
                f"{len(lines)} message{'s' if len(lines) != 1 else ''} for {me} in {channel} "
                f"(next: {page['next']}; more: {str(page['more']).lower()})"
            )
            return answered("\n".join([head + (":" if lines else "."), *lines]), page)

        return await _ask(services, call)

    @server.tool(structured_output=False)
    async def my_commitments(channel: str) -> CallToolResult:
        """What you owe (`owes`) and are owed (`owed`) in the channel now, from the fold:
        each open commitment with who asked, who owes it, what was asked and since when."""
        me = acting("my_commitments", channel)
        if isinstance(me, CallToolResult):
            return me

        async def call(api: WorkerApi) -> CallToolResult:
            state = await _folded(api, channel)
            folded = state["projections"].get(CommitmentProjection.name) or {}
            held = commitments_for(folded.get("state"), me)
            mine = {"agent": me, "offset": folded.get("offset"), **held}
            owes = [f"- {c['line']} (request {c['request_id']})" for c in held["owes"]]
            owed = [f"- {c['line']} (request {c['request_id']})" for c in held["owed"]]
            text = "\n".join(
                [
                    f"{me} in {channel}, as of partition offset {mine['offset']}:",
                    f"You owe ({len(owes)}):" if owes else "You owe nothing.",
                    *owes,
                    f"Owed to you ({len(owed)}):" if owed else "Nothing is owed to you.",
                    *owed,
                ]
            )
            return answered(text, mine)

        return await _ask(services, call)

    @server.tool(structured_output=False)
    async def configure_channel(
        channel: str,
        termination: list[str] | None = None,
        summary_after_messages: int | None = None,
        summary_after_seconds: float | None = None,
        recap_debounce_seconds: float | None = None,
        writers: list[str] | None = None,
    ) -> CallToolResult:
        """Change the channel's configuration; what is not given is kept. termination:
        conditions such as all-commitments-resolved, fail-on-failure:0,
        escalate-on-decline:1, max-messages:N, never. writers: who may write (agent names
        or role:<name>; [] lets anyone): the fold refuses any other sender. A channel with
        writers is configured by its writers only."""
        me = acting("configure_channel", channel)
        if isinstance(me, CallToolResult):
            return me
        try:
            refusal = await services.sender.configure_refusal(me, channel)
            if refusal is not None:
                return refused(refusal)
            config = await write_config(
                settings,
                channel,
                termination=termination,
                summary_after_messages=summary_after_messages,
                summary_after_seconds=summary_after_seconds,
                recap_debounce_seconds=recap_debounce_seconds,
                writers=writers,
            )
        except (ValueError, WritersUnknown) as error:
            return refused(str(error).splitlines()[0])
        dumped = config.model_dump(mode="json")
        return answered(f"Configured {channel}: {_text(dumped)}", dumped)

    # --- resources ------------------------------------------------------------------------

    async def view(channel: str, read: Callable[[WorkerApi], Awaitable[Any]]) -> str:
        reason = channel_name_refusal(channel)
        if reason is not None:
            raise ResourceError(reason)
        try:
            found = await read(services.api)
        except ChorusError as error:
            raise ResourceError(str(error)) from None
        if found is None:
            raise ResourceError(f"no messages folded for channel {channel!r}")
        return _text(found)

    resources: dict[str, tuple[str, Callable[[WorkerApi, str], Awaitable[Any]]]] = {
        "context": (
            "The channel's context (get_channel_context with the default budget)",
            lambda api, channel: api.context(channel, DEFAULT_CONTEXT_TOKENS),
        ),
        "state": (
            "Every projection's state of the channel and its decision",
            lambda api, channel: api.state(channel),
        ),
        "summary": ("The channel's latest summary", lambda api, channel: api.summary(channel)),
    }

    def resource_of(
        read: Callable[[WorkerApi, str], Awaitable[Any]],
    ) -> Callable[[str], Awaitable[str]]:
        async def resource(channel: str) -> str:
            return await view(channel, lambda api: read(api, channel))

        return resource

    for name, (description, read) in resources.items():
        server.resource(
            RESOURCE_TEMPLATE.format(view=name),
            name=f"channel_{name}",
            mime_type="application/json",
            description=description,
        )(resource_of(read))

    return server


async def _waited(
    wait: Awaitable[RequestOutcome], longest: float, ctx: Context, request_id: str
) -> RequestOutcome | None:
    """The outcome, or None once `longest` seconds passed (the wait is cancelled); a
    progress notification every PROGRESS_SECONDS meanwhile (when the caller asked)."""
    started = time.monotonic()
    waiting = asyncio.ensure_future(wait)
    try:
        while True:
            left = longest - (time.monotonic() - started)
            if left <= 0:
                return None
            done, _ = await asyncio.wait({waiting}, timeout=min(left, PROGRESS_SECONDS))
            if done:
                return waiting.result()
            waited = time.monotonic() - started
            await ctx.report_progress(
                waited, longest, f"waiting for a reply to {request_id}: {waited:.0f} s"
            )
    finally:
        waiting.cancel()


def _wait_answer(
    request_id: str,
    watch: RequestWatch,
    outcome: RequestOutcome | None,
    longest: float,
    asked: float,
) -> CallToolResult:
    decision = outcome.event.decision if outcome is not None else watch.decision
    state = outcome.state if outcome is not None else watch.state
    answer = {
        "request_id": request_id,
        "correlation_id": watch.correlation_id,
        "state": state.value if state is not None else None,
        "ended_by": _ended_by(outcome.message) if outcome is not None else None,
        "decision": decision.model_dump(mode="json") if decision is not None else None,
        "still_open": outcome is None,
    }
    said = f"decision {decision.decision.value}" if decision is not None else "no decision yet"
    if outcome is None:
        capped = f" (the most a wait lasts: {longest:g} s)" if asked > longest else ""
        text = (
            f"Request {request_id} is still open after {longest:g} s{capped}"
            f" ({answer['state'] or 'not folded yet'}); {said}. Call wait_for_reply again "
            "to go on waiting."
        )
        return answered(text, answer)
    ended = outcome.message
    by = f" by {ended.sender} ({ended.type.value})" if ended is not None else ""
    text = f"Request {request_id} ended {outcome.state.value}{by}; {said}."
    if ended is not None and ended.content:
        text += f"\n{ended.content}"
    return answered(text, answer)


def serve(
    settings: Settings,
    log_level: LogLevel,
    transport: Transport,
    *,
    agent: str | None = None,
    host: str = HTTP_HOST,
    port: int = HTTP_PORT,
) -> None:
    """Run the server until its input ends (stdio) or it is stopped (HTTP)."""
    services = AgentServices(settings)
    if transport == "stdio":
        server = build_server(settings, log_level, agent=agent, services=services)

        async def over_stdio() -> None:
            try:
                await server.run_stdio_async()
            finally:
                await services.stop()

        anyio.run(over_stdio)
        return
    tokens = AgentTokens.of(settings)
    if tokens is None:
        raise ChorusError(
            "chorus mcp --transport http needs CHORUS_AGENT_TOKENS_FILE: over HTTP each "
            "request's bearer token names its agent (a `NAME TOKEN` line per agent)"
        )
    server = build_server(settings, log_level, tokens=tokens, services=services)
    anyio.run(_over_http, server, services, host, port, log_level)


async def _over_http(
    server: MCPServer, services: AgentServices, host: str, port: int, log_level: LogLevel
) -> None:
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
    sessions = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(starlette: Any) -> Any:
        async with sessions(starlette):
            try:
                yield
            finally:
                await services.stop()

    app.router.lifespan_context = lifespan
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        # Sessions hold streams open: on SIGTERM they get this long, then are closed.
        timeout_graceful_shutdown=SHUTDOWN_SECONDS,
    )
    await uvicorn.Server(config).serve()
