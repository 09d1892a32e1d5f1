"""A release team coordinating through chorus with the public client only.

A planner hands out work; two writers (ana, ben) and a reviewer (rey) act on what they owe,
which each of them reads from the channel's state (every driver event carries it). What
happens: ana declines the changelog; ben takes it, acknowledges and hands it off to ana,
who finishes it; ben fails the benchmark; a sanity check asked of `role:reviewer` with a
5-second deadline expires before anyone takes it; rey joins late, reads the channel's
context for itself, sees it owes the review and does it; the channel's termination
(`all-commitments-resolved | escalate-on-decline:1`) then decides COMPLETE, which the
planner waits for.

Needs a running worker (`chorus worker`) and the same CHORUS_* settings:

    python examples/release_team.py [CHANNEL]
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from streams.client import (
    AgentContext,
    Client,
    DecisionRecord,
    DriverEvent,
    MessageType,
    SentMessage,
    decided,
)

TERMINATION = ["all-commitments-resolved", "escalate-on-decline:1"]
ACTIVE = ("OPEN", "ACKNOWLEDGED")
# Every step of the example is done within this (a worker folds a message in milliseconds).
STEP_TIMEOUT = 60.0


def active(event: DriverEvent) -> list[dict[str, Any]]:
    """The channel's most recently opened active commitments after the event's message
    (up to 5), oldest first, each as a reference (id, correlation_id, state, requester,
    obligor, expires_at): a v3 driver event carries a commitment whole only in `changes`,
    when its message changed it, and counts the rest in `owed`."""
    live = event.projections["commitments"].live or {}
    found: list[dict[str, Any]] = live.get("active", [])
    return found


def owes(event: DriverEvent, addresses: tuple[str, ...]) -> int:
    """How many active commitments `addresses` owe after the event's message, listed or
    not."""
    owed = (event.projections["commitments"].live or {}).get("owed", {})
    return sum(owed.get(address, 0) for address in addresses)


def changed(event: DriverEvent) -> list[dict[str, Any]]:
    """The commitments the event's message opened, changed or ended, each as it is now."""
    changes = event.projections["commitments"].changes or {}
    found: list[dict[str, Any]] = changes.get("commitments", [])
    return found


def owed_by(event: DriverEvent, addresses: tuple[str, ...]) -> list[dict[str, Any]]:
    """The active commitments whose obligor is one of `addresses`, oldest first (as
    references: `whole` finds what was asked)."""
    return [c for c in active(event) if c["obligor"] in addresses]


async def whole_owed(
    client: Client, event: DriverEvent, addresses: tuple[str, ...], known: dict[str, Any]
) -> list[dict[str, Any]]:
    """The whole active commitments `addresses` owe after `event`, oldest first: from
    `known` (the commitments of the events seen, by id), else from the channel's state
    (one opened before this agent looked, or more than the event lists)."""
    references = owed_by(event, addresses)
    if owes(event, addresses) > len(references) or any(
        reference["id"] not in known for reference in references
    ):
        state = await client.state(event.channel)
        commitments = state["projections"]["commitments"]["state"]["commitments"]
        known.update(commitments)
        return [
            c for c in commitments.values() if c["obligor"] in addresses and c["state"] in ACTIVE
        ]
    return [known[reference["id"]] for reference in references]


async def answer(
    chorus: Client,
    channel: str,
    commitment: dict[str, Any],
    sender: str,
    kind: MessageType,
    content: str,
    target: str | None = None,
) -> SentMessage:
    """Reply to the message that opened `commitment` (known from the state, not from a
    received message, so `send` with the ids it holds instead of `reply`)."""
    return await chorus.send(
        channel,
        sender=sender,
        type=kind,
        content=content,
        target=target,
        in_reply_to=commitment["opened_by"],
        correlation_id=commitment["correlation_id"],
    )


Policy = Callable[[dict[str, Any]], list[tuple[MessageType, str, str | None]]]


def ana_policy(commitment: dict[str, Any]) -> list[tuple[MessageType, str, str | None]]:
    if commitment["parent"] is None:  # asked directly: too busy
        return [(MessageType.DECLINE, "busy with the storage migration until Friday", None)]
    return [(MessageType.DONE, "changelog written: docs/changelog.md", None)]


def ben_policy(commitment: dict[str, Any]) -> list[tuple[MessageType, str, str | None]]:
    if "changelog" in (commitment["excerpt"] or ""):
        return [
            (MessageType.STATUS, "on it", None),
            (
                MessageType.HANDOFF,
                "ana wrote the parser changes; handing it to her",
                "instance:ana",
            ),
        ]
    return [(MessageType.FAILURE, "the benchmark machine is down", None)]


async def writer(client: Client, channel: str, name: str, policy: Policy) -> list[str]:
    """Act once on every commitment owed to `instance:<name>` until the channel is decided;
    the kinds of what it sent, in order."""
    handled: set[str] = set()
    known: dict[str, dict[str, Any]] = {}
    sent: list[str] = []
    address = (f"instance:{name}",)

    def work_or_done(event: DriverEvent) -> bool:
        known.update((c["id"], c) for c in changed(event))
        new = [c for c in owed_by(event, address) if c["id"] not in handled]
        unlisted = owes(event, address) > len(owed_by(event, address))
        return bool(new) or unlisted or decided(event)

    while True:
        event = await client.wait(channel, until=work_or_done, timeout=STEP_TIMEOUT)
        if decided(event):
            return sent
        for commitment in await whole_owed(client, event, address, known):
            if commitment["id"] in handled:
                continue
            handled.add(commitment["id"])
            for kind, content, target in policy(commitment):
                await answer(client, channel, commitment, name, kind, content, target)
                sent.append(kind.value)


@dataclass
class Outcome:
    """What the run came to: how each request ended, the decision, what the reviewer read."""

    requests: dict[str, str] = field(default_factory=dict)
    decision: DecisionRecord | None = None
    reviewer_owed: list[str] = field(default_factory=list)
    reviewer_context: AgentContext | None = None
    writers_sent: dict[str, list[str]] = field(default_factory=dict)


async def reviewer(client: Client, channel: str, outcome: Outcome) -> SentMessage | None:
    """Joins late: reads what it should know, then does what it owes; its last message."""
    outcome.reviewer_context = await client.context(channel, max_tokens=400, for_agent="rey")
    state = await client.state(channel)
    owed = [
        commitment
        for commitment in state["projections"]["commitments"]["state"]["commitments"].values()
        if commitment["state"] in ACTIVE
        and commitment["obligor"] in ("instance:rey", "role:reviewer")
    ]
    outcome.reviewer_owed = [commitment["excerpt"] for commitment in owed]
    last = None
    for commitment in owed:
        last = await answer(
            client, channel, commitment, "rey", MessageType.DONE, "reviewed: two typos fixed"
        )
    return last


async def planner(client: Client, channel: str, outcome: Outcome) -> None:
    await client.configure(channel, termination=TERMINATION)
    # Owed by the reviewer, who is not here yet: the channel stays open until it is done.
    await client.send(
        channel,
        sender="planner",
        type="command",
        content="review docs/changelog.md before the release",
        target="instance:rey",
    )

    async def ask(label: str, **fields: Any) -> str:
        request = await client.send(channel, sender="planner", **fields)
        # How the request ended (a hand-off followed to the end of the commitment it opened).
        ended = await client.wait_for(request, timeout=STEP_TIMEOUT)
        outcome.requests[label] = ended.state.value
        return outcome.requests[label]

    write = "write the changelog for 2.0"
    if await ask("changelog to ana", type="command", content=write, target="instance:ana") != (
        "FULFILLED"
    ):
        await ask("changelog to ben", type="command", content=write, target="instance:ben")
    await ask("benchmark", type="command", content="benchmark the parser", target="instance:ben")
    await ask(
        "sanity check",
        type="query",
        content="is the version number right?",
        target="role:reviewer",
        deadline=timedelta(seconds=5),
    )


async def run(channel: str, client: Client) -> Outcome:
    outcome = Outcome()
    writers = {
        name: asyncio.ensure_future(writer(client, channel, name, policy))
        for name, policy in (("ana", ana_policy), ("ben", ben_policy))
    }
    await planner(client, channel, outcome)
    done = await reviewer(client, channel, outcome)
    # The decision its work led to: none before its message counts.
    final = await client.wait(channel, until=decided, after=done, timeout=STEP_TIMEOUT)
    outcome.decision = final.decision
    for name, task in writers.items():
        outcome.writers_sent[name] = await task
    return outcome


async def main(channel: str) -> None:
    async with Client() as client:
        outcome = await run(channel, client)
    for label, state in outcome.requests.items():
        print(f"{label:18} {state}")
    print(f"writers sent       {outcome.writers_sent}")
    print(f"the reviewer owed  {outcome.reviewer_owed}")
    if outcome.reviewer_context is not None:
        print(f"its context:\n{outcome.reviewer_context.text}")
    print(f"decision           {outcome.decision}")


if __name__ == "__main__":
    asyncio.run(
        main(sys.argv[1] if len(sys.argv) > 1 else f"example/release-{uuid.uuid4().hex[:8]}")
    )
