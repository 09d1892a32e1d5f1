"""Fault 6: security settings against a local broker configured for them.

SASL/SCRAM over TLS (a throwaway self-signed CA), TLS alone and SCRAM alone work end to end
through chorus's own clients (CLI and worker). Wrong credentials fail fast with the reason,
not a hang. The HTTP API binds to 127.0.0.1 by default and takes an optional bearer token.
Secrets never appear in logs, output or error messages.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from streams.settings import Settings
from tests.conftest import REPO, free_web_port
from tests.faults.conftest import FaultWorker
from tests.faults.secure_broker import SecureBroker, start_secure_broker
from tests.faults.support import eventually, prepare_topics, report, settings_from

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

TOKEN = f"api-token-{uuid.uuid4().hex}"
CHANNEL = "secure/room"


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("secure-kafka"))
    try:
        yield broker
    finally:
        broker.stop()


def secure_env(broker: SecureBroker, tmp_path: Path, **changes: str) -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    env = {
        "CHORUS_BOOTSTRAP_SERVERS": broker.sasl_ssl,
        "CHORUS_SECURITY_PROTOCOL": "SASL_SSL",
        "CHORUS_SASL_MECHANISM": "SCRAM-SHA-256",
        "CHORUS_SASL_USERNAME": broker.user,
        "CHORUS_SASL_PASSWORD": broker.password,
        "CHORUS_SSL_CAFILE": str(broker.ca_file),
        "CHORUS_TOPIC_PREFIX": f"s{tag}.",
        "CHORUS_APP_ID": f"chorus-secure-{tag}",
        "CHORUS_DATA_DIR": str(tmp_path / f"data-{tag}"),
        "CHORUS_WEB_PORT": str(free_web_port()),
        "CHORUS_PARTITIONS": "2",
        "CHORUS_STANDBY_REPLICAS": "0",
        "CHORUS_SESSION_TIMEOUT_SECONDS": "6",
    }
    env.update(changes)
    return {k: v for k, v in env.items() if v is not None}


class Cli:
    """Runs `chorus ...` with a clean CHORUS_* environment and keeps every output."""

    def __init__(self) -> None:
        self.outputs: list[str] = []

    def __call__(
        self, env: dict[str, str], *args: str, stdin: str | None = None, timeout: float = 60.0
    ) -> tuple[int | None, float, str, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
        started = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "streams.interfaces.cli", *args],
                env={**clean, **env},
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=REPO,
            )
            code, out, err = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as expired:
            code = None  # a hang
            out = str(expired.stdout or "")
            err = str(expired.stderr or "")
        self.outputs += [out, err]
        return code, time.monotonic() - started, out, err


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the LISTEN sockets on `port` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        lines = Path(table).read_text().splitlines()[1:] if Path(table).exists() else []
        for line in lines:
            fields = line.split()
            address, port_hex = fields[1].split(":")
            if fields[3] == "0A" and int(port_hex, 16) == port:
                if len(address) == 8:
                    found.add(".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)))
                else:
                    found.add(f"ipv6:{address}")
    return found


def secrets(broker: SecureBroker) -> list[str]:
    return [broker.password, TOKEN]


@pytest.mark.timeout(600)
async def test_sasl_ssl_end_to_end_and_the_http_api_is_local_and_guarded(
    secure_broker: SecureBroker, tmp_path: Path
) -> None:
    cli = Cli()
    env = secure_env(secure_broker, tmp_path, CHORUS_API_TOKEN=TOKEN)
    code, _, out, err = cli(env, "topics", "create")
    assert code == 0, err
    await prepare_topics(Settings(**settings_from(env)))

    worker = FaultWorker(env, tmp_path / "worker.log", loglevel="info")
    try:
        await asyncio.to_thread(worker.start, 180.0)
        lines = "\n".join(
            orjson.dumps(
                {"channel": CHANNEL, "sender": s, "type": "STATUS", "content": f"secure {i}"}
            ).decode()
            for i, s in enumerate(["ann", "bob", "ann"])
        )
        code, _, out, err = cli(env, "produce", "--file", "-", stdin=lines)
        assert code == 0 and out.count("partition=") == 3, err

        async def folded() -> bool:
            response = await asyncio.to_thread(worker.get, f"/channels/{CHANNEL}/state")
            return (
                response.status_code == 200
                and response.json()["projections"]["overview"]["state"]["message_count"] == 3
            )

        await eventually(folded, 90, 0.5, "the worker folds over SASL_SSL")
        code, _, out, err = cli(env, "consume", "driver-events", "--from-beginning")
        assert code == 0 and len(out.splitlines()) == 3, err  # one driver event per message
        code, _, out, err = cli(env, "state", CHANNEL, "--json")
        assert code == 0 and orjson.loads(out)["channel"] == CHANNEL, err

        # The HTTP API: bound to 127.0.0.1 by default, bearer token enforced.
        assert "CHORUS_WEB_HOST" not in env and Settings.model_fields["web_host"].default == (
            "127.0.0.1"
        )
        assert listening_addresses(int(env["CHORUS_WEB_PORT"])) == {"127.0.0.1"}
        url = f"{worker.base_url}/channels/{CHANNEL}/state"
        refused = httpx.get(url, timeout=10)
        assert refused.status_code == 401 and TOKEN not in refused.text
        wrong = httpx.get(url, headers={"Authorization": "Bearer not-it"}, timeout=10)
        assert wrong.status_code == 401
        right = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert right.status_code == 200
        code, _, out, err = cli({**env, "CHORUS_API_TOKEN": "not-it"}, "state", CHANNEL)
        assert code != 0 and "401" in out + err
    finally:
        worker.stop()

    # TLS only, SCRAM only, and the other SCRAM mechanism, through the same client code.
    modes = {
        "SSL": {
            "CHORUS_BOOTSTRAP_SERVERS": secure_broker.ssl,
            "CHORUS_SECURITY_PROTOCOL": "SSL",
            "CHORUS_SASL_MECHANISM": "",
        },
        "SASL_PLAINTEXT": {
            "CHORUS_BOOTSTRAP_SERVERS": secure_broker.sasl_plaintext,
            "CHORUS_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        },
        "SASL_SSL SCRAM-SHA-512": {"CHORUS_SASL_MECHANISM": "SCRAM-SHA-512"},
    }
    for name, changes in modes.items():
        mode_env = {**env, **changes}
        if mode_env.get("CHORUS_SASL_MECHANISM") == "":
            for key in ("CHORUS_SASL_MECHANISM", "CHORUS_SASL_USERNAME", "CHORUS_SASL_PASSWORD"):
                mode_env.pop(key)
        code, _, out, err = cli(mode_env, "consume", "messages", "--from-beginning")
        assert code == 0 and len(out.splitlines()) == 3, (name, err[-500:])

    log = worker.log_path.read_text(errors="replace")
    for secret in secrets(secure_broker):
        assert secret not in log, "a secret is in the worker log"
        for output in cli.outputs:
            assert secret not in output, "a secret is in CLI output"
    report(
        "security: SASL/SCRAM + TLS",
        listeners_checked=["SASL_SSL (SCRAM-SHA-256, -512)", "SSL", "SASL_PLAINTEXT"],
        worker_folded_over="SASL_SSL",
        http_bind=sorted(listening_addresses(int(env["CHORUS_WEB_PORT"])) or {"127.0.0.1"}),
        bearer_token="401 without / wrong, 200 with",
        secrets_in_logs=0,
    )


WRONG_CASES: dict[str, tuple[dict[str, str], str]] = {
    "wrong password": (
        {"CHORUS_SASL_PASSWORD": "not-the-password"},
        "authentication failed",
    ),
    "unknown user": ({"CHORUS_SASL_USERNAME": "mallory"}, "authentication failed"),
    "mechanism not enabled": ({"CHORUS_SASL_MECHANISM": "PLAIN"}, "unsupportedsaslmechanism"),
    "CA not trusted": ({"CHORUS_SSL_CAFILE": ""}, "certificate verify failed"),
    "plaintext client on a TLS port": (
        {"CHORUS_SECURITY_PROTOCOL": "PLAINTEXT", "CHORUS_SASL_MECHANISM": ""},
        "unable to bootstrap",
    ),
}


def wrong_env(env: dict[str, str], changes: dict[str, str]) -> dict[str, str]:
    result = {**env, **changes}
    for key, value in changes.items():
        if value == "":
            result.pop(key)  # unset: e.g. no CA file means the system trust store
    return result


@pytest.mark.timeout(600)
def test_wrong_credentials_fail_fast_with_the_reason(
    secure_broker: SecureBroker, tmp_path: Path
) -> None:
    cli = Cli()
    env = secure_env(secure_broker, tmp_path)
    assert cli(env, "topics", "create")[0] == 0
    seconds: dict[str, float] = {}
    for name, (changes, reason) in WRONG_CASES.items():
        bad = wrong_env(env, changes)
        for args in (("consume", "messages", "--from-beginning"), ("topics", "create")):
            code, elapsed, _, err = cli(bad, *args, timeout=60)
            assert code is not None, f"{name}: `chorus {args[0]}` hung for 60 s"
            assert code != 0, name
            assert elapsed < 30, (name, elapsed)
            assert reason in err.lower(), (name, err[-800:])
            seconds[f"{name}: {args[0]}"] = round(elapsed, 1)

    # A worker with a wrong password exits at once with the reason instead of retrying.
    bad = wrong_env(env, WRONG_CASES["wrong password"][0])
    worker = FaultWorker(bad, tmp_path / "worker-wrong.log", loglevel="info")
    worker.spawn()
    assert worker.process is not None
    try:
        code = worker.process.wait(timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("a worker with a wrong password hung instead of exiting")
    finally:
        worker.stop()
    log = worker.log_path.read_text(errors="replace")
    assert code != 0 and "authentication failed" in log.lower()
    for secret in secrets(secure_broker):
        assert secret not in log
        assert all(secret not in output for output in cli.outputs)
    report(
        "security: wrong credentials",
        cases=list(WRONG_CASES),
        worst_seconds_to_error=max(seconds.values()),
        hangs=0,
        worker_with_wrong_password="exits with the reason (non-zero)",
        secrets_in_output=0,
    )


@pytest.mark.timeout(300)
def test_wrong_credentials_give_a_one_line_error(
    secure_broker: SecureBroker, tmp_path: Path
) -> None:
    """Bug 7: the reason and one `Error:` line, no traceback."""
    cli = Cli()
    bad = secure_env(secure_broker, tmp_path, CHORUS_SASL_PASSWORD="not-the-password")
    code, _, _, err = cli(bad, "consume", "messages", "--from-beginning")
    assert code == 1 and "Traceback" not in err, err[-600:]
    assert "Error:" in err


@pytest.mark.timeout(300)
async def test_the_bearer_token_also_guards_faust_table_views(
    chorus_settings: Settings, fault_workers: Callable[..., FaultWorker]
) -> None:
    """Bug 4: Faust's /table views served table data without the token."""
    from streams.kafka.produce import send_messages
    from tests.faults.support import traffic

    await prepare_topics(chorus_settings)
    worker = fault_workers(CHORUS_API_TOKEN=TOKEN)
    await asyncio.to_thread(worker.start)
    await send_messages(chorus_settings, traffic(["guarded"], 3))

    async def folded() -> bool:
        response = await asyncio.to_thread(worker.get, "/channels/guarded/state")
        return response.status_code == 200

    await eventually(folded, 60, 0.5, "folded")
    leaks = {}
    for path in ("/table/fold-overview-v3/guarded/", "/table/"):
        response = httpx.get(f"{worker.base_url}{path}", timeout=10)
        if response.status_code == 200:
            leaks[path] = response.text[:200]
    assert leaks == {}, leaks


def test_an_empty_ca_file_setting_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug 8: an empty variable is unset, not the current directory."""
    monkeypatch.setenv("CHORUS_SSL_CAFILE", "")
    assert Settings().ssl_cafile is None
