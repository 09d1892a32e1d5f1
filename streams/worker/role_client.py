"""HTTP between the two worker roles: GETs to the other role's web server on this host (or
where CHORUS_FOLD_URL / CHORUS_CONTEXT_URL say), an outage logged once and raised, so the
caller degrades (`streams.worker.fold_state`, `streams.worker.recap_source`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

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


# GET `path` with `headers` from the other role: (HTTP status, body). The default is an
# aiohttp session (Faust's own HTTP library): a fraction of httpx's cost per request, which
# counts here, once per summary and recap.
Fetch = Callable[[str, Mapping[str, str]], Awaitable[tuple[int, bytes]]]


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
        fetch: Fetch | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url
        self.consequence = consequence
        self.unreachable_error = unreachable
        headers = {}
        if settings.api_token:
            headers["Authorization"] = f"Bearer {settings.api_token.get_secret_value()}"
        self._headers = headers
        self._fetch = fetch or self._aiohttp_get
        self._session: aiohttp.ClientSession | None = None
        # True while the role does not answer: the outage is logged once.
        self.unreachable = False

    async def _aiohttp_get(self, path: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        if self._session is None:  # made on the loop that uses it
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=ROLE_READ_TIMEOUT_SECONDS)
            )
        async with self._session.get(f"{self.base_url}{path}", headers=headers) as response:
            return response.status, await response.read()

    async def get(self, path: str) -> Any:
        """The JSON at `path` (None for a 404); `unreachable` for anything but a 200."""
        try:
            status, body = await self._fetch(path, self._headers)
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise self._down(f"{type(error).__name__}: {error}") from None
        if status == 404:
            self._up()
            return None
        if status != 200:
            raise self._down(f"HTTP {status}: {body[:200].decode(errors='replace')}")
        try:
            found = orjson.loads(body)
        except orjson.JSONDecodeError as error:
            raise self._down(f"not JSON: {error}") from None
        self._up()
        return found

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
        if self._session is not None:
            await self._session.close()
            self._session = None
