"""Who an agent is over HTTP: the agent its bearer token names, from
`CHORUS_AGENT_TOKENS_FILE`.

The file has a `NAME TOKEN` line per agent (blank lines and `#` comments are skipped); a
name and a token appear once each. It is read when the server starts. A token is looked up
by its SHA-256 digest (no comparison of the token itself), and never logged nor put in an
error: an error names the file and the line.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from streams.errors import ChorusError
from streams.settings import Settings

# A token shorter than this is refused: it is the agent's whole identity.
MIN_TOKEN_LENGTH = 16
AGENT_NAME_MAX_LENGTH = 200


class AgentTokensError(ChorusError):
    """The tokens file cannot be used; the message names the file and the line."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class AgentTokens:
    """The agents a tokens file names, by the digest of their token."""

    names: dict[bytes, str]

    @classmethod
    def read(cls, path: Path) -> AgentTokens:
        try:
            lines = path.read_text().splitlines()
        except OSError as error:
            raise AgentTokensError(
                f"CHORUS_AGENT_TOKENS_FILE {path}: cannot be read ({error.strerror})"
            ) from None
        names: dict[bytes, str] = {}
        for number, line in enumerate(lines, start=1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            where = f"CHORUS_AGENT_TOKENS_FILE {path}, line {number}"
            if len(words) != 2:
                raise AgentTokensError(f"{where}: a line is `NAME TOKEN`")
            name, token = words
            if len(name) > AGENT_NAME_MAX_LENGTH:
                raise AgentTokensError(
                    f"{where}: a name is at most {AGENT_NAME_MAX_LENGTH} characters"
                )
            if len(token) < MIN_TOKEN_LENGTH:
                raise AgentTokensError(
                    f"{where}: a token is at least {MIN_TOKEN_LENGTH} characters"
                )
            if name in names.values():
                raise AgentTokensError(f"{where}: agent {name!r} is named twice")
            digest = _digest(token)
            if digest in names:
                raise AgentTokensError(f"{where}: this token names another agent already")
            names[digest] = name
        return cls(names)

    @classmethod
    def of(cls, settings: Settings) -> AgentTokens | None:
        """The settings' tokens file read; None when none is set."""
        path = settings.agent_tokens_file
        return cls.read(path) if path is not None else None

    def agent_of(self, token: str | None) -> str | None:
        """The agent `token` names; None for a missing or unknown token."""
        return self.names.get(_digest(token)) if token else None


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None without one."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
