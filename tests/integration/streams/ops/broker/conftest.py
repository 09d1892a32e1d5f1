"""The broker's tests with fake tools run with a PATH that holds only those fakes."""

from __future__ import annotations

from tests.fakes.broker_tools import bin_dir as bin_dir
