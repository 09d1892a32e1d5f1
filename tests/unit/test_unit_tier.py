"""tests/unit/conftest.py keeps the unit tier broker-free and process-free: what it refuses,
what it lets through, and that a refusal the code under test swallows still fails the test."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.unit.conftest import MOVE, UnitTier

CONFTEST = Path(__file__).with_name("conftest.py")


def test_starting_a_process_is_refused(unit_tier: UnitTier) -> None:
    with pytest.raises(AssertionError, match="unit tests start no process"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    with pytest.raises(AssertionError, match=MOVE):
        os.system("true")
    with pytest.raises(AssertionError, match=MOVE):
        os.fork()
    assert len(unit_tier.violations) == 3
    unit_tier.violations.clear()  # refused as they should be: this test passes


async def test_starting_a_process_from_asyncio_is_refused(unit_tier: UnitTier) -> None:
    with pytest.raises(AssertionError, match="unit tests start no process"):
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    assert unit_tier.violations
    unit_tier.violations.clear()


@pytest.mark.parametrize("fixture", ["kafka_bootstrap", "chorus_settings", "start_worker"])
def test_the_broker_fixtures_fail_a_unit_test(fixture: str, request: pytest.FixtureRequest) -> None:
    with pytest.raises(pytest.fail.Exception, match="unit tests use no Kafka broker"):
        request.getfixturevalue(fixture)


def test_a_connection_to_a_port_this_test_did_not_open_is_refused(unit_tier: UnitTier) -> None:
    with socket.socket() as sock, pytest.raises(AssertionError, match="loopback servers"):
        sock.connect(("127.0.0.1", 9092))  # `make run`'s broker, perhaps
    unit_tier.violations.clear()


async def test_a_loopback_server_of_this_test_is_reachable(unit_tier: UnitTier) -> None:
    app = web.Application()

    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hello")

    app.router.add_get("/", hello)
    async with TestServer(app, host="127.0.0.1") as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        assert (await reader.read()).endswith(b"hello")
        writer.close()
    assert unit_tier.violations == []


def test_a_refusal_the_code_swallows_still_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\nmarkers =\n    kafka: a broker\n"
    )
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        test_swallowed="""
        import subprocess

        import pytest

        def test_swallows():
            try:
                subprocess.run(["true"])
            except AssertionError:
                pass

        @pytest.mark.kafka
        def test_marked_kafka():
            pass

        def test_pure():
            assert sum([1, 2]) == 3
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_swallows*",
            f"unit tests start no process: {MOVE}",
            "*ERROR at setup of test_marked_kafka*",
            f"a unit test is not marked kafka: {MOVE}",
        ]
    )
