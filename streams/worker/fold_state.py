"""Where the summary and recap stages read a channel's fold: the fold role's tables.

In the fold role they are local (`Runtime.folded`). The context role keeps no fold of its
own: it asks the fold role's HTTP API (`GET /channels/{channel}/state`, routed to the fold
worker that owns the channel) when a summary or recap is generated. When no fold worker
answers, `FoldUnreachable` is raised and logged once per outage; the caller retries at its
next check and never loses what it was about to summarise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

from projections.projection import Folded
from streams.worker.role_client import Fetch, RoleClient, RoleUnreachable, role_url

if TYPE_CHECKING:
    from streams.settings import Settings
    from streams.worker.runtime import Runtime


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


def fold_url(settings: Settings) -> str:
    """The fold role's public API: CHORUS_FOLD_URL, else this host's CHORUS_WEB_PORT."""
    if settings.fold_url:
        return settings.fold_url.rstrip("/")
    return role_url(settings, "fold")


class FoldUnreachable(RoleUnreachable):
    """No fold worker answered for the channel (down, restarting, rebalancing)."""


class RemoteFoldState:
    """The fold role's state view, read over HTTP."""

    def __init__(self, settings: Settings, fetch: Fetch | None = None) -> None:
        self.http = RoleClient(
            settings,
            "the fold role",
            fold_url(settings),
            "summaries keep their last state part and recaps wait",
            FoldUnreachable,
            fetch,
        )

    @property
    def base_url(self) -> str:
        return self.http.base_url

    @property
    def unreachable(self) -> bool:
        return self.http.unreachable

    async def folded(self, channel: str, name: str) -> Folded | None:
        answer = await self.http.get(f"/channels/{quote(channel, safe='/')}/state")
        found = (answer or {}).get("projections", {}).get(name)
        if found is None:
            return None
        return Folded(
            projection=name,
            version=found["version"],
            offset=found["offset"],
            state=found["state"],
        )

    async def close(self) -> None:
        await self.http.close()
