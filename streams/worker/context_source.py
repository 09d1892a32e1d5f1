"""Where the fold role's views read what the context role owns: summaries and recaps.

The context role writes each channel's summaries and recaps and keeps the latest of each,
the recap status and the window of recent messages (`streams.worker.stages.summaries`,
`streams.worker.stages.recaps`). It serves them on its web server (`GET /recaps`,
`/channels/{channel}/recap`, `/channels/{channel}/summary-record`,
`/channels/{channel}/recent`; routed within its group to the worker that owns the
channel). The fold role keeps no copy: its public views ask here (`CHORUS_CONTEXT_URL`, by
default this host's CHORUS_WEB_PORT + 1) and add what the fold knows. When the context role
does not answer, `ContextUnreachable` is raised and logged once per outage: the summary and
recap views answer 503 with Retry-After (the CLI and client then read the compacted
topics), and the agent context goes without summary, recap and recent messages (its header
and commitments come from the fold role).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from projections.model import Message
from streams.records import RecapRecord, SummaryRecord
from streams.worker.role_client import Fetch, RoleClient, RoleUnreachable, role_url

if TYPE_CHECKING:
    from streams.settings import Settings


class ContextUnreachable(RoleUnreachable):
    """No context worker answered (down, restarting, rebalancing)."""


@dataclass(frozen=True)
class RecentText:
    """What the agent context takes from the context role: the channel's recent messages
    (offset, message; oldest first), its latest recap and its latest summary (sent without
    its annotations)."""

    messages: list[tuple[int | None, Message]]
    recap: RecapRecord | None = None
    summary: SummaryRecord | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "messages": [
                {"offset": offset, "message": message.model_dump(mode="json")}
                for offset, message in self.messages
            ],
            "recap": self.recap.model_dump(mode="json") if self.recap else None,
            # The context shows the narrative and its offsets: no annotations.
            "summary": self.summary.model_dump(mode="json", exclude={"annotations"})
            if self.summary
            else None,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RecentText:
        recap, summary = raw.get("recap"), raw.get("summary")
        return cls(
            messages=[
                (item.get("offset"), Message.model_validate(item["message"]))
                for item in raw.get("messages") or []
            ],
            recap=RecapRecord.model_validate(recap) if recap else None,
            summary=SummaryRecord.model_validate(summary) if summary else None,
        )


NOTHING_YET = RecentText(messages=[])


def context_url(settings: Settings) -> str:
    """The context role's web server: CHORUS_CONTEXT_URL, else this host's port + 1."""
    if settings.context_url:
        return settings.context_url.rstrip("/")
    return role_url(settings, "context")


class ContextSource:
    """The context role's views, read over HTTP."""

    def __init__(self, settings: Settings, fetch: Fetch | None = None) -> None:
        self.http = RoleClient(
            settings,
            "the context role",
            context_url(settings),
            "summary and recap views answer 503, the agent context goes without them",
            ContextUnreachable,
            fetch,
        )

    async def recap(self, channel: str) -> dict[str, Any] | None:
        """The channel's recap view (phase, countdown, title, latest recap); None when no
        context worker knows the channel yet."""
        found: dict[str, Any] | None = await self.http.get(f"/channels/{_path(channel)}/recap")
        return found

    async def recaps(self) -> list[dict[str, Any]]:
        """Every recap view of the context worker this URL reaches."""
        found = await self.http.get("/recaps")
        return list((found or {}).get("recaps") or [])

    async def summary(self, channel: str) -> SummaryRecord | None:
        """The channel's latest summary record as the summaries topic has it (None: none yet)."""
        found = await self.http.get(f"/channels/{_path(channel)}/summary-record")
        record = (found or {}).get("record")
        return SummaryRecord.model_validate(record) if record else None

    async def recent(self, channel: str) -> RecentText:
        """The channel's recent messages, latest recap and latest summary."""
        found = await self.http.get(f"/channels/{_path(channel)}/recent")
        return NOTHING_YET if found is None else RecentText.from_json(found)

    async def close(self) -> None:
        await self.http.close()


def _path(channel: str) -> str:
    return quote(channel, safe="/")
