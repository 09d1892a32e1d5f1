"""An OpenAI-compatible chat-completions client for the summariser's LLM tier.

Works with any server that speaks `POST {base_url}/chat/completions` (OpenAI, llama.cpp's
server, vLLM, Ollama's /v1, ...). Retries are bounded, concurrency is capped, and the API
key never appears in an exception or a log line.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

import httpx
from pydantic import SecretStr

from projections.summarise.llm import Completion, LlmError, estimate_tokens
from streams.settings import Settings, bearer_header

log = logging.getLogger(__name__)

MAX_DETAIL_CHARS = 200


class OpenAIChatClient:
    """`ChatClient` over HTTP.

    Retried (at most `max_retries` times, exponential backoff `backoff_base * 2**n` capped
    at `backoff_max`, plus up to 50% jitter): timeouts, connection errors, HTTP 429 and 5xx.
    Not retried: other 4xx, a body that is not the expected JSON, an empty completion; all
    of these raise `LlmError`. At most `concurrency` requests are in flight at once; a call
    holds its slot through its retries. `latency_ms` covers the call including retries,
    not the wait for a slot. Missing `usage` is estimated at four characters a token.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: SecretStr | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        concurrency: int = 4,
        *,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        self.base_url = base_url.rstrip("/")
        self._model = model
        self._api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._semaphore = asyncio.Semaphore(concurrency)
        headers = {"Accept": "application/json", **bearer_header(api_key)}
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout), headers=headers, transport=transport
        )

    @property
    def model(self) -> str:
        return self._model

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def __repr__(self) -> str:
        return f"OpenAIChatClient(base_url={self.base_url!r}, model={self._model!r})"

    async def __aenter__(self) -> OpenAIChatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        body = {
            "model": self._model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "max_tokens": max_tokens,
            "stream": False,
        }
        async with self._semaphore:
            started = time.monotonic()
            attempts = self.max_retries + 1
            reason = "not attempted"
            for attempt in range(attempts):
                if attempt:
                    delay = self._backoff(attempt)
                    log.warning(
                        "LLM request to %s failed (%s); retry %d/%d in %.2fs",
                        self.url,
                        reason,
                        attempt,
                        self.max_retries,
                        delay,
                    )
                    await asyncio.sleep(delay)
                try:
                    response = await self._http.post(self.url, json=body)
                except httpx.TimeoutException:
                    reason = f"timed out after {self.timeout:g}s"
                    continue
                except httpx.TransportError as error:
                    reason = f"connection error: {type(error).__name__}"
                    continue
                status = response.status_code
                if status == 429 or status >= 500:
                    reason = f"HTTP {status}"
                    continue
                if status >= 400:
                    raise LlmError(f"LLM request rejected: HTTP {status}{self._detail(response)}")
                latency_ms = int((time.monotonic() - started) * 1000)
                return self._parse(response, system, user, latency_ms)
            raise LlmError(f"LLM request failed after {attempts} attempt(s): {reason}")

    def _backoff(self, attempt: int) -> float:
        delay = min(self.backoff_base * 2.0 ** (attempt - 1), self.backoff_max)
        return delay * (1 + random.random() / 2)

    def _redact(self, text: str) -> str:
        if self._api_key is not None:
            secret = self._api_key.get_secret_value()
            if secret:
                text = text.replace(secret, "***")
        return text

    def _detail(self, response: httpx.Response) -> str:
        if response.status_code in (401, 403):
            return ""  # providers echo (parts of) the key back; say nothing
        try:
            text = " ".join(response.text.split())
        except Exception:
            return ""
        text = self._redact(text)[:MAX_DETAIL_CHARS]
        return f": {text}" if text else ""

    def _parse(
        self, response: httpx.Response, system: str, user: str, latency_ms: int
    ) -> Completion:
        try:
            data: Any = response.json()
        except ValueError:
            raise LlmError("malformed LLM response: body is not JSON") from None
        text = _content(data)
        if text is None:
            raise LlmError("malformed LLM response: no choices[0].message.content")
        if not text.strip():
            raise LlmError("the LLM returned an empty completion")
        usage = data.get("usage") if isinstance(data, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        model = data.get("model")
        return Completion(
            text=text,
            model=model if isinstance(model, str) and model else self._model,
            prompt_tokens=prompt_tokens
            if isinstance(prompt_tokens, int)
            else estimate_tokens(system) + estimate_tokens(user),
            completion_tokens=completion_tokens
            if isinstance(completion_tokens, int)
            else estimate_tokens(text),
            latency_ms=latency_ms,
        )


def _content(data: Any) -> str | None:
    """`choices[0].message.content`, joining text parts when it is a list."""
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return None


def endpoint(settings: Settings, secondary: bool = False) -> tuple[str | None, str]:
    """(base URL, model) of the configured LLM; `secondary` (recaps) uses
    `secondary_llm_base_url`/`secondary_llm_model`, each falling back to the primary one."""
    if secondary:
        return (
            settings.secondary_llm_base_url or settings.llm_base_url,
            settings.secondary_llm_model or settings.llm_model,
        )
    return settings.llm_base_url, settings.llm_model


def client_from_settings(settings: Settings, secondary: bool = False) -> OpenAIChatClient | None:
    """The configured client (`endpoint`), or None when no LLM base URL is set."""
    base_url, model = endpoint(settings, secondary)
    if not base_url:
        return None
    return OpenAIChatClient(
        base_url=base_url,
        model=model,
        api_key=settings.llm_api_key,
        timeout=settings.llm_timeout_seconds,
        max_retries=settings.llm_max_retries,
        concurrency=settings.llm_concurrency,
    )
