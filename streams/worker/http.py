"""HTTP views on the worker's web server (127.0.0.1 by default; optional bearer token).

The fold role serves every public view on CHORUS_WEB_PORT (`install`); per-channel views
are routed by Faust to the fold worker that owns the channel's partition. Each view answers
from the role that owns what it shows: the recap views, and the recent messages and recap
of the agent context, are read from the context role (`streams.worker.recap_source`). The
context role serves its readiness, its LLM costs and metrics, and those recap views on
CHORUS_WEB_PORT + 1 (`install_context`, routed within its own group); the fold role's
`/costs` adds those of the context role on its host.
"""

from __future__ import annotations

import hmac
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import httpx
from faust.web import Request, Response, View
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from projections.commitments import CommitmentProjection
from projections.model import utc_now
from streams.records import SummaryRecord, summary_view
from streams.worker.context_source import (
    NOTHING_YET,
    ContextSource,
    ContextUnreachable,
    RecentText,
)
from streams.worker.read_model import (
    UnknownChannel,
    channel_context,
    channel_state,
    checked_channel,
    context_budget,
)
from streams.worker.role_client import role_url

if TYPE_CHECKING:
    from streams.worker.runtime import Runtime
    from streams.worker.stages.recaps import Recapper
    from streams.worker.stages.summaries import Summariser

log = logging.getLogger(__name__)


# What a 503 tells a client to wait before it asks again, in seconds.
RETRY_AFTER_SECONDS = 2


def routable(chorus: Runtime) -> bool:
    """True once the group has assigned partitions and no rebalance is under way."""
    app = chorus.app
    try:
        return not app.rebalancing and bool(app.assignor.external_topics_metadata())
    except Exception:  # not started yet
        return False


def not_yet(view: View, reason: str) -> Response:
    response: Response = view.json(
        {"error": f"not ready: {reason}; retry in {RETRY_AFTER_SECONDS} s"}, status=503
    )
    response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def local_channels(chorus: Runtime) -> list[str]:
    overview = chorus.folds.get("overview") or next(iter(chorus.folds.values()))
    return sorted(str(key) for key in overview)


Answer = Callable[[View, Request], Response | Awaitable[Response]]


def _pages(chorus: Runtime) -> tuple[Callable[[View, Request], Response | None], Any]:
    """`denied` (the bearer-token check) and `page(path, answer)` for the app's views."""
    token = chorus.settings.api_token

    def denied(view: View, request: Request) -> Response | None:
        if token is None:
            return None
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {token.get_secret_value()}"
        if hmac.compare_digest(given.encode(), expected.encode()):
            return None
        return view.json({"error": "missing or wrong bearer token"}, status=401)

    def page(path: str, answer: Answer) -> None:
        @chorus.app.page(path)
        class Page(View):
            async def get(self, request: Request) -> Response:
                refusal = denied(self, request)
                if refusal is not None:
                    return refusal
                answered = answer(self, request)
                return await answered if inspect.isawaitable(answered) else answered

    return denied, page


def _ready(chorus: Runtime) -> Callable[[View, Request], Response]:
    def ready(view: View, _: Request) -> Response:
        """200 once the per-channel views answer (the group assigned the partitions and no
        rebalance is under way); 503 with Retry-After before."""
        if not routable(chorus):
            return not_yet(view, "the worker is still learning its partitions")
        return view.json({"ready": True})

    return ready


def _metrics(chorus: Runtime) -> Callable[[View, Request], Response]:
    def metrics(view: View, _: Request) -> Response:
        body = generate_latest(chorus.meter.registry)
        # aiohttp wants the charset out of content_type
        return view.bytes(body, content_type=CONTENT_TYPE_LATEST.split(";")[0])

    return metrics


ChannelAnswer = Callable[[View, str, Request], Response | Awaitable[Response]]


def _channel_pages(
    chorus: Runtime, denied: Callable[[View, Request], Response | None]
) -> Callable[[str, ChannelAnswer], None]:
    """`channel_page(suffix, answer)`: a per-channel view, served by the worker of this
    role's group that owns the channel's partition.

    Until this worker knows who owns which partition (starting, rebalancing), or when the
    owner cannot be reached, the answer is 503 with Retry-After, not an error.
    """
    app = chorus.app

    def channel_page(suffix: str, answer: ChannelAnswer) -> None:
        @app.page(f"/channels/{{channel:.+}}/{suffix}")
        class ChannelPage(View):
            async def get(self, request: Request, channel: str) -> Response:
                refusal = denied(self, request)
                if refusal is not None:
                    return refusal
                try:
                    checked_channel(channel)
                except ValueError as error:
                    return self.json({"error": f"invalid channel name: {error}"}, status=400)
                if not routable(chorus):
                    return not_yet(self, "the worker is still learning its partitions")
                try:
                    return await self.routed(request, channel)
                except Exception as error:  # no owner known or reachable yet
                    return not_yet(self, f"the channel's owner is not reachable ({error!r})")

            @app.topic_route(topic=chorus.messages, match_info="channel")
            async def routed(self, request: Request, channel: str) -> Response:
                answered = answer(self, channel, request)
                return await answered if inspect.isawaitable(answered) else answered

    return channel_page


def install_context(
    chorus: Runtime, summariser: Summariser | None, recapper: Recapper | None
) -> None:
    """The context role's web server: readiness, this process's LLM costs and metrics (the
    summaries and recaps call the models here), and the views of what it owns, which the
    fold role's public views read (`streams.worker.context_source`): `/recaps`,
    `/channels/{c}/recap`, `/channels/{c}/summary-record` and `/channels/{c}/recent`
    (recent messages, latest recap and summary)."""
    denied, page = _pages(chorus)
    page("/ready", _ready(chorus))
    page("/costs", lambda view, _: view.json({"llm": chorus.meter.as_json()}))
    page("/metrics", _metrics(chorus))
    if summariser is None or recapper is None:
        return
    channel_page = _channel_pages(chorus, denied)

    def recaps(view: View, _: Request) -> Response:
        now = utc_now()
        views = [recapper.view(str(channel), now) for channel in recapper.table]
        return view.json({"recaps": sorted(views, key=lambda v: v["channel"])})

    def recap(view: View, channel: str, _: Request) -> Response:
        return view.json(recapper.view(channel, utc_now()))

    def summary_record(view: View, channel: str, _: Request) -> Response:
        return view.json({"record": summariser.latest.get(channel)})

    async def recent(view: View, channel: str, _: Request) -> Response:
        recap = recapper.recap_of(channel)
        messages = await recapper.positioned_window(channel, recap)
        latest = summariser.latest.get(channel)
        summary = SummaryRecord.model_validate(latest) if latest else None
        return view.json(RecentText(messages, recap.latest, summary).as_json())

    page("/recaps", recaps)
    channel_page("recap", recap)
    channel_page("summary-record", summary_record)
    channel_page("recent", recent)


async def context_role_costs(chorus: Runtime) -> list[dict[str, Any]]:
    """The LLM costs of the context role next to this fold worker ([] when it does not
    answer: costs are per process, like the metrics)."""
    url = f"{role_url(chorus.settings, 'context')}/costs"
    headers = {}
    if chorus.settings.api_token:
        headers["Authorization"] = f"Bearer {chorus.settings.api_token.get_secret_value()}"
    try:
        async with httpx.AsyncClient(timeout=2.0, headers=headers) as client:
            response = await client.get(url)
        response.raise_for_status()
        rows: list[dict[str, Any]] = response.json().get("llm", [])
        return rows
    except (httpx.HTTPError, ValueError) as error:
        log.debug("no costs from the context role at %s: %r", url, error)
        return []


def install(chorus: Runtime, context_role: ContextSource) -> None:
    """The fold role's public views. What the context role owns (summaries, recaps, the
    recent messages) is read from it (`context_role`) and joined here with the fold."""
    denied, page = _pages(chorus)
    channel_page = _channel_pages(chorus, denied)

    def state(view: View, channel: str, _: Request) -> Response:
        found = channel_state(chorus, channel)
        if found is None:
            return view.json({"error": str(UnknownChannel(channel))}, status=404)
        return view.json(found)

    def decision_of(channel: str) -> dict[str, Any] | None:
        found = chorus.standing(channel)
        return found.decision_json() if found is not None else None

    def unknown(view: View, channel: str) -> Response | None:
        if chorus.standing(channel) is None:
            return view.json({"error": str(UnknownChannel(channel))}, status=404)
        return None

    async def recap_view(view: View, channel: str, _: Request) -> Response:
        if (refusal := unknown(view, channel)) is not None:
            return refusal
        try:
            found = await context_role.recap(channel)
        except ContextUnreachable as error:
            return not_yet(view, str(error))
        if found is None:
            return not_yet(view, "the context role has not read the channel yet")
        return view.json({**found, "decision": decision_of(channel)})

    async def recaps_view(view: View, _: Request) -> Response:
        try:
            found = await context_role.recaps()
        except ContextUnreachable as error:
            return not_yet(view, str(error))
        views = [{**one, "decision": decision_of(one["channel"])} for one in found]
        return view.json({"recaps": sorted(views, key=lambda v: v["channel"])})

    async def summary(view: View, channel: str, _: Request) -> Response:
        """The latest summary with its state part rendered from the fold as it is now (the
        record on the topic follows within seconds: the context role's
        `Summariser.refresh_states`)."""
        if (refusal := unknown(view, channel)) is not None:
            return refusal
        try:
            record = await context_role.summary(channel)
        except ContextUnreachable as error:
            return not_yet(view, str(error))
        if record is None:
            return view.json(summary_view(channel, None))
        current = record.rendered(chorus.folded(channel, CommitmentProjection.name))
        return view.json(summary_view(channel, current.model_dump(mode="json")))

    def channels(view: View, request: Request) -> Response:
        names = local_channels(chorus)
        if request.query.get("with") == "decision":
            return view.json(
                {"channels": names, "decisions": {name: decision_of(name) for name in names}}
            )
        return view.json({"channels": names})

    async def context(view: View, channel: str, request: Request) -> Response:
        try:
            budget = context_budget(request.query.get("max_tokens"))
        except ValueError as error:
            return view.json({"error": str(error)}, status=400)
        for_agent = (request.query.get("for") or "").strip() or None
        if (refusal := unknown(view, channel)) is not None:
            return refusal
        try:
            recent = await context_role.recent(channel)
        except ContextUnreachable:  # logged once per outage; the fold's parts stand
            recent = NOTHING_YET
        try:
            found = channel_context(chorus, recent, channel, budget, for_agent)
        except UnknownChannel as error:
            return view.json({"error": str(error)}, status=404)
        return view.json(found.as_json())

    async def costs(view: View, _: Request) -> Response:
        return view.json({"llm": chorus.meter.as_json() + await context_role_costs(chorus)})

    page("/ready", _ready(chorus))
    page("/channels", channels)
    channel_page("state", state)
    channel_page("summary", summary)
    channel_page("recap", recap_view)
    channel_page("context", context)
    page("/recaps", recaps_view)
    page("/costs", costs)
    page("/metrics", _metrics(chorus))
