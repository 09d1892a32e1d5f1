"""`chorus mcp`: get_channel_summary, get_channel_state and list_channels for agents (stdio)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from streams.settings import Settings
from streams.worker_api import WorkerApi


def build_server(settings: Settings) -> MCPServer:
    server: MCPServer = MCPServer(
        "chorus",
        instructions=(
            "Read a channel's summary before its history: get_channel_summary gives the "
            "running summary, get_channel_state the open commitments and participants."
        ),
    )

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
