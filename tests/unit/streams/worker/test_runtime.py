"""streams.worker.runtime: where each role's web server listens."""

from __future__ import annotations

from streams.settings import Settings
from streams.worker.runtime import role_url, role_web_port


def test_the_context_role_listens_beside_the_fold_role_on_this_host() -> None:
    settings = Settings(web_port=7000)
    assert (role_web_port(settings, "fold"), role_web_port(settings, "context")) == (7000, 7001)
    assert role_url(settings, "fold") == "http://127.0.0.1:7000"
    assert role_url(Settings(web_host="::", web_port=7000), "context") == "http://127.0.0.1:7001"
    assert role_url(Settings(web_host="10.0.0.5", web_port=7000), "fold") == "http://10.0.0.5:7000"
