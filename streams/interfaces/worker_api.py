"""A client of the worker's HTTP API, shared by the CLI, the MCP server and `chorus watch`."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from streams.errors import ChorusError
from streams.settings import Settings, bearer_header


class WorkerUnavailable(ChorusError):
    pass


class WorkerUnreachable(WorkerUnavailable):
    """No worker answered at all (as opposed to one that answered with an error)."""


class ChannelRefused(ChorusError):
    """The worker answered that the channel is unknown (404) or its name invalid (400);
    the message is the worker's one-line reason."""


# How long a call waits for a worker that answers 503 (starting or rebalancing).
NOT_READY_PATIENCE_SECONDS = 30.0
# How often a call that waits for a starting worker tries to connect again.
CONNECT_RETRY_SECONDS = 0.5


class WorkerApi:
    """Calls the worker; a 503 (not ready yet) is retried as its Retry-After asks, for at
    most `patience` seconds, then reported in one line; with `await_start`, so is a refused
    connection (a worker that does not listen yet). Any other error is raised at once with
    the worker's one-line reason."""

    def __init__(
        self,
        settings: Settings,
        timeout: float = 10.0,
        patience: float = NOT_READY_PATIENCE_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        await_start: bool = False,
    ) -> None:
        self.patience = patience
        self.await_start = await_start
        self.base_url = f"http://{settings.web_host}:{settings.web_port}"
        # The context role's web server (its LLM costs), beside the fold role's.
        self.context_url = f"http://{settings.web_host}:{settings.context_web_port}"
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=bearer_header(settings.api_token),
            timeout=timeout,
            transport=transport,
        )

    async def get(self, path: str, *, missing_ok: bool = False) -> Any:
        deadline = time.monotonic() + self.patience
        while True:
            try:
                response = await self._client.get(path)
            except httpx.HTTPError as error:
                starting = isinstance(error, httpx.ConnectError) and self.await_start
                if starting and time.monotonic() + CONNECT_RETRY_SECONDS <= deadline:
                    await asyncio.sleep(CONNECT_RETRY_SECONDS)
                    continue
                waited = f" for {self.patience:g} s" if starting else ""
                raise WorkerUnreachable(
                    f"cannot reach the worker at {self.base_url}{waited} "
                    f"({type(error).__name__}); is `chorus worker` running?"
                ) from None
            if response.status_code != 503:
                break
            wait = _retry_after(response)
            if time.monotonic() + wait > deadline:
                raise WorkerUnavailable(
                    f"the worker at {self.base_url} was still not ready after "
                    f"{self.patience:g} s (HTTP 503: {_error_of(response)})"
                )
            await asyncio.sleep(wait)
        if missing_ok and response.status_code == 404:
            return None
        if response.status_code in (400, 404) and path.startswith("/channels/"):
            raise ChannelRefused(_error_of(response))
        if response.status_code >= 400:  # not retried: a 500 is a view's bug, a 401 the token
            raise WorkerUnavailable(f"{path}: HTTP {response.status_code}: {_error_of(response)}")
        return response.json()

    async def channels(self) -> list[str]:
        return list((await self.get("/channels"))["channels"])

    async def channel_decisions(self) -> dict[str, Any]:
        """Each channel's decision (`decision`, `detail`, `offset`), by channel name."""
        return dict((await self.get("/channels?with=decision"))["decisions"])

    async def state(self, channel: str) -> Any:
        """The channel's state; None when no worker folded it, ChannelRefused when its name
        is invalid."""
        return await self.get(f"/channels/{quote(channel)}/state", missing_ok=True)

    async def summary(self, channel: str) -> Any:
        return await self.get(f"/channels/{quote(channel)}/summary")

    async def recap(self, channel: str) -> Any:
        return await self.get(f"/channels/{quote(channel)}/recap")

    async def context(self, channel: str, max_tokens: int, for_agent: str | None = None) -> Any:
        query = f"max_tokens={max_tokens}" + (f"&for={quote(for_agent)}" if for_agent else "")
        return await self.get(f"/channels/{quote(channel)}/context?{query}")

    async def messages(
        self, channel: str, after: int | None, for_agent: str | None, limit: int
    ) -> Any:
        """The channel's messages from the log after offset `after` (all, or those for
        `for_agent`), at most `limit`, with the cursor `next`."""
        query = {"limit": limit, "after": after, "for": for_agent}
        found = urlencode({name: value for name, value in query.items() if value is not None})
        return await self.get(f"/channels/{quote(channel)}/messages?{found}")

    async def cluster_channels(self, after: str | None = None) -> dict[str, Any]:
        """A page of the channels the fold workers of the group own (after the name
        `after`), with their decisions and the cursor of the next page (`next`)."""
        query = f"?after={quote(after)}" if after else ""
        return dict(await self.get(f"/cluster/channels{query}"))

    async def costs(self) -> dict[str, Any]:
        """The LLM costs of the fold role's process and of the context role's on this host
        (which makes the summary and recap calls); the fold role's alone when no context
        role answers there."""
        rows = list((await self.get("/costs"))["llm"])
        try:
            response = await self._client.get(f"{self.context_url}/costs")
            if response.status_code == 200:
                rows += response.json().get("llm", [])
        except (httpx.HTTPError, ValueError):
            pass
        return {"llm": rows}

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> WorkerApi:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(max(float(response.headers.get("Retry-After", "1")), 0.1), 10.0)
    except ValueError:
        return 1.0


def _error_of(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", response.text))
    except ValueError:
        return response.text
