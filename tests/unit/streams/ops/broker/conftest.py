"""The broker's unit tests run with an otherwise empty PATH (no java, no mvn): the tests
that run fake tools start processes, so they are in tests/integration/streams/ops/broker."""

from __future__ import annotations

from tests.fakes.broker_tools import bin_dir as bin_dir
