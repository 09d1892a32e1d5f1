"""streams.interfaces.mcp without a worker: the tools, the refusals, tiny budgets (the
worker's answer stubbed). What `chorus mcp` logs, a process, is in tests/integration."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

from projections.context import MAX_CONTEXT_TOKENS, budget_refusal
from streams.interfaces.mcp import answered, build_server, refused
from streams.interfaces.worker_api import WorkerApi
from streams.settings import Settings


@pytest.fixture
def server() -> MCPServer:
    return build_server(Settings(_env_file=None))  # type: ignore[call-arg]


def _text(result: CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


async def test_the_tools_that_read_and_those_that_take_part_are_listed(server: MCPServer) -> None:
    names = [tool.name for tool in await server.list_tools()]
    assert names == [
        "get_channel_context",
        "get_channel_summary",
        "get_channel_state",
        "list_channels",
        "send_message",
        "reply",
        "wait_for_reply",
        "check_messages",
        "my_commitments",
        "configure_channel",
    ]


async def test_no_tool_takes_a_sender(server: MCPServer) -> None:
    for tool in await server.list_tools():
        assert not {"sender", "agent", "as"} & set(tool.input_schema["properties"]), tool.name


async def test_the_contract_parameters_of_the_tools_that_take_part(server: MCPServer) -> None:
    tools = {tool.name: tool.input_schema for tool in await server.list_tools()}
    expected = {
        "send_message": [
            "channel",
            "type",
            "content",
            "target",
            "correlation_id",
            "in_reply_to",
            "deadline_seconds",
            "topic",
        ],
        "reply": ["channel", "to", "type", "content"],
        "wait_for_reply": ["channel", "request_id", "timeout_seconds"],
        "check_messages": ["channel", "after", "limit"],
        "my_commitments": ["channel"],
        "configure_channel": [
            "channel",
            "termination",
            "summary_after_messages",
            "summary_after_seconds",
            "recap_debounce_seconds",
            "writers",
        ],
    }
    for name, parameters in expected.items():
        assert list(tools[name]["properties"]) == parameters, name
    assert tools["wait_for_reply"]["properties"]["timeout_seconds"]["default"] == 60
    assert tools["check_messages"]["properties"]["limit"]["default"] == 20


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("send_message", {"channel": "team/a", "type": "status"}),
        ("reply", {"channel": "team/a", "to": "m1", "type": "done"}),
        ("check_messages", {"channel": "team/a"}),
        ("my_commitments", {"channel": "team/a"}),
        ("configure_channel", {"channel": "team/a", "writers": ["me"]}),
    ],
)
async def test_a_tool_that_acts_as_an_agent_is_refused_without_an_identity(
    server: MCPServer, tool: str, arguments: dict[str, Any]
) -> None:
    result = await server.call_tool(tool, arguments)
    assert result.is_error
    assert _text(result).startswith(f"{tool} acts as an agent and this server names none")


async def test_resource_templates_for_a_channels_context_state_and_summary(
    server: MCPServer,
) -> None:
    templates = [t.uri_template for t in await server.list_resource_templates()]
    assert templates == [
        "chorus://channels/{+channel}/context",
        "chorus://channels/{+channel}/state",
        "chorus://channels/{+channel}/summary",
    ]


@pytest.mark.parametrize(
    "tool", ["get_channel_context", "get_channel_summary", "get_channel_state"]
)
async def test_an_invalid_channel_is_refused_in_one_line(server: MCPServer, tool: str) -> None:
    result = await server.call_tool(tool, {"channel": "Bad Name"})
    assert result.is_error
    assert _text(result).startswith("invalid channel name 'Bad Name'")


@pytest.mark.parametrize("max_tokens", [-1, MAX_CONTEXT_TOKENS + 1])
async def test_a_budget_out_of_range_is_refused(server: MCPServer, max_tokens: int) -> None:
    result = await server.call_tool(
        "get_channel_context", {"channel": "team/a", "max_tokens": max_tokens}
    )
    assert result.is_error
    assert _text(result) == budget_refusal(max_tokens)


def test_an_answer_is_text_and_structured_content() -> None:
    result = answered({"a": 1}, {"a": 1})
    assert _text(result) == '{"a":1}'
    assert result.structured_content == {"a": 1}
    assert not result.is_error
    assert _text(answered("plain")) == "plain"
    assert refused("no worker").is_error


def _context_answer(text: str, min_tokens: int) -> dict[str, Any]:
    return {"text": text, "tokens": 2, "min_tokens": min_tokens, "decision": None, "parts": {}}


@pytest.mark.parametrize("budget", [0, 5, 30])
async def test_a_budget_below_the_header_is_refused_with_the_minimum(
    server: MCPServer, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    async def context(*_: object) -> dict[str, Any]:
        return _context_answer("Channe … [truncated]", 31)

    monkeypatch.setattr(WorkerApi, "context", context)
    result = await server.call_tool(
        "get_channel_context", {"channel": "team/a", "max_tokens": budget}
    )
    assert result.is_error
    assert _text(result) == (
        f"max_tokens {budget} is below the 31 tokens the header line of channel 'team/a' "
        "needs: ask for at least 31"
    )


async def test_a_budget_that_fits_the_header_gets_the_whole_header(
    server: MCPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    header = "Channel team/a: CONTINUE. 1 message; state as of partition offset 0."

    async def context(*_: object) -> dict[str, Any]:
        return _context_answer(header, 17)

    monkeypatch.setattr(WorkerApi, "context", context)
    result = await server.call_tool("get_channel_context", {"channel": "team/a", "max_tokens": 17})
    assert not result.is_error and _text(result) == header
