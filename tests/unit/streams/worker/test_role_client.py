"""streams.worker.role_client: GETs between the roles; an outage is logged once, and so is
the recovery after it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from streams.settings import Settings
from streams.worker.role_client import RoleClient, RoleUnreachable, role_url
from tests.conftest import answering


def test_a_role_url_is_on_this_host() -> None:
    assert role_url(Settings(web_port=7000), "fold") == "http://127.0.0.1:7000"
    assert role_url(Settings(web_host="::", web_port=7000), "context") == "http://127.0.0.1:7001"
    assert role_url(Settings(web_host="10.0.0.5", web_port=7000), "fold") == "http://10.0.0.5:7000"


async def test_an_outage_and_the_recovery_are_logged_once_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    up = {"now": False}

    def answer(path: str, headers: Mapping[str, str]) -> tuple[int, Any]:
        if not up["now"]:
            raise ConnectionRefusedError("refused")
        if path == "/gone":
            return 404, {"error": "gone"}
        return 200, {"ok": True}

    client = RoleClient(
        Settings(),
        "the other role",
        "http://other:1",
        "things wait",
        fetch=answering(answer),
    )
    for _ in range(3):
        with pytest.raises(RoleUnreachable, match="the other role at http://other:1"):
            await client.get("/x")
    up["now"] = True
    assert await client.get("/x") == {"ok": True}
    assert await client.get("/gone") is None
    said = [r.getMessage() for r in caplog.records]
    assert sum("did not answer" in line and "things wait" in line for line in said) == 1
    assert sum("answers again" in line for line in said) == 1
    await client.close()


async def test_the_default_fetch_reads_a_real_server_and_a_closed_port_is_unreachable() -> None:
    """aiohttp against a local aiohttp server: the token travels, a 404 is None, a port
    nobody listens on is one RoleUnreachable."""
    from aiohttp import web

    from tests.conftest import free_web_port

    seen: list[str | None] = []

    async def state(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"channel": request.match_info["channel"]})

    app = web.Application()
    app.router.add_get("/channels/{channel}/state", state)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_web_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    settings = Settings(api_token="s3cret")  # type: ignore[arg-type]
    client = RoleClient(settings, "the fold role", f"http://127.0.0.1:{port}", "things wait")
    try:
        assert await client.get("/channels/a/state") == {"channel": "a"}
        assert await client.get("/nowhere") is None
        assert seen == ["Bearer s3cret"]
    finally:
        await client.close()
        await runner.cleanup()
    closed = RoleClient(settings, "the fold role", f"http://127.0.0.1:{port}", "things wait")
    with pytest.raises(RoleUnreachable, match="ClientConnectorError"):
        await closed.get("/channels/a/state")
    await closed.close()
