"""Settings, read from `CHORUS_*` environment variables (and a `.env` file if present)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from projections import commitments, overview
from projections.channel import MAX_STATE_BYTES
from projections.errors import ChorusError
from projections.model import DEFAULT_MAX_MESSAGE_BYTES
from projections.summarise.result import SUMMARY_MAX_TOKENS

COMPACTED_SEGMENT_BYTES = 8 * 1024 * 1024
COMPACTED_SEGMENT_MS = 10 * 60 * 1000
# A topic's max.message.bytes is the message bound plus room for the record's envelope.
RECORD_OVERHEAD_BYTES = 64 * 1024
# The context role's web server (readiness, its LLM costs and metrics) is on web_port + this.
CONTEXT_WEB_PORT_OFFSET = 1

# Settings that went away, refused (not ignored) for one release: what replaced each.
RETIRED = {
    "fold_url": "the roles share data through Kafka topics only (the context role reads no "
    "fold: summaries and recaps are narratives, and the fold role renders their commitments "
    "when a view is read)",
    "context_url": "the roles share data through Kafka topics only (the fold role reads the "
    "latest summaries and recaps from the chorus.summaries and chorus.recaps topics)",
    "fold_batch_max": "it is CHORUS_BATCH_MAX now (it sizes the context role's batches too)",
    "fold_batch_wait_ms": "it is CHORUS_BATCH_WAIT_MS now (it times the context role's "
    "batches too)",
}


class RetiredSetting(ChorusError):
    """A setting chorus no longer reads is set: refused, so no deployment believes it
    still applies."""


class EmptyApiToken(ChorusError):
    """CHORUS_API_TOKEN is set but empty: refused, so a deployment that meant to guard its
    API (an unset variable in a template) never runs open."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CHORUS_", env_file=".env", extra="ignore")

    # Kafka. When bootstrap_servers is set, chorus uses that cluster and starts nothing.
    bootstrap_servers: str | None = None
    broker_port: int = 9092
    broker_home: Path = Field(default_factory=lambda: Path.home() / ".cache" / "chorus")
    kafka_version: str = "4.1.1"
    broker_start_timeout: float = 60.0
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None

    # Topics.
    topic_prefix: str = "chorus."
    partitions: int = 4
    replication_factor: int = 1
    driver_events_retention_ms: int = 7 * 24 * 3600 * 1000
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    # Segment size of every compacted topic and table changelog. Kafka compacts only rolled
    # segments, so with its 1 GiB default a changelog holds every write since the last roll
    # and a cold restore reads all of them; small segments keep it near one record per key.
    compacted_segment_bytes: int = COMPACTED_SEGMENT_BYTES
    # ... or after this long: tables of tiny records (fold positions, pending-batch headers)
    # would take hours to fill a segment, and every record of it is read on a restore.
    compacted_segment_ms: int = Field(default=COMPACTED_SEGMENT_MS, ge=1000)

    # Worker.
    app_id: str = "chorus"
    store: str = "rocksdb://"
    data_dir: Path = Path(".chorus/worker-data")
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    api_token: SecretStr | None = None
    # Retired (`RETIRED`): read only to refuse them.
    fold_url: str | None = None
    context_url: str | None = None
    fold_batch_max: int | None = None
    fold_batch_wait_ms: float | None = None
    projections: list[str] = Field(default_factory=list)
    standby_replicas: int = 1
    # How long a silent worker keeps its partitions before the group moves them.
    session_timeout_seconds: float = 30.0
    # This worker's static member id in its roles' consumer groups (`streams.kafka.groups`):
    # restarted with the same id, it takes its partitions back at once. Unset: derived from
    # the host name and the data directory.
    group_instance_id: str | None = None
    expiry_check_seconds: float = 1.0
    # How often the fold's state reaches its tables and changelogs (each changed key once,
    # then the source offsets are committed): Quix Streams' and Kafka Streams' default
    # commit interval. Shorter: more records per message; longer: more messages folded
    # again after a crash. Sooner when `checkpoint_max_keys` keys changed or
    # `checkpoint_max_held` messages wait for a checkpoint (the memory bound).
    checkpoint_ms: int = Field(default=5000, ge=10, le=60_000)
    checkpoint_max_keys: int = Field(default=20_000, ge=1)
    checkpoint_max_held: int = Field(default=50_000, ge=1)
    # Each role's stage on chorus.messages (the fold, the context role's feed) takes up to
    # this many records at a time, waiting at most batch_wait_ms for more; a fold batch's
    # driver events go out together. The wait is latency when messages come one at a time:
    # with 5 ms the batch step (the wait and scheduling) took 7 ms of a 19 ms median wake at
    # 100 msg/s, and 1 ms folded as fast over 100,000 channels
    # (bench/results/issue-40-investigations.md).
    batch_max: int = Field(default=500, ge=1)
    batch_wait_ms: float = Field(default=1.0, gt=0)
    # How much a fetch brings per partition: with Faust's 1 MiB (about 750 messages of 1.4 KB)
    # the fold waited for fetches 40% of the time (measured: 3,500 → 7,200 msg/s with 4 MiB).
    # A fetch request is capped at 50 MiB whatever the partitions (aiokafka's fetch_max_bytes).
    consumer_fetch_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024)
    # Bigger, slightly later produce requests: a driver event carries a whole state, so
    # Faust's 16 KB default batches held a few records each (+30% msg/s measured).
    producer_linger_ms: float = Field(default=2.0, ge=0)
    producer_batch_bytes: int = Field(default=256 * 1024, gt=0)
    # Bounds of every channel's state (docs/architecture.md, "Bounded state"). The commitment and
    # overview bounds are part of what the fold means: the worker and replay read the same.
    max_state_bytes: int = Field(default=MAX_STATE_BYTES, ge=1024)
    commitments_keep_terminal: int = Field(default=commitments.KEEP_TERMINAL, ge=0)
    commitments_max_active: int = Field(default=commitments.MAX_ACTIVE, ge=1)
    overview_max_participants: int = Field(default=overview.MAX_PARTICIPANTS, ge=1)
    overview_max_topics: int = Field(default=overview.MAX_TOPICS, ge=1)
    # What each role's RocksDB and caches hold at most (MiB): RocksDB's block cache and
    # memtables, the caches of table values, message bodies, configs and latest records
    # (docs/operators.md, "Memory"). The process itself (Python, Faust, its clients) comes
    # on top, so a role's memory does not grow with the number of channels it has seen.
    memory_mb: int = Field(default=384, ge=64)
    # Before starting, fold projections (or versions) that have no table yet from the log.
    rebuild_on_start: bool = True
    # Re-fold a sample of channels from the log and compare with live state; 0 = off.
    shadow_check_seconds: float = 0.0
    shadow_check_sample: int = 3

    # Summaries.
    summary_after_messages: int = 20
    summary_after_seconds: float = 300.0
    summary_max_pending: int = 200
    summary_small_threshold: int = 3
    summary_medium_threshold: int = 15
    # The summary's budget, tokens estimated at about four characters each.
    summary_max_tokens: int = Field(default=SUMMARY_MAX_TOKENS, ge=16)

    # Recaps.
    recap_debounce_seconds: float = 30.0
    recap_check_seconds: float = 1.0
    # The recap furnace's budget: LLM recaps a minute at most; recaps due past it are
    # written extractive (no model), newest activity first, and counted on /metrics.
    recap_llm_per_minute: int = Field(default=60, ge=0)

    # LLM (any OpenAI-compatible chat-completions endpoint). No base URL: heuristic tiers only.
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key: SecretStr | None = None
    llm_timeout_seconds: float = 30.0
    llm_max_tokens: int = 512
    llm_context_tokens: int = 8192
    llm_max_retries: int = 2
    llm_concurrency: int = 4
    secondary_llm_base_url: str | None = None
    secondary_llm_model: str | None = None

    # Agents taking part (`chorus mcp`, the worker's agent API; docs/agents.md). Over HTTP
    # an agent is named by its bearer token, from this file: a `NAME TOKEN` line per agent,
    # `#` comments. Unset: no agent can write over HTTP.
    agent_tokens_file: Path | None = None
    # Who `chorus mcp` is over stdio (`--as NAME` overrides it); unset: it only reads.
    agent: str | None = None
    # The longest a wait_for_reply blocks, whatever timeout it asks for.
    agent_max_wait_seconds: float = Field(default=300.0, gt=0)
    # Per check_messages / GET /channels/{channel}/messages: at most this many records of
    # the channel's partition read, and at most this many messages answered; `next` says
    # where the next call goes on.
    agent_scan_records: int = Field(default=5000, ge=1)
    agent_messages_limit: int = Field(default=200, ge=1)
    # Server-sent event streams (GET /channels/{channel}/events) a worker serves at once.
    agent_event_streams: int = Field(default=100, ge=1)

    @field_validator("ssl_cafile", "agent_tokens_file", mode="before")
    @classmethod
    def _empty_path_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("api_token", mode="before")
    @classmethod
    def _no_empty_token(cls, value: object) -> object:
        if value == "":
            # Not a ValueError: pydantic passes this one on as it is (one line).
            raise EmptyApiToken(
                "CHORUS_API_TOKEN is empty: unset it to serve without a token, or give one"
            )
        return value

    @model_validator(mode="after")
    def _no_retired_setting(self) -> Settings:
        for name, replaced_by in RETIRED.items():
            if getattr(self, name) is not None:
                # Not a ValueError: pydantic passes this one on as it is (one line).
                raise RetiredSetting(
                    f"CHORUS_{name.upper()} is no longer read and must be unset: {replaced_by}"
                )
        return self

    @model_validator(mode="after")
    def _segments_hold_the_largest_record(self) -> Settings:
        # The broker refuses a record batch larger than a segment.
        if self.compacted_segment_bytes < self.topic_max_message_bytes:
            raise ValueError(
                f"compacted_segment_bytes ({self.compacted_segment_bytes}) must be at least "
                f"{self.topic_max_message_bytes}, the topics' max.message.bytes "
                "(max_message_bytes + 64 KiB)"
            )
        return self

    @model_validator(mode="after")
    def _a_fetch_holds_the_largest_record(self) -> Settings:
        if self.consumer_fetch_bytes < self.topic_max_message_bytes:
            raise ValueError(
                f"consumer_fetch_bytes ({self.consumer_fetch_bytes}) must be at least "
                f"{self.topic_max_message_bytes}, the topics' max.message.bytes "
                "(max_message_bytes + 64 KiB)"
            )
        return self

    @property
    def topic_max_message_bytes(self) -> int:
        """Every chorus topic's max.message.bytes."""
        return self.max_message_bytes + RECORD_OVERHEAD_BYTES

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"

    @property
    def context_web_port(self) -> int:
        """Where the context role's web server listens (readiness, its LLM costs)."""
        return self.web_port + CONTEXT_WEB_PORT_OFFSET


def bearer_header(token: SecretStr | str | None) -> dict[str, str]:
    """The HTTP bearer-token header: the API token (`CHORUS_API_TOKEN`) to the workers'
    web servers, which expect exactly it, or an LLM provider's key; none without a token."""
    if not token:
        return {}
    secret = token.get_secret_value() if isinstance(token, SecretStr) else token
    return {"Authorization": f"Bearer {secret}"}


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
