"""streams.agents.identity: the agent a bearer token names, from the tokens file."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.agents.identity import AgentTokens, AgentTokensError, bearer_token
from streams.settings import Settings

PLANNER = "planner-token-0123456789"
WORKER = "worker-token-0123456789"


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tokens"
    path.write_text(text)
    return path


def test_each_token_names_its_agent_and_nothing_else_names_one(tmp_path: Path) -> None:
    path = _file(tmp_path, f"# agents\nplanner {PLANNER}\n\n  worker-a {WORKER}  # the writer\n")
    tokens = AgentTokens.read(path)
    assert tokens.agent_of(PLANNER) == "planner"
    assert tokens.agent_of(WORKER) == "worker-a"
    assert tokens.agent_of(PLANNER + "x") is None
    assert tokens.agent_of("") is None and tokens.agent_of(None) is None
    assert AgentTokens.of(Settings(agent_tokens_file=path)) == tokens
    assert AgentTokens.of(Settings(agent_tokens_file=None)) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("planner\n", "line 1: a line is `NAME TOKEN`"),
        (f"planner {PLANNER} extra\n", "line 1: a line is `NAME TOKEN`"),
        ("planner short\n", "line 1: a token is at least 16 characters"),
        (f"a {PLANNER}\na {WORKER}\n", "line 2: agent 'a' is named twice"),
        (f"a {PLANNER}\nb {PLANNER}\n", "line 2: this token names another agent already"),
    ],
)
def test_a_bad_line_is_named_without_its_token(tmp_path: Path, text: str, reason: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(AgentTokensError) as raised:
        AgentTokens.read(path)
    assert str(raised.value) == f"CHORUS_AGENT_TOKENS_FILE {path}, {reason}"
    assert PLANNER not in str(raised.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(AgentTokensError, match="cannot be read"):
        AgentTokens.read(tmp_path / "absent")


@pytest.mark.parametrize(
    ("header", "token"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", None), ("", None), (None, None)],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token
