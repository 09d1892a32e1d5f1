"""The expiry stage: the deadlines the fold tells it, and the expiry EVENTs it writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from projections.model import Message, MessageType, utc_now
from streams.worker.compose import Worker
from streams.worker.stages.expiry import earliest_deadline
from tests.unit.streams.worker.stages.test_fold_agent import HOME, captured, offline_worker

CHANNEL = "off/line"


def test_the_earliest_deadline_is_among_the_active_commitments_only() -> None:
    soon = datetime(2026, 1, 1, 9, tzinfo=UTC)
    later = soon + timedelta(hours=1)
    commitments = [
        {"state": "FULFILLED", "expires_at": (soon - timedelta(hours=1)).isoformat()},
        {"state": "OPEN", "expires_at": later.isoformat()},
        {"state": "ACKNOWLEDGED", "expires_at": soon.isoformat()},
        {"state": "OPEN", "expires_at": None},
    ]
    assert earliest_deadline(commitments) == soon
    assert earliest_deadline(commitments[:1]) is None


def ask(cid: str, **fields: Any) -> Message:
    return Message(
        channel=CHANNEL,
        sender="ann",
        type=MessageType.COMMAND,
        content="do it",
        correlation_id=cid,
        **fields,
    )


async def fold_all(worker: Worker, values: list[bytes]) -> None:
    """Fold `values`, the next records of the channel's partition (no driver event sent)."""
    assert worker.folder is not None
    for value in values:
        offset = worker.runtime.next_offset(HOME) or 0
        await worker.folder.on_record(CHANNEL.encode(), value, HOME, offset)


async def test_the_fold_tells_the_deadlines_and_a_full_scan_finds_them_in_the_tables() -> None:
    worker = offline_worker()
    chorus, expiry = worker.runtime, worker.expiry
    assert expiry is not None
    deadline = utc_now() + timedelta(hours=1)
    first = ask("a", deadline=deadline - timedelta(minutes=1))
    done = Message(
        channel=CHANNEL,
        sender="bob",
        type=MessageType.DONE,
        correlation_id="a",
        in_reply_to=first.id,
    )
    with captured():
        messages = [first, ask("b", deadline=deadline), done]
        await fold_all(worker, [m.model_dump_json().encode() for m in messages])
    assert expiry._deadlines == {CHANNEL: deadline}  # "a" is done: "b"'s is the earliest
    await chorus.checkpoint.checkpoint()
    chorus.forget_cached()
    expiry._deadlines.clear()
    expiry._rescan.forget()
    assert await expiry.expire_overdue(utc_now()) == 0
    assert expiry._deadlines == {CHANNEL: deadline}


async def test_an_overdue_commitment_is_expired_once_through_the_log() -> None:
    worker = offline_worker()
    chorus, expiry = worker.runtime, worker.expiry
    assert expiry is not None
    deadline = utc_now() + timedelta(hours=1)
    chorus.messages_partition = lambda channel: HOME  # type: ignore[method-assign]
    with captured() as sent:
        await fold_all(worker, [ask("a", deadline=deadline).model_dump_json().encode()])
        assert await expiry.expire_overdue(deadline - timedelta(seconds=1)) == 0
        assert await expiry.expire_overdue(deadline) == 1
        assert await expiry.expire_overdue(deadline + timedelta(seconds=1)) == 0  # sent once
        ((topic, value),) = sent
        assert topic == chorus.messages.get_topic_name()
        event = Message.model_validate_json(value)
        assert event.type is MessageType.EVENT and event.correlation_id == "a"
        await fold_all(worker, [value])  # the fold expires it
    assert CHANNEL not in expiry._deadlines
    assert await expiry.expire_overdue(deadline + timedelta(hours=1)) == 0
    assert expiry._expiry_sent == set()  # forgotten once the fold expired it: bounded
