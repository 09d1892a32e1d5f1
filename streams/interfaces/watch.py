"""`chorus watch`: one live status line per channel (its decision, recap countdown, ...) and
its latest recap."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.live import Live
from rich.text import Text

from streams.interfaces.console import text_console
from streams.interfaces.worker_api import WorkerApi, WorkerUnavailable
from streams.settings import Settings


def tools_label(tools: Sequence[str]) -> str:
    if not tools:
        return "-"
    return tools[0] if len(tools) == 1 else f"{tools[0]},+{len(tools) - 1}"


def status_line(view: dict[str, Any]) -> str:
    """`decision | model | #messages | title | tools | recap status | activity`."""
    decision = (view.get("decision") or {}).get("decision") or "-"
    return " | ".join(
        [
            decision,
            str(view.get("model") or "-"),
            f"#{view.get('message_count', 0)}",
            view.get("title") or view["channel"],
            tools_label(view.get("tools") or []),
            str(view.get("label") or "idle"),
            str(view.get("activity") or "idle"),
        ]
    )


def render(views: Sequence[dict[str, Any]], error: str | None = None) -> RenderableType:
    parts: list[RenderableType] = []
    if error:
        parts.append(Text(error, style="red"))
    if not views and not error:
        parts.append(Text("no channels yet", style="dim"))
    for view in views:
        parts.append(Text(f"{view['channel']}  ", style="bold").append(status_line(view)))
        if view.get("text"):
            parts.append(Text(f"  > {view['text']}", style="italic"))
    return Group(*parts)


async def fetch(api: WorkerApi, channels: Sequence[str]) -> list[dict[str, Any]]:
    if channels:
        return [await api.recap(channel) for channel in channels]
    return list((await api.get("/recaps"))["recaps"])


async def watch(
    settings: Settings, channels: Sequence[str], refresh: float = 0.5, once: bool = False
) -> None:
    async with WorkerApi(settings) as api:
        live_view = Live(render([]), console=text_console(), refresh_per_second=4, transient=False)
        with live_view as live:
            while True:
                try:
                    live.update(render(await fetch(api, channels)))
                except WorkerUnavailable as error:
                    live.update(render([], str(error)))
                if once:
                    return
                await asyncio.sleep(refresh)
