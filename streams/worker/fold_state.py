"""Where the summary and recap stages read a channel's fold: the fold role's tables.

In the fold role they are local (`Runtime.folded`). The context role keeps no fold of its
own: it asks the fold role's HTTP API (`GET /channels/{channel}/state`, routed to the fold
worker that owns the channel) when a summary or recap is generated. When no fold worker
answers, `FoldUnreachable` is raised and logged once per outage; the caller retries at its
next check and never loses what it was about to summarise.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

import httpx

from projections.projection import Folded
from streams.errors import ChorusError
from streams.worker.runtime import Role, role_web_port

if TYPE_CHECKING:
    from streams.settings import Settings
    from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

# How long one read of a fold may take before it counts as unreachable.
FOLD_READ_TIMEOUT_SECONDS = 5.0


class FoldUnreachable(ChorusError):
    """No fold worker answered for the channel (down, restarting, rebalancing)."""


class FoldState(Protocol):
    async def folded(self, channel: str, name: str) -> Folded | None:
        """The channel's fold by projection `name` (None: none yet); FoldUnreachable."""
        ...


class LocalFoldState:
    """The fold role's own tables."""

    def __init__(self, chorus: Runtime) -> None:
        self.chorus = chorus

    async def folded(self, channel: str, name: str) -> Folded | None:
        return self.chorus.folded(channel, name)


def role_url(settings: Settings, role: Role) -> str:
    """The web server of `role` on this host."""
    host = "127.0.0.1" if settings.web_host in ("0.0.0.0", "::", "") else settings.web_host
    return f"http://{host}:{role_web_port(settings, role)}"


def fold_url(settings: Settings) -> str:
    """The fold role's public API: CHORUS_FOLD_URL, else this host's CHORUS_WEB_PORT."""
    if settings.fold_url:
        return settings.fold_url.rstrip("/")
    return role_url(settings, "fold")


class RemoteFoldState:
    """The fold role's state view, read over HTTP (with the bearer token when one is set)."""

    def __init__(
        self, settings: Settings, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.base_url = fold_url(settings)
        headers = {}
        if settings.api_token:
            headers["Authorization"] = f"Bearer {settings.api_token.get_secret_value()}"
        self._headers = headers
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        # True while the fold role does not answer: the outage is logged once.
        self.unreachable = False

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=self._headers,
                timeout=FOLD_READ_TIMEOUT_SECONDS,
                transport=self._transport,
            )
        return self._client

    async def folded(self, channel: str, name: str) -> Folded | None:
        try:
            response = await self.client().get(f"/channels/{quote(channel, safe='/')}/state")
        except httpx.HTTPError as error:
            raise self._down(f"{type(error).__name__}: {error}") from None
        if response.status_code == 404:
            self._up()
            return None
        if response.status_code != 200:
            raise self._down(f"HTTP {response.status_code}: {response.text[:200]}")
        self._up()
        found = response.json().get("projections", {}).get(name)
        if found is None:
            return None
        return Folded(
            projection=name,
            version=found["version"],
            offset=found["offset"],
            state=found["state"],
        )

    def _down(self, reason: str) -> FoldUnreachable:
        error = FoldUnreachable(f"the fold role at {self.base_url} did not answer ({reason})")
        if not self.unreachable:
            self.unreachable = True
            log.warning(
                "%s: summaries keep their last state part and recaps wait; "
                "retrying at the next check",
                error,
            )
        return error

    def _up(self) -> None:
        if self.unreachable:
            self.unreachable = False
            log.warning("the fold role at %s answers again", self.base_url)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
