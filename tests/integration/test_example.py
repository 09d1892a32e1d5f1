"""examples/release_team.py against a real broker and a real `chorus worker` process, so the
example cannot rot: every request ends as its reply says, the late reviewer finds what it
owes, and `wait` returns the channel's decision."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from examples.release_team import run
from projections.termination import DecisionName
from streams.client import Client
from streams.ops.topics import create_topics
from streams.settings import Settings
from tests.conftest import WorkerProcess

pytestmark = pytest.mark.kafka


async def test_the_release_team_coordinates_to_a_decision(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    await create_topics(chorus_settings)
    start_worker()
    channel = "example/release"
    async with Client(chorus_settings) as client:
        outcome = await run(channel, client)
        state = await client.state(channel)

    assert outcome.requests == {
        "changelog to ana": "DECLINED",
        "changelog to ben": "FULFILLED",  # handed off to ana, who did it
        "benchmark": "FAILED",
        "sanity check": "EXPIRED",
    }
    assert outcome.writers_sent == {
        "ana": ["DECLINE", "DONE"],
        "ben": ["STATUS", "HANDOFF", "FAILURE"],
    }
    assert outcome.reviewer_owed == ["review docs/changelog.md before the release"]
    assert outcome.reviewer_context is not None
    yours = outcome.reviewer_context.text.split("\n\n")[1]
    assert yours.startswith("Yours, rey (1 open")
    assert "rey owes planner: “review docs/changelog.md before the release”" in yours
    assert outcome.reviewer_context.decision is not None
    assert outcome.reviewer_context.decision.decision == "CONTINUE"
    assert outcome.decision is not None
    assert (outcome.decision.decision, outcome.decision.detail) == (
        DecisionName.COMPLETE,
        "All commitments resolved (2 fulfilled, 1 declined, 1 failed, 1 expired)",
    )

    folded = state["projections"]["commitments"]["state"]
    by_excerpt = {c["excerpt"]: c for c in folded["commitments"].values() if c["parent"] is None}
    review = by_excerpt["review docs/changelog.md before the release"]
    assert (review["state"], review["obligor"]) == ("FULFILLED", "instance:rey")
    handed = [c for c in folded["commitments"].values() if c["parent"] is not None]
    assert [(c["obligor"], c["state"]) for c in handed] == [("instance:ana", "FULFILLED")]
    assert folded["declines"] == 1
