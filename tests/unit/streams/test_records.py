"""The fold stage's pure helpers and the projection registry, without Kafka."""

import base64
import tracemalloc
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from projections.channel import decide, step
from projections.commitments import CommitmentProjection
from projections.model import LogPosition, Message, MessageError
from projections.overview import ChannelOverviewProjection
from projections.recap import RecapPhase
from projections.termination import MaxMessages
from streams.dead_letters import (
    DEAD_LETTER_COPY_LIMIT,
    DEAD_LETTER_MAX_BYTES,
    dead_letter_for,
)
from streams.records import (
    PARTITION_CACHE_KEYS,
    DriverEvent,
    MisplacedRecord,
    ProjectionChange,
    RecapRecord,
    SummaryRecord,
    key_partition,
    recap_view,
    summary_view,
    validate_record,
)
from streams.registry import ProjectionImportError, load_projection, registered_projections


def test_validate_record_checks_key_against_channel() -> None:
    value = orjson.dumps({"channel": "a/b", "sender": "s", "type": "STATUS"})
    at = LogPosition(0, 7, 0)
    placed = {"partition": 0, "partitions": 1}
    assert validate_record(b"a/b", value, 1000, at, **placed).channel == "a/b"
    with pytest.raises(MessageError, match="key is null"):
        validate_record(None, value, 1000, at, **placed)
    with pytest.raises(MessageError, match="does not match channel 'a/b'"):
        validate_record(b"x", value, 1000, at, **placed)


# org.apache.kafka.common.utils.UtilsTest.testMurmur2 (apache/kafka, clients/src/test):
# Utils.murmur2 of these keys, as Java's signed int.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_key_partition_is_the_java_clients_default_partition() -> None:
    # BuiltInPartitioner.partitionForKey: Utils.toPositive(Utils.murmur2(key)) % partitions,
    # toPositive being `& 0x7fffffff`.
    for key, java_hash in JAVA_MURMUR2.items():
        for partitions in (1, 2, 3, 4, 6, 12, 100):
            assert key_partition(key, partitions) == (java_hash & 0x7FFFFFFF) % partitions
    # The same, worked out by hand for 4 and 12 partitions.
    assert [key_partition(key, 4) for key in JAVA_MURMUR2] == [0, 2, 0, 3, 1, 3]
    assert [key_partition(key, 12) for key in JAVA_MURMUR2] == [0, 6, 8, 11, 5, 3]


def test_key_partition_agrees_with_aiokafkas_default_partitioner() -> None:
    from aiokafka.partitioner import DefaultPartitioner

    partitioner = DefaultPartitioner()
    keys = [c.encode() for c in ["team/alpha", "ops/incident-7", "x", "a" * 200, "é/ü"]]
    keys += [f"load/channel-{n}".encode() for n in range(200)]
    for partitions in (1, 3, 4, 8, 50):
        every = list(range(partitions))
        for key in keys:
            assert key_partition(key, partitions) == partitioner(key, every, every)


def test_a_valid_message_on_another_partition_is_rejected_with_the_fix() -> None:
    channel = "team/alpha"
    home = key_partition(channel.encode(), 4)
    value = orjson.dumps({"channel": channel, "sender": "s", "type": "STATUS"})
    at = LogPosition(home, 7, 0)
    assert validate_record(channel.encode(), value, 1000, at, partition=home, partitions=4)
    elsewhere = (home + 1) % 4
    with pytest.raises(MisplacedRecord) as raised:
        validate_record(channel.encode(), value, 1000, at, partition=elsewhere, partitions=4)
    reason = raised.value.reason
    where = f"channel 'team/alpha' is on partition {elsewhere} but belongs on partition {home}"
    assert where in reason and "partitioner=murmur2_random" in reason
    assert raised.value.channel == channel
    # An invalid record or a wrong key is reported as such, wherever it is.
    with pytest.raises(MessageError, match="not valid UTF-8 JSON") as invalid:
        validate_record(channel.encode(), b"{", 1000, at, partition=elsewhere, partitions=4)
    assert not isinstance(invalid.value, MisplacedRecord)
    with pytest.raises(MessageError, match="does not match") as wrong_key:
        validate_record(b"x", value, 1000, at, partition=elsewhere, partitions=4)
    assert not isinstance(wrong_key.value, MisplacedRecord)


def test_key_partitions_are_cached_for_a_bounded_number_of_keys() -> None:
    key_partition.cache_clear()
    keys = [f"load/channel-{n}".encode() for n in range(PARTITION_CACHE_KEYS + 100)]
    first = [key_partition(key, 4) for key in keys]
    assert key_partition.cache_info().currsize == PARTITION_CACHE_KEYS  # the oldest went
    assert [key_partition(key, 4) for key in keys[:100]] == first[:100]  # computed again


def test_dead_letter_keeps_text_or_bytes_and_caps_size() -> None:
    text = dead_letter_for("r", "validate", topic="t", partition=1, offset=2, key=b"k", value=b"hi")
    assert (text.original, text.original_base64, text.key) == ("hi", None, "k")
    binary = dead_letter_for(
        "r", "validate", topic="t", partition=1, offset=2, key=None, value=b"\xff"
    )
    assert binary.original is None and base64.b64decode(binary.original_base64 or "") == b"\xff"
    huge = dead_letter_for(
        "r", "v", topic="t", partition=0, offset=0, key=None, value=b"x" * 70_000
    )
    assert huge.original_truncated and len(huge.original or "") == DEAD_LETTER_COPY_LIMIT
    escaped = dead_letter_for(
        "r" * 9000, "v", topic="t", partition=0, offset=0, key=None, value=b"\x01" * 70_000
    )  # each byte escapes to six
    assert len(escaped.to_bytes()) <= DEAD_LETTER_MAX_BYTES and len(escaped.reason) == 2000
    null = dead_letter_for("r", "v", topic="t", partition=0, offset=0, key=None, value=None)
    assert null.original is None and null.original_base64 is None


def test_step_keeps_state_when_a_projection_raises_and_decides_on_the_rest() -> None:
    class Broken:
        name = "broken"
        version = 1

        def identity(self) -> dict[str, int]:
            return {}

        def apply(self, state: dict[str, int], message: Message) -> dict[str, int]:
            raise KeyError("nope")

    projections = [CommitmentProjection(), ChannelOverviewProjection(), Broken()]
    message = Message(channel="c", sender="s", type="STATUS", content="x")
    steps = step(projections, {}, message, 0)
    assert [s.applied for s in steps] == [True, True, False]
    assert steps[2].error == "KeyError: 'nope'" and steps[2].folded.offset == -1
    assert decide(MaxMessages(1), steps).__class__.__name__ == "Complete"
    again = step(projections, {s.projection.name: s.folded for s in steps}, message, 0)
    assert [s.applied for s in again] == [False, False, False]  # redelivery is harmless


def test_registry_loads_user_projections_by_import_path() -> None:
    names = [
        p.name for p in registered_projections(["tests.sample_projections:WordCountProjection"])
    ]
    assert names == ["commitments", "overview", "word-count"]
    with pytest.raises(ProjectionImportError, match="must look like"):
        load_projection("no_colon")
    with pytest.raises(ProjectionImportError, match="cannot import"):
        load_projection("tests.nothing_here:X")
    with pytest.raises(ProjectionImportError, match="is not a ChannelProjection"):
        load_projection("tests.factories:AGENTS")
    with pytest.raises(ProjectionImportError, match="unique"):
        registered_projections(["projections.overview:ChannelOverviewProjection"])


def test_a_v3_driver_event_carries_what_the_message_changed_and_the_live_state() -> None:
    from projections.projection import Folded
    from streams.records import DRIVER_EVENT_VERSION, DriverEvent, driver_event
    from tests.sample_projections import WordCountProjection

    projections = [CommitmentProjection(), ChannelOverviewProjection(), WordCountProjection()]
    opener = Message(
        channel="a/b", sender="ann", type="COMMAND", content="ship it", correlation_id="c1"
    )
    steps = step(projections, {}, opener, 0)
    event = driver_event(opener, 1, 0, steps, {"decision": "CONTINUE"})
    assert event.event_version == DRIVER_EVENT_VERSION == 3
    assert event.decision is not None and event.decision.offset == 0  # current at its message
    commitments = event.projections["commitments"]
    assert [c["id"] for c in commitments.changes["commitments"]] == [opener.id]
    assert [c["id"] for c in commitments.live["active"]] == [opener.id]
    assert event.projections["overview"].live["message_count"] == 1
    # a projection without live/changes carries its whole state, and no changes
    words = event.projections["word-count"]
    assert words.live == steps[2].folded.state and words.changes is None
    assert DriverEvent.model_validate(orjson.loads(event.to_bytes())) == event

    # a redelivery: nothing applied, no changes, the live state as it is
    stored: dict[str, Folded | None] = {s.projection.name: s.folded for s in steps}
    again = step(projections, stored, opener, 0)
    redelivered = driver_event(opener, 1, 0, again, {"decision": "CONTINUE"})
    assert not redelivered.applied
    assert all(entry.changes is None for entry in redelivered.projections.values())
    assert redelivered.projections["commitments"].live == commitments.live


def test_a_recap_record_s_phase_is_the_phase_machine_s() -> None:
    record = RecapRecord(channel="c", text=None, phase="COMPLETED")
    assert record.phase is RecapPhase.COMPLETED
    assert orjson.loads(record.to_bytes())["phase"] == "COMPLETED"
    with pytest.raises(ValidationError):
        RecapRecord(channel="c", text=None, phase="FINISHED")


def test_the_latest_summary_and_recap_read_from_their_topics_are_shown_as_views() -> None:
    summary = SummaryRecord(channel="c", text="What was said.", total_messages=3)
    shown = summary_view("c", summary.model_dump(mode="json"))
    assert (shown["channel"], shown["content"], shown["total_messages"]) == (
        "c",
        "What was said.",
        3,
    )
    assert summary_view("c", None) == {"channel": "c", "content": None, "annotations": {}}
    recap = RecapRecord(channel="c", text="Done.", phase="COMPLETED").model_dump(mode="json")
    assert recap_view("c", recap) == {
        "channel": "c",
        "phase": "COMPLETED",
        "text": "Done.",
        "recap": recap,
    }
    assert recap_view("c", None) == {"channel": "c", "phase": "IDLE", "text": None, "recap": None}


def driver_event(change: ProjectionChange, **fields: Any) -> DriverEvent:
    """Channel a's event for its message at offset 2, which `change` says of projection p."""
    return DriverEvent(
        source="channel:a",
        channel="a",
        message_id="m",
        partition=1,
        offset=2,
        projections={"p": change},
        decision={"decision": "CONTINUE"},
        **fields,
    )


def test_driver_event_bytes_match_the_schema() -> None:
    event = driver_event(
        ProjectionChange(version=1, changes={"k": [2]}, live={"k": [1, 2]}),
        errors={"q": "ValueError: no"},
    )
    assert DriverEvent.model_validate(orjson.loads(event.to_bytes())) == event
    assert orjson.loads(event.to_bytes())["event_version"] == 3


def test_a_driver_events_bytes_weigh_what_they_hold() -> None:
    # A fold's events wait in a lot for the broker: orjson's own output would hold its
    # working buffer (8 KiB for these 700 bytes) until then.
    event = driver_event(ProjectionChange(version=1, changes={"k": "x" * 600}, live={}))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        encoded = event.to_bytes()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(encoded) > 600 and held < 2 * len(encoded), (held, len(encoded))


def test_a_decision_reads_as_words() -> None:
    from projections.termination import DecisionName
    from streams.records import DecisionRecord

    complete = DecisionRecord(
        decision=DecisionName.COMPLETE, detail="All commitments resolved (1 fulfilled)", offset=2
    )
    assert str(complete) == "COMPLETE All commitments resolved (1 fulfilled)"
    assert str(DecisionRecord(decision=DecisionName.CONTINUE)) == "CONTINUE"
