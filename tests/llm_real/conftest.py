"""A real model behind an OpenAI-compatible server, for the opt-in `llm_real` tests.

The server is `tests.llm_real.server.local_server`, up for the whole session. Install its
requirements with `pip install -r requirements-llm.txt` (`make test-llm` does); without them
every test here is skipped and says why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from streams.llm.client import OpenAIChatClient
from tests.llm_real.server import (
    INSTALL_HINT,
    LlmServer,
    LlmServerError,
    chat_client,
    local_server,
    missing_requirements,
)


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmServer]:
    """llama_cpp.server with the real model on a free loopback port, for the session."""
    missing = missing_requirements()
    if missing:
        pytest.skip(f"real-model tests need {', '.join(missing)} ({INSTALL_HINT})")
    try:
        with local_server(tmp_path_factory.mktemp("llm-server")) as server:
            yield server
    except LlmServerError as error:  # raised only while starting: pytest never throws in here
        pytest.fail(str(error), pytrace=False)


@pytest.fixture
async def llm_client(llm_server: LlmServer) -> AsyncIterator[OpenAIChatClient]:
    """A client for the real server: generous timeout, no retries (a failure is a failure)."""
    client = chat_client(llm_server)
    try:
        yield client
    finally:
        await client.aclose()
