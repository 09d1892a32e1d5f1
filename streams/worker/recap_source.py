"""Where the fold role's views read recaps: the context role, which owns them.

The context role keeps each channel's recap status, its window of recent messages and its
latest recap (`streams.worker.stages.recaps`) and serves them on its web server
(`GET /channels/{channel}/recap`, `/channels/{channel}/window`, `/recaps`; routed within
its group to the worker that owns the channel). The fold role keeps no copy: its public
views ask here (`CHORUS_CONTEXT_URL`, by default this host's CHORUS_WEB_PORT + 1). When the
context role does not answer, `ContextUnreachable` is raised and logged once per outage:
the recap views answer 503 with Retry-After, and the agent context goes without the recent
messages and the recap (the header, commitments and summary come from the fold role).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from projections.model import Message
from streams.records import RecapRecord
from streams.worker.role_client import Fetch, RoleClient, RoleUnreachable, role_url

if TYPE_CHECKING:
    from streams.settings import Settings


class ContextUnreachable(RoleUnreachable):
    """No context worker answered (down, restarting, rebalancing)."""


@dataclass(frozen=True)
class RecapWindow:
    """A channel's recent messages (offset, message; oldest first) and its latest recap."""

    messages: list[tuple[int | None, Message]]
    latest: RecapRecord | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "messages": [
                {"offset": offset, "message": message.model_dump(mode="json")}
                for offset, message in self.messages
            ],
            "latest": self.latest.model_dump(mode="json") if self.latest else None,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RecapWindow:
        latest = raw.get("latest")
        return cls(
            messages=[
                (item.get("offset"), Message.model_validate(item["message"]))
                for item in raw.get("messages") or []
            ],
            latest=RecapRecord.model_validate(latest) if latest else None,
        )


EMPTY_WINDOW = RecapWindow(messages=[])


def context_url(settings: Settings) -> str:
    """The context role's web server: CHORUS_CONTEXT_URL, else this host's port + 1."""
    if settings.context_url:
        return settings.context_url.rstrip("/")
    return role_url(settings, "context")


class RemoteRecaps:
    """The context role's recap views, read over HTTP."""

    def __init__(self, settings: Settings, fetch: Fetch | None = None) -> None:
        self.http = RoleClient(
            settings,
            "the context role",
            context_url(settings),
            "recap views answer 503 and the agent context goes without recent messages",
            ContextUnreachable,
            fetch,
        )

    async def view(self, channel: str) -> dict[str, Any] | None:
        """The channel's recap view (phase, countdown, title, latest recap); None when no
        context worker knows the channel yet."""
        found: dict[str, Any] | None = await self.http.get(
            f"/channels/{quote(channel, safe='/')}/recap"
        )
        return found

    async def views(self) -> list[dict[str, Any]]:
        """Every recap view of the context worker this URL reaches."""
        found = await self.http.get("/recaps")
        return list((found or {}).get("recaps") or [])

    async def window(self, channel: str) -> RecapWindow:
        """The channel's recent messages and latest recap (empty when none yet)."""
        found = await self.http.get(f"/channels/{quote(channel, safe='/')}/window")
        return EMPTY_WINDOW if found is None else RecapWindow.from_json(found)

    async def close(self) -> None:
        await self.http.close()
