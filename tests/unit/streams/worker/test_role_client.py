"""streams.worker.role_client: GETs between the roles; an outage is logged once, and so is
the recovery after it."""

from __future__ import annotations

import httpx
import pytest

from streams.settings import Settings
from streams.worker.role_client import RoleClient, RoleUnreachable, role_url


def test_a_role_url_is_on_this_host() -> None:
    assert role_url(Settings(web_port=7000), "fold") == "http://127.0.0.1:7000"
    assert role_url(Settings(web_host="::", web_port=7000), "context") == "http://127.0.0.1:7001"
    assert role_url(Settings(web_host="10.0.0.5", web_port=7000), "fold") == "http://10.0.0.5:7000"


async def test_an_outage_and_the_recovery_are_logged_once_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    up = {"now": False}

    def answer(request: httpx.Request) -> httpx.Response:
        if not up["now"]:
            raise httpx.ConnectError("refused")
        if request.url.path == "/gone":
            return httpx.Response(404)
        return httpx.Response(200, json={"ok": True})

    client = RoleClient(
        Settings(),
        "the other role",
        "http://other:1",
        "things wait",
        transport=httpx.MockTransport(answer),
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
