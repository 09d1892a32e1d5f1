"""streams.interfaces.mcp without a worker: the tools, and the refusals that need no worker."""

from __future__ import annotations

import pytest
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

from streams.interfaces.mcp import answered, build_server, refused
from streams.settings import Settings
from streams.worker.read_model import MAX_CONTEXT_TOKENS


@pytest.fixture
def server() -> MCPServer:
    return build_server(Settings(_env_file=None))  # type: ignore[call-arg]


def _text(result: CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


async def test_the_four_tools_are_listed(server: MCPServer) -> None:
    names = [tool.name for tool in await server.list_tools()]
    assert names == [
        "get_channel_context",
        "get_channel_summary",
        "get_channel_state",
        "list_channels",
    ]


@pytest.mark.parametrize(
    "tool", ["get_channel_context", "get_channel_summary", "get_channel_state"]
)
async def test_an_invalid_channel_is_refused_in_one_line(server: MCPServer, tool: str) -> None:
    result = await server.call_tool(tool, {"channel": "Bad Name"})
    assert result.is_error
    assert _text(result).startswith("invalid channel name 'Bad Name'")


async def test_a_budget_out_of_range_is_refused(server: MCPServer) -> None:
    result = await server.call_tool(
        "get_channel_context", {"channel": "team/a", "max_tokens": MAX_CONTEXT_TOKENS + 1}
    )
    assert result.is_error
    assert (
        _text(result)
        == f"max_tokens must be between 0 and {MAX_CONTEXT_TOKENS}, got {MAX_CONTEXT_TOKENS + 1}"
    )


def test_an_answer_is_text_and_structured_content() -> None:
    result = answered({"a": 1}, {"a": 1})
    assert _text(result) == '{"a":1}'
    assert result.structured_content == {"a": 1}
    assert not result.is_error
    assert _text(answered("plain")) == "plain"
    assert refused("no worker").is_error
