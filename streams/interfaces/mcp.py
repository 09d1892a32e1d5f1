"""`chorus mcp`: get_channel_context, get_channel_summary, get_channel_state and list_channels
for agents (stdio)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from streams.interfaces.worker_api import WorkerApi
from streams.settings import Settings


def build_server(settings: Settings) -> MCPServer:
    server: MCPServer = MCPServer(
        "chorus",
        instructions=(
            "Call get_channel_context(channel, max_tokens) first, before deciding whether to "
            "read a channel's history: within your token budget it gives the running summary, "
            "the open commitments (what was asked, who owes it, since when), the latest recap "
            "and the most recent messages verbatim, and says what it had to cut. "
            "get_channel_summary gives the summary alone with its annotations, "
            "get_channel_state every projection's full state."
        ),
    )

    @server.tool()
    async def get_channel_context(channel: str, max_tokens: int = 1000) -> dict[str, Any]:
        """The best context of the channel within max_tokens (about 4 characters a token):
        `text` to read, and `parts` (summary, commitments, recap, messages) as JSON."""
        async with WorkerApi(settings) as api:
            found: dict[str, Any] = await api.context(channel, max_tokens)
            return found

    @server.tool()
    async def get_channel_summary(channel: str) -> dict[str, Any]:
        """The channel's latest summary: content (null when none yet) and annotations."""
        async with WorkerApi(settings) as api:
            summary: dict[str, Any] = await api.summary(channel)
            return summary

    @server.tool()
    async def get_channel_state(channel: str) -> dict[str, Any]:
        """Every projection's state of the channel (commitments, overview, ...)."""
        async with WorkerApi(settings) as api:
            state = await api.state(channel)
            return state if state is not None else {"channel": channel, "projections": {}}

    @server.tool()
    async def list_channels() -> list[str]:
        """The channels the worker has folded."""
        async with WorkerApi(settings) as api:
            return await api.channels()

    return server
