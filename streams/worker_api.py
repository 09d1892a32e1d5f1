"""A client of the worker's HTTP API, shared by the CLI, the MCP server and `chorus watch`."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from streams.settings import Settings


class WorkerUnavailable(RuntimeError):
    pass


class WorkerUnreachable(WorkerUnavailable):
    """No worker answered at all (as opposed to one that answered with an error)."""


class WorkerApi:
    def __init__(self, settings: Settings, timeout: float = 10.0) -> None:
        headers = {}
        if settings.api_token:
            headers["Authorization"] = f"Bearer {settings.api_token.get_secret_value()}"
        self.base_url = f"http://{settings.web_host}:{settings.web_port}"
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout)

    async def get(self, path: str, *, missing_ok: bool = False) -> Any:
        try:
            response = await self._client.get(path)
        except httpx.HTTPError as error:
            raise WorkerUnreachable(
                f"cannot reach the worker at {self.base_url} ({type(error).__name__}); "
                "is `chorus worker` running?"
            ) from None
        if missing_ok and response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise WorkerUnavailable(f"{path}: HTTP {response.status_code}: {response.text}")
        return response.json()

    async def channels(self) -> list[str]:
        return list((await self.get("/channels"))["channels"])

    async def state(self, channel: str) -> Any:
        return await self.get(f"/channels/{quote(channel)}/state", missing_ok=True)

    async def summary(self, channel: str) -> Any:
        return await self.get(f"/channels/{quote(channel)}/summary")

    async def recap(self, channel: str) -> Any:
        return await self.get(f"/channels/{quote(channel)}/recap")

    async def context(self, channel: str, max_tokens: int) -> Any:
        return await self.get(f"/channels/{quote(channel)}/context?max_tokens={max_tokens}")

    async def costs(self) -> Any:
        return await self.get("/costs")

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> WorkerApi:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()
