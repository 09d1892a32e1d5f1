"""HTTP views on the worker's web server (127.0.0.1 by default; optional bearer token).

Per-channel views are routed by Faust to the worker that owns the channel's partition.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any

from faust.web import Request, Response, View
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from projections.model import utc_now
from projections.projection import Folded
from streams.summaries import summary_view

if TYPE_CHECKING:
    from streams.app import Chorus
    from streams.recaps import Recapper
    from streams.summaries import Summariser


def channel_state(chorus: Chorus, channel: str) -> dict[str, Any] | None:
    """Every projection's fold of the channel, or None when the channel is unknown here."""
    folds = {name: table.get(channel) for name, table in chorus.folds.items()}
    if all(raw is None for raw in folds.values()):
        return None
    projections = {}
    for name, raw in folds.items():
        if raw is None:
            continue
        folded = Folded.model_validate(raw)
        projections[name] = {
            "version": folded.version,
            "offset": folded.offset,
            "state": folded.state,
        }
    return {
        "channel": channel,
        "projections": projections,
        "config": chorus.channel_config.get(channel),
    }


def local_channels(chorus: Chorus) -> list[str]:
    overview = chorus.folds.get("overview") or next(iter(chorus.folds.values()))
    return sorted(str(key) for key in overview)


def install(chorus: Chorus, summariser: Summariser, recapper: Recapper) -> None:
    app = chorus.app
    token = chorus.settings.api_token

    def denied(view: View, request: Request) -> Response | None:
        if token is None:
            return None
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {token.get_secret_value()}"
        if hmac.compare_digest(given.encode(), expected.encode()):
            return None
        return view.json({"error": "missing or wrong bearer token"}, status=401)

    @app.page("/channels")
    class Channels(View):
        async def get(self, request: Request) -> Response:
            return denied(self, request) or self.json({"channels": local_channels(chorus)})

    @app.page("/channels/{channel:.+}/state")
    class ChannelState(View):
        @app.topic_route(topic=chorus.messages, match_info="channel")
        async def get(self, request: Request, channel: str) -> Response:
            refusal = denied(self, request)
            if refusal:
                return refusal
            state = channel_state(chorus, channel)
            if state is None:
                missing = {"error": f"no messages folded for channel {channel!r}"}
                return self.json(missing, status=404)
            return self.json(state)

    @app.page("/channels/{channel:.+}/summary")
    class ChannelSummary(View):
        @app.topic_route(topic=chorus.messages, match_info="channel")
        async def get(self, request: Request, channel: str) -> Response:
            refusal = denied(self, request)
            if refusal:
                return refusal
            return self.json(summary_view(channel, summariser.latest.get(channel)))

    @app.page("/channels/{channel:.+}/recap")
    class ChannelRecap(View):
        @app.topic_route(topic=chorus.messages, match_info="channel")
        async def get(self, request: Request, channel: str) -> Response:
            refusal = denied(self, request)
            if refusal:
                return refusal
            return self.json(recapper.view(channel, utc_now()))

    @app.page("/recaps")
    class Recaps(View):
        async def get(self, request: Request) -> Response:
            refusal = denied(self, request)
            if refusal:
                return refusal
            now = utc_now()
            views = [recapper.view(str(channel), now) for channel in recapper.table]
            return self.json({"recaps": sorted(views, key=lambda v: v["channel"])})

    @app.page("/costs")
    class Costs(View):
        async def get(self, request: Request) -> Response:
            return denied(self, request) or self.json({"llm": chorus.meter.as_json()})

    @app.page("/metrics")
    class Metrics(View):
        async def get(self, request: Request) -> Response:
            refusal = denied(self, request)
            if refusal:
                return refusal
            body = generate_latest(chorus.meter.registry)
            # aiohttp wants the charset out of content_type
            return self.bytes(body, content_type=CONTENT_TYPE_LATEST.split(";")[0])
