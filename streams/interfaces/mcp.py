"""`chorus mcp`: get_channel_context, get_channel_summary, get_channel_state and list_channels
for agents (stdio).

Each tool answers with text content an agent reads as it is (the context's text, or JSON)
and, where it has parts, the same answer as structured content. A failure is a tool error
(`isError`) whose text says why in one line: the worker is down, the channel is unknown,
the name or the budget breaks a rule.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

import orjson
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

from projections.context import DEFAULT_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS, budget_refusal
from projections.model import channel_name_refusal
from streams.errors import ChorusError
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

INSTRUCTIONS = (
    "Call get_channel_context(channel, max_tokens, for_agent) first, before deciding whether "
    "to read a channel's history: within your token budget it says where the channel stands "
    "(its termination decision), the open commitments (what was asked, who owes it, since "
    "when), what ended without being fulfilled, the newest messages, the summary of what "
    "was said and the recap. Pass for_agent (your sender name or role) to see first what you "
    "owe and what is owed to you. get_channel_summary gives the summary alone with its "
    "annotations, get_channel_state every projection's full state and the decision, "
    "list_channels the channels with their decisions."
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


async def _ask(
    settings: Settings, call: Callable[[WorkerApi], Awaitable[CallToolResult]]
) -> CallToolResult:
    try:
        async with WorkerApi(settings) as api:
            return await call(api)
    except ChorusError as error:
        return refused(str(error))


def build_server(settings: Settings, log_level: LogLevel = "WARNING") -> MCPServer:
    """The server; it logs at `log_level` and above (an agent host shows the server's
    stderr in its log: one line per HTTP call at INFO would drown what matters)."""
    server: MCPServer = MCPServer(
        "chorus", version=package_version(), instructions=INSTRUCTIONS, log_level=log_level
    )

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

        return await _ask(settings, call)

    @server.tool(structured_output=False)
    async def get_channel_summary(channel: str) -> CallToolResult:
        """The channel's latest summary: content (null when none yet) and annotations."""
        reason = channel_name_refusal(channel)
        if reason is not None:
            return refused(reason)

        async def call(api: WorkerApi) -> CallToolResult:
            summary: dict[str, Any] = await api.summary(channel)
            return answered(summary, summary)

        return await _ask(settings, call)

    @server.tool(structured_output=False)
    async def get_channel_state(channel: str) -> CallToolResult:
        """Every projection's state of the channel (commitments, overview, ...) and its
        termination decision (`decision`: CONTINUE, COMPLETE, FAILED or ESCALATE)."""
        reason = channel_name_refusal(channel)
        if reason is not None:
            return refused(reason)

        async def call(api: WorkerApi) -> CallToolResult:
            state = await api.state(channel)
            if state is None:
                return refused(f"no messages folded for channel {channel!r}")
            return answered(state, state)

        return await _ask(settings, call)

    @server.tool(structured_output=False)
    async def list_channels() -> CallToolResult:
        """The channels the worker has folded, each with its decision."""

        async def call(api: WorkerApi) -> CallToolResult:
            decisions = await api.channel_decisions()
            listed = {"channels": sorted(decisions), "decisions": decisions}
            return answered(listed, listed)

        return await _ask(settings, call)

    return server
