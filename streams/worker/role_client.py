"""HTTP between the two worker roles: GETs to the other role's web server on this host (or
where CHORUS_FOLD_URL / CHORUS_CONTEXT_URL say), an outage logged once and raised, so the
caller degrades (`streams.worker.fold_state`, `streams.worker.recap_source`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import httpx

from streams.errors import ChorusError
from streams.worker.runtime import Role, role_web_port

if TYPE_CHECKING:
    from streams.settings import Settings

log = logging.getLogger(__name__)

# How long one read from the other role may take before it counts as unreachable.
ROLE_READ_TIMEOUT_SECONDS = 5.0


def role_url(settings: Settings, role: Role) -> str:
    """The web server of `role` on this host."""
    host = "127.0.0.1" if settings.web_host in ("0.0.0.0", "::", "") else settings.web_host
    return f"http://{host}:{role_web_port(settings, role)}"


class RoleUnreachable(ChorusError):
    """The other role's web server did not answer (down, restarting, rebalancing)."""


class RoleClient:
    """GETs to the other role's web server (with the bearer token when one is set); an
    outage is logged once (`consequence` says what waits meanwhile) and raised as
    `unreachable`, the answer after it logged once too."""

    def __init__(
        self,
        settings: Settings,
        name: str,
        base_url: str,
        consequence: str,
        unreachable: type[RoleUnreachable] = RoleUnreachable,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url
        self.consequence = consequence
        self.unreachable_error = unreachable
        headers = {}
        if settings.api_token:
            headers["Authorization"] = f"Bearer {settings.api_token.get_secret_value()}"
        self._headers = headers
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        # True while the role does not answer: the outage is logged once.
        self.unreachable = False

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=self._headers,
                timeout=ROLE_READ_TIMEOUT_SECONDS,
                transport=self._transport,
            )
        return self._client

    async def get(self, path: str) -> Any:
        """The JSON at `path` (None for a 404); `unreachable` for anything but a 200."""
        try:
            response = await self.client().get(path)
        except httpx.HTTPError as error:
            raise self._down(f"{type(error).__name__}: {error}") from None
        if response.status_code == 404:
            self._up()
            return None
        if response.status_code != 200:
            raise self._down(f"HTTP {response.status_code}: {response.text[:200]}")
        self._up()
        return response.json()

    def _down(self, reason: str) -> RoleUnreachable:
        error = self.unreachable_error(f"{self.name} at {self.base_url} did not answer ({reason})")
        if not self.unreachable:
            self.unreachable = True
            log.warning("%s: %s; retrying at the next check", error, self.consequence)
        return error

    def _up(self) -> None:
        if self.unreachable:
            self.unreachable = False
            log.warning("%s at %s answers again", self.name, self.base_url)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
