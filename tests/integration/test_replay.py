"""Replay on a real broker against real worker processes: live folds equal the replay,
`--verify` catches a corrupted table, a version bump is rebuilt blue-green."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from projections.commitments import CommitmentsState
from projections.model import Message, MessageError, encode_message
from projections.overview import ChannelOverviewProjection
from projections.projection import Folded, dump_state, fold
from streams.interfaces.cli.replay import recompute_summary, replay_command
from streams.kafka.clients import admin, producer
from streams.kafka.produce import send_messages
from streams.ops.topics import create_topics
from streams.records import key_partition, validate_record
from streams.registry import registered_projections
from streams.replay import catch_up_rebuilds, measure_replay_vs_raw, shadow_check, verify
from streams.replay.compare import live_folds
from streams.replay.tables import changelog_record
from streams.settings import Settings, get_settings
from tests.conftest import WorkerProcess, read_until
from tests.factories import conversation, worker_states
from tests.replay_projections import TallyV2, message_sequences

pytestmark = pytest.mark.kafka

CHANNELS = ["team/alpha", "team/beta", "ops/incident-7"]
TALLY_V1 = '["tests.replay_projections:TallyV1"]'
TALLY_V2 = '["tests.replay_projections:TallyV2"]'
PROPERTY_PROJECTIONS = (
    '["tests.sample_projections:WordCountProjection", "tests.replay_projections:PairsProjection"]'
)


def _invoke(monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str]) -> Result:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(replay_command, [*args, "--no-progress"])
    finally:
        get_settings.cache_clear()


async def invoke(monkeypatch: pytest.MonkeyPatch, args: list[str], **env: str) -> Result:
    """`chorus replay ARGS` with the test's environment (plus `env`), in a thread: the
    command runs its own event loop, as it does from a shell."""
    return await asyncio.to_thread(_invoke, monkeypatch, args, env)


async def produce(
    settings: Settings, records: list[tuple[bytes | None, bytes | None]]
) -> list[tuple[int, int]]:
    """Send raw records in order; (partition, offset) of each."""
    kafka = producer(settings)
    await kafka.start()
    try:
        futures = [
            await kafka.send(settings.topic("messages"), key=key, value=value)
            for key, value in records
        ]
        return [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
    finally:
        await kafka.stop()


def live(worker: WorkerProcess, channel: str) -> dict[str, Folded]:
    response = worker.get(f"/channels/{channel}/state")
    return live_folds(response.json()) if response.status_code == 200 else {}


def wait_until(condition: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def wait_folded(
    worker: WorkerProcess,
    last: dict[str, int],
    projection: str = "overview",
    version: int = ChannelOverviewProjection.version,
) -> None:
    def done() -> bool:
        for channel, offset in last.items():
            fold_ = live(worker, channel).get(projection)
            if fold_ is None or fold_.offset < offset or fold_.version != version:
                return False
        return True

    wait_until(done, 90, f"{projection} v{version} to reach {last}")


def wait_folded_exactly(
    worker: WorkerProcess, last: dict[str, int], projection: str, version: int
) -> None:
    """As `wait_folded`, and the fold stops there (nothing else is written to the channel)."""
    wait_folded(worker, last, projection, version)
    for channel, offset in last.items():
        assert live(worker, channel)[projection].offset == offset


def dumped(folds: dict[str, Folded]) -> dict[str, Any]:
    return {name: f.model_dump(mode="json") for name, f in sorted(folds.items())}


# --- the property: live fold on the broker == replay ------------------------------------------


@pytest.fixture
def property_worker(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> Iterator[tuple[Settings, WorkerProcess]]:
    settings_ = chorus_settings.model_copy(
        update={"projections": orjson.loads(PROPERTY_PROJECTIONS)}
    )
    yield settings_, start_worker(CHORUS_PROJECTIONS=PROPERTY_PROJECTIONS)


@settings(
    max_examples=5,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: each step costs a broker round
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_live_fold_on_the_broker_equals_the_replay(
    data: st.DataObject, property_worker: tuple[Settings, WorkerProcess]
) -> None:
    """One worker for the test; each example writes to channels of its own.

    Past deadlines make the worker's expiry timer append EVENTs to the channels while the
    example runs: the replay must fold those too, so the oracle is the log, not `messages`.
    """
    settings_, worker = property_worker
    tag = uuid.uuid4().hex[:8]
    channels = [f"p{tag}/room-{n}" for n in range(3)]
    messages = data.draw(message_sequences(channels, max_size=30))
    junk = data.draw(st.lists(st.integers(0, len(messages)), max_size=3))
    records: list[tuple[bytes | None, bytes | None]] = []
    for index, message in enumerate(messages):
        for _ in range(junk.count(index)):  # records the worker dead-letters
            records.append((message.channel.encode(), b"{not json"))
            records.append((channels[0].encode(), encode_message(message)))
        records.append((message.channel.encode(), encode_message(message)))
    delivered = asyncio.run(produce(settings_, records))
    last: dict[str, int] = {}
    for (key, value), (partition, offset) in zip(records, delivered, strict=True):
        with contextlib.suppress(MessageError):  # the worker dead-letters it
            message = validate_record(
                key,
                value,
                settings_.max_message_bytes,
                partition=partition,
                partitions=settings_.partitions,
            )
            last[message.channel] = offset
    wait_folded(worker, last)

    projections = registered_projections(settings_.projections, settings_)

    async def check() -> None:
        async with httpx.AsyncClient(base_url=worker.base_url, timeout=10) as client:

            async def fetch(channel: str) -> Any:
                response = await client.get(f"/channels/{channel}/state")
                return response.json() if response.status_code == 200 else None

            report = await verify(settings_, projections, fetch_state=fetch, channels=channels)
        assert report.differences == [], [d.describe() for d in report.differences]
        assert report.compared >= len(last) * 3

    asyncio.run(check())


# --- verify catches a corrupted table ---------------------------------------------------------


async def test_verify_passes_live_and_catches_a_corrupted_table(
    chorus_settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await create_topics(chorus_settings)
    worker = start_worker()
    messages = conversation(CHANNELS, 90, seed=21)
    delivered = await send_messages(chorus_settings, messages)
    last = {d.message.channel: d.offset for d in delivered}
    await asyncio.to_thread(wait_folded, worker, last)

    result = await invoke(monkeypatch, ["--verify"])
    assert result.exit_code == 0, result.output
    assert "verified 3 channels (6 folds)" in result.output and "all match" in result.output

    # Corrupt the worker's tables the way a bug would: through their changelogs.
    alpha = live(worker, "team/alpha")["overview"]
    bogus = alpha.model_copy(
        update={"state": {**alpha.state, "message_count": alpha.state["message_count"] + 1000}}
    )
    partition = {d.message.channel: d.partition for d in delivered}
    worker.stop()
    kafka = producer(chorus_settings)
    await kafka.start()
    try:
        app_id = chorus_settings.app_id
        key, value = changelog_record("team/alpha", bogus)
        await kafka.send_and_wait(
            f"{app_id}-fold-overview-v3-changelog",
            key=key,
            value=value,
            partition=partition["team/alpha"],
        )
        await kafka.send_and_wait(  # a tombstone: the worker forgets beta's commitments
            f"{app_id}-fold-commitments-v3-changelog",
            key=orjson.dumps("team/beta"),
            value=None,
            partition=partition["team/beta"],
        )
    finally:
        await kafka.stop()
    restarted = start_worker(CHORUS_SHADOW_CHECK_SECONDS="1", CHORUS_SHADOW_CHECK_SAMPLE="3")
    await asyncio.to_thread(
        wait_until,
        lambda: (
            live(restarted, "team/alpha").get("overview") == bogus
            and "commitments" not in live(restarted, "team/beta")
        ),
        60,
        "the worker to recover the corrupted entries",
    )

    result = await invoke(monkeypatch, ["--verify"])
    assert result.exit_code == 1, result.output
    out = result.output
    assert "team/alpha [overview]: states differ" in out
    assert f'-    "message_count": {alpha.state["message_count"] + 1000},' in out
    assert f'+    "message_count": {alpha.state["message_count"]},' in out
    assert "team/beta [commitments]: the log folds into this projection but the worker" in out
    assert "2 differ: team/alpha, team/beta" in out

    # The worker's shadow check finds the same from a snapshot of its tables.
    snapshot = {c: live(restarted, c) for c in CHANNELS}
    differences = await shadow_check(
        chorus_settings, registered_projections([]), snapshot, partitions=4
    )
    assert sorted((d.channel, d.projection, d.kind) for d in differences) == [
        ("team/alpha", "overview", "state"),
        ("team/beta", "commitments", "missing-live"),
    ]
    clean = {c: folds for c, folds in snapshot.items() if c == "ops/incident-7"}
    assert await shadow_check(chorus_settings, registered_projections([]), clean) == []

    # ...and, running on its timer, reports it as a driver event and a metric.
    def divergences(records: list[Any]) -> set[str]:
        return {r.value["source"] for r in records if r.value["source"].startswith("shadow-")}

    # It samples the channels this worker read lately (the views above read all three).
    found = {"shadow-divergence:team/alpha", "shadow-divergence:team/beta"}
    events = await read_until(
        chorus_settings, "driver-events", lambda rs: divergences(rs) >= found, 60
    )
    assert divergences(events) == found
    metrics = restarted.get("/metrics").text
    assert 'chorus_shadow_divergences_total{kind="state",projection="overview"}' in metrics


# --- blue-green rebuild after a version bump --------------------------------------------------


async def test_rebuild_after_a_version_bump_while_reads_keep_working(
    chorus_settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await create_topics(chorus_settings)
    blue = start_worker(CHORUS_PROJECTIONS=TALLY_V1)
    all_messages: list[Message] = []
    last: dict[str, int] = {}

    async def send(count: int, seed: int) -> None:
        batch = conversation(CHANNELS, count, seed=seed)
        batch = [m.model_copy(update={"id": f"{m.id}-{seed}"}) for m in batch]
        for delivered in await send_messages(chorus_settings, batch):
            last[delivered.message.channel] = delivered.offset
        all_messages.extend(batch)

    def expected(channel: str) -> Any:
        return fold(TallyV2(), [m for m in all_messages if m.channel == channel])

    await send(60, seed=1)
    await asyncio.to_thread(wait_folded, blue, dict(last), "tally", 1)

    dry = await invoke(monkeypatch, ["--rebuild", "--dry-run"], CHORUS_PROJECTIONS=TALLY_V2)
    assert dry.exit_code == 0, dry.output
    assert "dry-run full" in dry.output
    async with admin_client(chorus_settings) as client:
        assert f"{chorus_settings.app_id}-fold-tally-v2-changelog" not in await client.list_topics()

    # Build v2 while blue serves v1: reads keep answering, with v1.
    reads: list[int] = []
    stop = asyncio.Event()

    async def read_forever() -> None:
        async with httpx.AsyncClient(base_url=blue.base_url, timeout=5) as client:
            while not stop.is_set():
                response = await client.get("/channels/team/alpha/state")
                assert response.json()["projections"]["tally"]["version"] == 1
                reads.append(response.status_code)
                await asyncio.sleep(0.05)

    reader = asyncio.create_task(read_forever())
    built = await invoke(monkeypatch, ["--rebuild"], CHORUS_PROJECTIONS=TALLY_V2)
    stop.set()
    await reader
    assert built.exit_code == 0, built.output
    assert (
        "tally v2" in built.output and ": full (the table has never been written)" in built.output
    )
    assert "commitments v3" in built.output and "live (a worker serves this table)" in built.output
    assert reads and set(reads) == {200}

    # Blue keeps folding v1 after the rebuild: the gap the switch must close.
    await send(30, seed=2)
    await asyncio.to_thread(wait_folded, blue, dict(last), "tally", 1)
    blue.stop()
    resumed = await invoke(
        monkeypatch, ["--rebuild", "--projection", "tally"], CHORUS_PROJECTIONS=TALLY_V2
    )
    assert resumed.exit_code == 0, resumed.output
    assert ": incremental (resuming the previous rebuild)" in resumed.output

    green = start_worker(CHORUS_PROJECTIONS=TALLY_V2)
    await asyncio.to_thread(wait_folded_exactly, green, dict(last), "tally", 2)
    for channel in CHANNELS:
        assert live(green, channel)["tally"].state == expected(channel)

    # Green folds on from where the rebuild stopped.
    await send(30, seed=3)
    await asyncio.to_thread(wait_folded_exactly, green, dict(last), "tally", 2)
    for channel in CHANNELS:
        assert live(green, channel)["tally"].state == expected(channel)

    verified = await invoke(monkeypatch, ["--verify"], CHORUS_PROJECTIONS=TALLY_V2)
    assert verified.exit_code == 0, verified.output
    assert "all match" in verified.output
    v2_settings = chorus_settings.model_copy(update={"projections": orjson.loads(TALLY_V2)})
    outcomes = await catch_up_rebuilds(v2_settings, registered_projections(v2_settings.projections))
    assert {o.projection: o.mode for o in outcomes}["tally"] == "live"  # green owns it now

    dropped = await invoke(
        monkeypatch, ["--drop-old", "--projection", "tally"], CHORUS_PROJECTIONS=TALLY_V2
    )
    assert dropped.exit_code == 0, dropped.output
    old = f"{chorus_settings.app_id}-fold-tally-v1-changelog"
    assert f"deleted {old}" in dropped.output
    async with admin_client(chorus_settings) as client:
        topics = await client.list_topics()
    assert old not in topics
    assert f"{chorus_settings.app_id}-fold-tally-v2-changelog" in topics


async def test_a_version_deployed_without_a_rebuild_is_built_when_the_worker_starts(
    chorus_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    """What `catch_up_rebuilds` does in `streams.worker.run` before Faust starts."""
    await create_topics(chorus_settings)
    blue = start_worker(CHORUS_PROJECTIONS=TALLY_V1)
    messages = conversation(CHANNELS, 45, seed=41)
    delivered = await send_messages(chorus_settings, messages)
    last = {d.message.channel: d.offset for d in delivered}
    await asyncio.to_thread(wait_folded, blue, last, "tally", 1)
    blue.stop()

    v2 = chorus_settings.model_copy(update={"projections": orjson.loads(TALLY_V2)})
    outcomes = await catch_up_rebuilds(v2, registered_projections(v2.projections))
    modes = {o.projection: o.mode for o in outcomes}
    assert modes == {"commitments": "live", "overview": "live", "tally": "full"}
    again = await catch_up_rebuilds(v2, registered_projections(v2.projections))
    assert {o.projection: o.mode for o in again}["tally"] == "incremental"  # nothing new

    green = start_worker(CHORUS_PROJECTIONS=TALLY_V2)
    await asyncio.to_thread(wait_folded_exactly, green, last, "tally", 2)
    for channel in CHANNELS:
        mine = [m for m in messages if m.channel == channel]
        assert live(green, channel)["tally"].state == fold(TallyV2(), mine)

    # Changelogs Faust created and the one the rebuild created roll segments alike.
    configs = await changelog_configs(chorus_settings)
    assert f"{chorus_settings.app_id}-fold-tally-v2-changelog" in configs
    # The pending summaries are the context role's: its app id is `<app id>-context-v3`.
    assert f"{chorus_settings.app_id}-context-v3-channel-state-changelog" in configs
    for name, config in configs.items():
        assert config["cleanup.policy"] == "compact", name
        assert config["segment.bytes"] == str(chorus_settings.compacted_segment_bytes), name
        assert config["segment.ms"] == str(chorus_settings.compacted_segment_ms), name


async def changelog_configs(settings_: Settings) -> dict[str, dict[str, str]]:
    async with admin_client(settings_) as client:
        names = [
            t
            for t in await client.list_topics()
            if t.startswith(f"{settings_.app_id}-") and t.endswith("-changelog")
        ]
        responses = await client.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
    return {
        name: {entry[0]: entry[1] for entry in configs}
        for response in responses
        for _, _, _, name, configs in response.resources
    }


class admin_client:
    def __init__(self, settings: Settings) -> None:
        self.client = admin(settings)

    async def __aenter__(self) -> Any:
        await self.client.start()
        return self.client

    async def __aexit__(self, *_: object) -> None:
        await self.client.close()


# --- positions in the log, summaries and speed (no worker) ------------------------------------


async def test_to_offset_as_of_summaries_and_benchmark(
    chorus_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await create_topics(chorus_settings)
    messages = conversation(CHANNELS, 150, seed=31)
    delivered = await send_messages(chorus_settings, messages)
    alpha = [d for d in delivered if d.message.channel == "team/alpha"]
    k = alpha[len(alpha) // 2].offset  # a position inside alpha's partition

    result = await invoke(monkeypatch, ["--channel", "team/alpha", "--to-offset", str(k)])
    assert result.exit_code == 0, result.output
    view = orjson.loads(result.stdout.splitlines()[0])
    first_k = [d.message for d in alpha if d.offset < k]
    for projection in registered_projections([]):
        body = view["projections"][projection.name]
        expected = dump_state(fold(projection, first_k))
        # The step joins the commitments' open count into the overview (checked below).
        assert {**body["state"], "open_commitments": 0} == {**expected, "open_commitments": 0}
        assert body["offset"] == max(d.offset for d in alpha if d.offset < k)
    commitments = CommitmentsState.model_validate(view["projections"]["commitments"]["state"])
    assert view["projections"]["overview"]["state"]["open_commitments"] == commitments.open_count()

    moment = messages[100].created_at
    result = await invoke(monkeypatch, ["--channel", "team/alpha", "--as-of", moment.isoformat()])
    assert result.exit_code == 0, result.output
    view = orjson.loads(result.stdout.splitlines()[0])
    until = [d.message for d in alpha if d.message.created_at <= moment]
    assert view["projections"]["overview"]["state"]["message_count"] == len(until)

    result = await invoke(monkeypatch, ["--summaries", "--channel", "team/beta", "--no-states"])
    assert result.exit_code == 0, result.output
    line = orjson.loads(result.stdout.splitlines()[0])
    beta = [m for m in messages if m.channel == "team/beta"]
    assert line["channel"] == "team/beta"
    assert line["summary"] == await recompute_summary(
        beta,
        chorus_settings.summary_after_messages,
        chorus_settings.summary_small_threshold,
        chorus_settings.summary_medium_threshold,
    )

    result = await invoke(monkeypatch, [])
    assert result.exit_code == 0, result.output
    assert f"replayed {len(messages)} records from 4 partitions" in result.output
    assert "into 3 channels" in result.output

    # No worker is running: an operational error (3), never "the state differs" (1).
    result = await invoke(monkeypatch, ["--verify"])
    assert result.exit_code == 3, result.output
    assert "cannot reach the worker" in result.output

    bench = await measure_replay_vs_raw(chorus_settings)
    assert bench.messages == len(messages)
    assert bench.raw_rate > 0 and bench.replay_rate > 0 and bench.decode_rate > 0


# --- parallel replay over partitions ----------------------------------------------------------


async def test_replay_in_worker_processes_equals_one_process(
    chorus_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streams.replay import replay

    await create_topics(chorus_settings)
    channels = [f"team/c{i}" for i in range(12)]
    messages = conversation(channels, 400, seed=41)
    delivered = await send_messages(chorus_settings, messages)
    # Invalid records go to the same partitions; both ways must skip exactly these.
    junk = [(channel.encode(), b"{not json") for channel in channels[:4]]
    await produce(chorus_settings, junk)
    assert len({d.partition for d in delivered}) > 1  # more than one process has work

    projections = registered_projections([])
    one = await replay(chorus_settings, projections)
    two = await replay(chorus_settings, projections, workers=2)
    assert one.replayer.stats == two.replayer.stats
    assert two.records == len(messages) + len(junk) and two.replayer.stats.invalid == len(junk)
    assert sorted(two.replayer.channels) == sorted(channels)
    for channel in channels:
        assert dumped(two.replayer.folds(channel)) == dumped(one.replayer.folds(channel))
        assert two.replayer.partition_of(channel) == one.replayer.partition_of(channel)
        expected = [m for m in messages if m.channel == channel]
        state = two.replayer.folds(channel)["overview"].state
        assert state == worker_states(expected)["overview"]

    # The command prints the same states either way.
    by_one = await invoke(monkeypatch, ["--states", "--workers", "1"])
    by_two = await invoke(monkeypatch, ["--states", "--workers", "2"])
    assert by_one.exit_code == 0 and by_two.exit_code == 0, by_two.output
    lines = by_two.stdout.splitlines()
    assert len(lines) == len(channels) and lines == by_one.stdout.splitlines()

    # Resuming from stored folds (an incremental rebuild): each process seeds the channels of
    # its own partitions, and the result equals one pass over the whole log.
    ends = {span.partition: span.stop for span in one.spans}
    half = {partition: stop // 2 for partition, stop in ends.items()}
    first = await replay(chorus_settings, projections, stop_offsets=half)
    seeds = {
        channel: (first.replayer.channels[channel].partition, first.replayer.folds(channel))
        for channel in first.replayer.channels
    }
    rest = await replay(chorus_settings, projections, start_offsets=half, seeds=seeds, workers=2)
    assert rest.records == one.records - first.records and rest.replayer.dirty
    for channel in channels:
        assert dumped(rest.replayer.folds(channel)) == dumped(one.replayer.folds(channel))

    # A channel whose records sit in every partition (a producer with another partitioner):
    # only those on its key's partition fold, the others are rejected as the worker rejects
    # them, in one process or two.
    split = "team/split"
    kafka = producer(chorus_settings)
    await kafka.start()
    try:
        for index in range(8):
            message = Message(
                id=f"split-{index}", channel=split, sender="ann", type="STATUS", content="x"
            )
            await kafka.send_and_wait(
                chorus_settings.topic("messages"),
                key=split.encode(),
                value=encode_message(message),
                partition=index % 4,
            )
    finally:
        await kafka.stop()
    mixed = await replay(chorus_settings, projections, workers=2)
    assert mixed.replayer.stats == (await replay(chorus_settings, projections)).replayer.stats
    assert mixed.replayer.partition_of(split) == key_partition(split.encode(), 4)
    assert mixed.replayer.channels[split].records == 2
    assert mixed.replayer.stats.folded == one.replayer.stats.folded + 2
    assert mixed.replayer.stats.invalid == one.replayer.stats.invalid + 6
    for channel in channels:
        assert dumped(mixed.replayer.folds(channel)) == dumped(one.replayer.folds(channel))
