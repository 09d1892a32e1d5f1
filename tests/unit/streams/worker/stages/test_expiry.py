"""The expiry stage: the deadline index the fold keeps it, and the expiry EVENTs it writes
for what is due, looking at nothing else."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from unittest.mock import patch

from projections.model import Message, MessageType, utc_now
from streams.records import key_partition
from streams.worker.compose import Worker
from streams.worker.deadlines import Due
from streams.worker.stages.expiry import COMMITMENTS
from tests.unit.streams.worker.offline import offline_worker
from tests.unit.streams.worker.stages.test_fold_agent import HOME, captured

CHANNEL = "off/line"


def ask(cid: str, channel: str = CHANNEL, **fields: Any) -> Message:
    return Message(
        channel=channel,
        sender="ann",
        type=MessageType.COMMAND,
        content="do it",
        correlation_id=cid,
        **fields,
    )


async def fold_all(worker: Worker, messages: list[Message | bytes]) -> None:
    """Fold `messages`, the next records of their partitions (no driver event sent)."""
    assert worker.folder is not None
    for message in messages:
        value = message if isinstance(message, bytes) else message.model_dump_json().encode()
        channel = Message.model_validate_json(value).channel
        partition = key_partition(channel.encode(), 4)
        offset = worker.runtime.next_offset(partition) or 0
        await worker.folder.on_record(channel.encode(), value, partition, offset)


def owning_everything(worker: Worker) -> None:
    worker.runtime.ownership.owned_partitions = lambda: frozenset(range(4))  # type: ignore[method-assign]


async def test_the_fold_indexes_each_channels_next_deadline_and_the_index_outlives_memory() -> None:
    worker = offline_worker()
    chorus, expiry = worker.runtime, worker.expiry
    assert expiry is not None
    deadline = utc_now().replace(microsecond=0) + timedelta(hours=1)
    first = ask("a", deadline=deadline - timedelta(minutes=1))
    done = Message(
        channel=CHANNEL,
        sender="bob",
        type=MessageType.DONE,
        correlation_id="a",
        in_reply_to=first.id,
    )
    with captured():
        await fold_all(worker, [first, ask("b", deadline=deadline), done])
    later = deadline + timedelta(days=1)
    # "a" is done: "b"'s deadline is the channel's next, its only entry.
    assert expiry.index.due(HOME, later, 10) == [Due(CHANNEL, deadline)]
    await chorus.checkpoint.checkpoint()
    assert chorus.folds is not None
    chorus.folds.cache.clear()
    assert expiry.index.due(HOME, later, 10) == [Due(CHANNEL, deadline)]  # from the store
    assert expiry.index.due(HOME, deadline - timedelta(seconds=1), 10) == []


async def test_an_overdue_commitment_is_expired_once_through_the_log() -> None:
    worker = offline_worker()
    chorus, expiry = worker.runtime, worker.expiry
    assert expiry is not None
    owning_everything(worker)
    deadline = utc_now().replace(microsecond=0) + timedelta(hours=1)
    with captured() as sent:
        await fold_all(worker, [ask("a", deadline=deadline)])
        assert await expiry.expire_overdue(deadline - timedelta(seconds=1)) == 0
        assert await expiry.expire_overdue(deadline) == 1
        assert await expiry.expire_overdue(deadline + timedelta(seconds=1)) == 0  # sent once
        ((topic, value),) = sent
        assert topic == chorus.messages.get_topic_name()
        event = Message.model_validate_json(value)
        assert event.type is MessageType.EVENT and event.correlation_id == "a"
        await fold_all(worker, [value])  # the fold expires it
    assert expiry.index.due(HOME, deadline + timedelta(days=1), 10) == []
    assert expiry.sent == {}  # forgotten once the fold expired it: bounded
    assert await expiry.expire_overdue(deadline + timedelta(hours=1)) == 0


async def test_an_expiry_the_fold_has_not_applied_is_sent_again_later() -> None:
    worker = offline_worker()
    expiry = worker.expiry
    assert expiry is not None
    owning_everything(worker)
    deadline = utc_now().replace(microsecond=0) + timedelta(hours=1)
    with captured() as sent:
        await fold_all(worker, [ask("a", deadline=deadline)])
        assert await expiry.expire_overdue(deadline) == 1
        assert await expiry.expire_overdue(deadline + timedelta(seconds=29)) == 0
        assert await expiry.expire_overdue(deadline + timedelta(seconds=31)) == 1
    assert len(sent) == 2


async def test_a_tick_reads_only_the_channels_due() -> None:
    worker = offline_worker()
    expiry = worker.expiry
    assert expiry is not None and worker.runtime.folds is not None
    owning_everything(worker)
    now = utc_now()
    later = [ask("x", channel=f"many/c{n}", deadline=now + timedelta(days=1)) for n in range(200)]
    with captured():
        await fold_all(worker, [*later, ask("a", deadline=now + timedelta(minutes=1))])
    table = worker.runtime.folds.tables[COMMITMENTS]
    read: list[str] = []
    real_get = table.get

    def get(key: Any, partition: int, default: Any = None) -> Any:
        read.append(key)
        return real_get(key, partition, default)

    with captured() as sent, patch.object(table, "get", get):
        assert await expiry.expire_overdue(now + timedelta(minutes=2)) == 1
    assert read == [CHANNEL] and len(sent) == 1


async def test_an_entry_the_state_moved_away_from_is_moved_where_it_is() -> None:
    worker = offline_worker()
    expiry = worker.expiry
    assert expiry is not None
    owning_everything(worker)
    deadline = utc_now().replace(microsecond=0) + timedelta(hours=1)
    with captured():
        await fold_all(worker, [ask("a", deadline=deadline)])
    early = deadline - timedelta(minutes=30)
    expiry.index.put(CHANNEL, early, HOME)  # an entry no state stands for
    with captured() as sent:
        assert await expiry.expire_overdue(early + timedelta(seconds=1)) == 0
    assert sent == []
    assert expiry.index.due(HOME, deadline + timedelta(days=1), 10) == [Due(CHANNEL, deadline)]


async def test_a_partitions_index_is_built_once_from_a_fold_table_the_fold_did_not_write() -> None:
    """After an upgrade or a replay rebuild, the commitments' table holds deadlines the index
    never heard of: the first assignment indexes them, later ones read only the marker."""
    worker = offline_worker()
    chorus, expiry = worker.runtime, worker.expiry
    assert expiry is not None
    deadline = utc_now().replace(microsecond=0) + timedelta(hours=1)
    with captured():
        await fold_all(worker, [ask("a", deadline=deadline)])
    expiry.index.remove(Due(CHANNEL, deadline), HOME)  # as if nobody indexed it
    await chorus.checkpoint.checkpoint()
    assert expiry.index.due(HOME, deadline, 10) == []
    assert await expiry.index_partition(HOME) == 1
    assert expiry.index.due(HOME, deadline, 10) == [Due(CHANNEL, deadline)]
    assert await expiry.index_partition(HOME) == 0  # built: the marker says so
