"""streams.replay.checks: the shadow check samples the channels a worker owns. No Kafka."""

from __future__ import annotations

import random
from typing import Any

import pytest

from projections.projection import Folded
from streams.replay import Difference
from tests.unit.streams.replay.support import BUILTINS, folded


def test_run_shadow_check_samples_the_channels_it_is_given_and_reports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    import streams.replay.checks as checks_module
    from streams.settings import Settings

    class Host:
        def __init__(self) -> None:
            self.settings = Settings(bootstrap_servers="127.0.0.1:1")
            self.projections: list[Any] = BUILTINS
            self.folds: dict[str, Any] = {
                "overview": {
                    "mine/a": folded(3, {"n": 1}).model_dump(mode="json"),
                    "theirs/b": folded(4, {"n": 2}).model_dump(mode="json"),
                },
                "commitments": {},
            }

        def folds_of(self, channel: str) -> dict[str, Folded | None]:
            raws = {name: table.get(channel) for name, table in self.folds.items()}
            return {name: Folded.model_validate(raw) if raw else None for name, raw in raws.items()}

    checked: list[Any] = []
    found = Difference("mine/a", "overview", "state", folded(3, {"n": 1}), folded(3, {"n": 5}))

    async def fake_check(settings: Any, projections: Any, snapshot: Any) -> list[Difference]:
        checked.append(snapshot)
        return [found]

    monkeypatch.setattr(checks_module, "shadow_check", fake_check)  # where the timer finds it
    reported: list[Difference] = []

    async def report(difference: Difference) -> None:
        reported.append(difference)

    run = checks_module.run_shadow_check(Host(), ["mine/a"], 5, random.Random(0), report)
    result = asyncio.run(run)
    assert checked == [{"mine/a": {"overview": folded(3, {"n": 1})}}]  # only those given
    assert result == reported == [found]
