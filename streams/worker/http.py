"""HTTP views on the worker's web server (127.0.0.1 by default; optional bearer token).

The fold role serves every public view on CHORUS_WEB_PORT (`install`); per-channel views
are routed by Faust to the fold worker that owns the channel's partition, and that worker
answers alone: the fold from its tables, the latest summary and recap from the compacted
topics it follows (`streams.worker.latest`), the recent messages from its own window
(`streams.worker.stages.recent`). No view calls the context role, so a context role that is
down changes no answer but for what it has not written yet. The context role's web server,
on CHORUS_WEB_PORT + 1 (`install_context`), serves its readiness and its own LLM costs and
metrics, for operators and the CLI; no role calls it.

Every page counts the requests it answers (`chorus_http_requests_total{view}` on
`/metrics`): what a server received, whoever sent it.
"""

from __future__ import annotations

import hmac
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiokafka.errors import KafkaError
from faust.web import Request, Response, View
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from projections.commitments import CommitmentProjection
from projections.model import channel_name_refusal, utc_now
from streams.kafka.clients import BrokerUnreachable, NoBrokerError
from streams.llm.client import endpoint
from streams.settings import bearer_header
from streams.worker.read_model import (
    Titles,
    UnknownChannel,
    channel_context,
    context_budget,
    recap_answer,
    state_answer,
    summary_answer,
)

if TYPE_CHECKING:
    from streams.worker.latest import LatestViews
    from streams.worker.runtime import Runtime
    from streams.worker.stages.recent import RecentMessages


log = logging.getLogger(__name__)

# What a 503 tells a client to wait before it asks again, in seconds.
RETRY_AFTER_SECONDS = 2
# What a view that reads the log (a recap read back from its topic) raises while the broker
# is not reachable: transient, so a 503 to retry, not a bug in the view.
BROKER_ERRORS = (KafkaError, NoBrokerError, BrokerUnreachable)


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


def failed(view: View, what: str, error: Exception) -> Response:
    """A view that raised: logged with its traceback, answered 500 with the reason in one
    line (a client does not retry it: asked again, the bug would answer the same)."""
    log.exception("%s failed", what)
    return view.json({"error": f"{what} failed: {error!r}"}, status=500)


# How many channels a list answers at most (`?limit=`), and by default: a list is a page,
# with the cursor of the next (`next`), never a walk over every channel.
CHANNELS_PAGE_MAX = 1_000
CHANNELS_PAGE = 100


def local_channels(chorus: Runtime, after: str | None, limit: int) -> tuple[list[str], str | None]:
    """Up to `limit` channels this worker owns whose names sort after `after`, in name
    order, and the cursor of the next page (None: no more)."""
    folds = chorus.folds
    if folds is None:
        return [], None
    table = next(iter(folds.tables.values()))
    start = after or ""
    found: list[str] = []
    for partition in sorted(chorus.ownership.owned_partitions()):
        taken = 0
        for key, _ in table.scan(partition, start, "\uffff"):
            if key == after:
                continue
            found.append(str(key))
            taken += 1
            if taken > limit:
                break
    found.sort()
    page = found[:limit]
    return page, (page[-1] if len(found) > limit else None)


def page_of(request: Request) -> tuple[str | None, int]:
    """`?after=` and `?limit=` of a list (ValueError with the rule a bad limit breaks)."""
    raw = request.query.get("limit")
    limit = CHANNELS_PAGE
    if raw is not None:
        try:
            limit = int(raw)
        except ValueError:
            raise ValueError(f"limit must be an integer, got {raw[:40]!r}") from None
        if not 1 <= limit <= CHANNELS_PAGE_MAX:
            raise ValueError(f"limit must be between 1 and {CHANNELS_PAGE_MAX}, got {limit}")
    return (request.query.get("after") or None), limit


Answer = Callable[[View, Request], Response | Awaitable[Response]]


def _pages(chorus: Runtime) -> tuple[Callable[[View, Request], Response | None], Any]:
    """`denied` (the bearer-token check) and `page(path, answer)` for the app's views, with
    the pages every role serves: /ready, this process's LLM /costs and /metrics."""
    expected = bearer_header(chorus.settings.api_token)

    def denied(view: View, request: Request) -> Response | None:
        for name, value in expected.items():
            given = request.headers.get(name, "")
            if not hmac.compare_digest(given.encode(), value.encode()):
                return view.json({"error": "missing or wrong bearer token"}, status=401)
        return None

    def page(path: str, answer: Answer) -> None:
        @chorus.app.page(path)
        class Page(View):
            async def get(self, request: Request) -> Response:
                chorus.meter.requests.labels(path).inc()
                refusal = denied(self, request)
                if refusal is not None:
                    return refusal
                try:
                    answered = answer(self, request)
                    return await answered if inspect.isawaitable(answered) else answered
                except Exception as error:
                    return failed(self, f"the {path} view", error)

    def ready(view: View, _: Request) -> Response:
        """200 once the per-channel views answer (the group assigned the partitions and no
        rebalance is under way); 503 with Retry-After before."""
        if not routable(chorus):
            return not_yet(view, "the worker is still learning its partitions")
        return view.json({"ready": True})

    def metrics(view: View, _: Request) -> Response:
        body = generate_latest(chorus.meter.registry)
        # aiohttp wants the charset out of content_type
        return view.bytes(body, content_type=CONTENT_TYPE_LATEST.split(";")[0])

    page("/ready", ready)
    page("/costs", lambda view, _: view.json({"llm": chorus.meter.as_json()}))
    page("/metrics", metrics)
    return denied, page


ChannelAnswer = Callable[[View, str, Request], Response | Awaitable[Response]]


def _channel_pages(
    chorus: Runtime, denied: Callable[[View, Request], Response | None]
) -> Callable[[str, ChannelAnswer], None]:
    """`channel_page(suffix, answer)`: a per-channel view, served by the worker of this
    role's group that owns the channel's partition.

    Until this worker knows who owns which partition (starting, rebalancing), or when the
    owner cannot be reached, the answer is 503 with Retry-After, not an error. A view that
    raises, here or at the owner (which answers for itself), is a 500 with its reason.
    """
    app = chorus.app

    def channel_page(suffix: str, answer: ChannelAnswer) -> None:
        @app.page(f"/channels/{{channel:.+}}/{suffix}")
        class ChannelPage(View):
            async def get(self, request: Request, channel: str) -> Response:
                chorus.meter.requests.labels(f"/channels/{{channel}}/{suffix}").inc()
                refusal = denied(self, request)
                if refusal is not None:
                    return refusal
                refusal = channel_name_refusal(channel)
                if refusal is not None:
                    return self.json({"error": refusal}, status=400)
                if not routable(chorus):
                    return not_yet(self, "the worker is still learning its partitions")
                try:
                    return await self.routed(request, channel)
                except Exception as error:
                    # `routed` answers every error of the view itself, so what reaches here
                    # is routing's: no owner yet (ServiceUnavailable), partitions not known
                    # (NotReady, a producer without metadata), the forwarded request failing.
                    log.warning("routing %s of %r: %r", suffix, channel, error)
                    return not_yet(self, f"the channel's owner is not reachable ({error!r})")

            @app.topic_route(topic=chorus.messages, match_info="channel")
            async def routed(self, request: Request, channel: str) -> Response:
                """The view, on the worker that owns the channel."""
                try:
                    answered = answer(self, channel, request)
                    return await answered if inspect.isawaitable(answered) else answered
                except BROKER_ERRORS as error:
                    return not_yet(self, f"the broker is not reachable ({error!r})")
                except Exception as error:
                    return failed(self, f"the {suffix} view of channel {channel!r}", error)

    return channel_page


def install_context(chorus: Runtime) -> None:
    """The context role's web server: readiness, and this process's LLM costs and metrics
    (the summaries and recaps call the models here). Operators and the CLI read it; no
    role does."""
    _pages(chorus)


def install(chorus: Runtime, latest: LatestViews, recent: RecentMessages) -> None:
    """The fold role's public views, each answered by this process alone."""
    denied, page = _pages(chorus)
    channel_page = _channel_pages(chorus, denied)
    titles = Titles(chorus.cache("titles", "small", 0.4))
    recap_model = endpoint(chorus.settings, secondary=True)
    model = recap_model[1] if recap_model[0] else "extractive"

    def state(view: View, channel: str, _: Request) -> Response:
        found = state_answer(chorus, channel)
        if found is None:
            return view.json({"error": str(UnknownChannel(channel))}, status=404)
        return view.json(found)

    def decision_of(channel: str) -> dict[str, Any] | None:
        found = chorus.standing(channel)
        return found.decision_json() if found is not None else None

    def unknown(view: View, channel: str) -> Response:
        return view.json({"error": str(UnknownChannel(channel))}, status=404)

    async def summary(view: View, channel: str, _: Request) -> Response:
        """The latest summary read from chorus.summaries, its state part rendered from the
        fold as it is now."""
        if chorus.standing(channel) is None:
            return unknown(view, channel)
        partition = chorus.ownership.messages_partition(channel)
        found = await latest.summaries.latest(channel, partition)
        commitments = chorus.folds_of(channel).get(CommitmentProjection.name)
        return view.json(summary_answer(channel, commitments, found))

    async def recap_of(channel: str, read_back: bool) -> dict[str, Any] | None:
        found = chorus.standing(channel)
        if found is None:
            return None
        partition = chorus.ownership.messages_partition(channel)
        record = await latest.recaps.latest(channel, partition)
        window = await recent.recent(channel, found.offset, read_back=read_back)
        newest = await latest.summaries.latest(channel, partition)
        fallback = record.record.title if record.record else None
        return recap_answer(
            channel,
            found,
            record,
            window,
            title=titles.of(
                channel, chorus.ownership.partition_of(channel), window, newest.record, fallback
            ),
            debounce=chorus.configs.setting(channel, "recap_debounce_seconds"),
            model=model,
            now=utc_now(),
        )

    async def recap(view: View, channel: str, _: Request) -> Response:
        found = await recap_of(channel, read_back=True)
        return view.json(found) if found is not None else unknown(view, channel)

    async def recaps_view(view: View, request: Request) -> Response:
        """A page of the channels this worker owns (`?after=`, `?limit=`), their recent
        messages from memory: what memory let go (or has not read since this worker took
        the partition over) is not read back for a list."""
        try:
            after, limit = page_of(request)
        except ValueError as error:
            return view.json({"error": str(error)}, status=400)
        names, following = local_channels(chorus, after, limit)
        views = []
        for channel in names:
            found = await recap_of(channel, read_back=False)
            if found is not None:
                views.append(found)
        return view.json({"recaps": views, "next": following})

    def channels(view: View, request: Request) -> Response:
        """A page of the channels this worker owns, in name order (`?after=` the last name
        of the page before, `?limit=`), with the cursor of the next (`next`, null: none)."""
        try:
            after, limit = page_of(request)
        except ValueError as error:
            return view.json({"error": str(error)}, status=400)
        names, following = local_channels(chorus, after, limit)
        answer: dict[str, Any] = {"channels": names, "next": following}
        if request.query.get("with") == "decision":
            answer["decisions"] = {name: decision_of(name) for name in names}
        return view.json(answer)

    async def context(view: View, channel: str, request: Request) -> Response:
        try:
            budget = context_budget(request.query.get("max_tokens"))
        except ValueError as error:
            return view.json({"error": str(error)}, status=400)
        for_agent = (request.query.get("for") or "").strip() or None
        found = chorus.standing(channel)  # once: the header, the commitments, the window
        if found is None:
            return unknown(view, channel)
        partition = chorus.ownership.messages_partition(channel)
        summary_read = await latest.summaries.latest(channel, partition)
        recap_read = await latest.recaps.latest(channel, partition)
        window = await recent.recent(channel, found.offset)
        answer = channel_context(
            found, summary_read.record, recap_read.record, window, channel, budget, for_agent
        )
        sources = {
            "summaries": summary_read.current.as_json(),
            "recaps": recap_read.current.as_json(),
        }
        return view.json({**answer.as_json(), "sources": sources})

    page("/channels", channels)
    channel_page("state", state)
    channel_page("summary", summary)
    channel_page("recap", recap)
    channel_page("context", context)
    page("/recaps", recaps_view)
