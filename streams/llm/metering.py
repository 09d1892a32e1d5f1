"""What the hidden furnaces cost: LLM calls, tokens and latency per model and purpose.

Exposed as Prometheus metrics (`GET /metrics`) and as JSON (`GET /costs`, `chorus costs`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from projections.summarise.llm import ChatClient, Completion, LlmError


@dataclass
class Usage:
    calls: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms_total: float = 0.0

    def as_json(self) -> dict[str, float | int]:
        return {
            "calls": self.calls,
            "failures": self.failures,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "mean_latency_ms": round(self.latency_ms_total / self.calls, 1) if self.calls else 0.0,
        }


@dataclass
class CostMeter:
    """Counters per (purpose, model); purpose is `summary` or `recap`."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    usage: dict[tuple[str, str], Usage] = field(default_factory=lambda: defaultdict(Usage))

    def __post_init__(self) -> None:
        labels = ["purpose", "model"]
        self.calls = Counter(
            "chorus_llm_calls", "LLM calls", [*labels, "outcome"], registry=self.registry
        )
        self.tokens = Counter(
            "chorus_llm_tokens", "LLM tokens", [*labels, "kind"], registry=self.registry
        )
        self.divergences = Counter(
            "chorus_shadow_divergences",
            "Channels whose live state differs from a re-fold of the log",
            ["projection", "kind"],
            registry=self.registry,
        )
        self.misplaced_records = Counter(
            "chorus_misplaced_records",
            "Records on another partition than Kafka's default partitioner gives their key",
            registry=self.registry,
        )
        self.stalls = Counter(
            "chorus_consumer_stalls",
            "Partitions whose consumer stopped delivering waiting records and was sought back",
            registry=self.registry,
        )
        self.refused_records = Counter(
            "chorus_refused_records",
            "Records the broker refused for good (too large for the topic); each is dead-lettered",
            ["topic"],
            registry=self.registry,
        )
        self.followed_records = Counter(
            "chorus_followed_records",
            "Records this process read of a topic it follows (summaries, recaps), by topic",
            ["topic"],
            registry=self.registry,
        )
        self.refused_writes = Counter(
            "chorus_refused_table_writes",
            "Table writes refused because the value would not fit a changelog record",
            ["table"],
            registry=self.registry,
        )
        self.state_bounds = Counter(
            "chorus_state_bound_hits",
            "Folds that met a state bound: untracked requests (active-commitment cap), "
            "evicted commitments and participants, states refused over the size limit",
            ["projection", "bound"],
            registry=self.registry,
        )
        self.requests = Counter(
            "chorus_http_requests",
            "Requests this process's web server answered, by view",
            ["view"],
            registry=self.registry,
        )
        self.timer_seconds = Histogram(
            "chorus_timer_seconds",
            "How long each tick of a timer took, start to end (the event loop serves others "
            "while it waits)",
            ["timer"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
        )
        self.timer_slowest = Gauge(
            "chorus_timer_slowest_seconds",
            "The slowest tick of each timer since the process started",
            ["timer"],
            registry=self.registry,
        )
        self.timer_held_slowest = Gauge(
            "chorus_timer_held_slowest_seconds",
            "The longest any tick of each timer held the event loop at once, since the "
            "process started",
            ["timer"],
            registry=self.registry,
        )
        self.timer_held_cpu_slowest = Gauge(
            "chorus_timer_held_cpu_slowest_seconds",
            "The most CPU any one step of a tick of each timer used, since the process started "
            "(a hold far above it waited for a core)",
            ["timer"],
            registry=self.registry,
        )
        self.checkpoint_seconds = Histogram(
            "chorus_checkpoint_seconds",
            "How long each checkpoint took, the broker's acknowledgement included (it gives "
            "the event loop back between slices of keys and while it waits)",
            registry=self.registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.python_heap_blocks = Gauge(
            "chorus_python_heap_blocks",
            "Blocks Python's small-object allocator has handed out, read at each checkpoint",
            registry=self.registry,
        )
        self.gc_full = Counter(
            "chorus_gc_full_collections",
            "Full garbage collections run because Python's heap doubled past its mark",
            registry=self.registry,
        )
        self.rocksdb_bytes = Gauge(
            "chorus_rocksdb_bytes",
            "What the role's RocksDB databases hold in memory: their shared block cache "
            "(memtables charged to it included) and its budget",
            ["of"],
            registry=self.registry,
        )
        self.cache_evictions = Counter(
            "chorus_cache_evictions",
            "Entries a cache forgot at its byte bound (read back from a store, the log or a "
            "compacted topic when asked again)",
            ["cache"],
            registry=self.registry,
        )
        self.cache_bytes = Gauge(
            "chorus_cache_bytes",
            "What each cache holds, in the bytes it counts, against its budget",
            ["cache", "of"],
            registry=self.registry,
        )
        self.recaps = Counter(
            "chorus_recaps",
            "Recaps written, by tier: synthesised (an LLM call) or extractive (no model, or "
            "the LLM budget spent)",
            ["tier"],
            registry=self.registry,
        )
        self.recaps_over_budget = Counter(
            "chorus_recaps_over_budget",
            "Recaps written extractive because CHORUS_RECAP_LLM_PER_MINUTE was spent",
            registry=self.registry,
        )
        self.recap_queue = Gauge(
            "chorus_recap_queue",
            "Recaps due and taken for writing, not yet written",
            registry=self.registry,
        )
        self.recaps_deferred = Counter(
            "chorus_recaps_deferred",
            "Times a tick found more recaps due than the queue had room for (they wait in "
            "the deadline index, newest activity first)",
            registry=self.registry,
        )
        self.latency = Histogram(
            "chorus_llm_latency_seconds",
            "LLM call latency",
            labels,
            registry=self.registry,
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
        )

    def record(self, purpose: str, completion: Completion) -> None:
        usage = self.usage[(purpose, completion.model)]
        usage.calls += 1
        usage.prompt_tokens += completion.prompt_tokens
        usage.completion_tokens += completion.completion_tokens
        usage.latency_ms_total += completion.latency_ms
        self.calls.labels(purpose, completion.model, "ok").inc()
        self.tokens.labels(purpose, completion.model, "prompt").inc(completion.prompt_tokens)
        self.tokens.labels(purpose, completion.model, "completion").inc(
            completion.completion_tokens
        )
        self.latency.labels(purpose, completion.model).observe(completion.latency_ms / 1000)

    def record_failure(self, purpose: str, model: str, latency_ms: float) -> None:
        usage = self.usage[(purpose, model)]
        usage.calls += 1
        usage.failures += 1
        usage.latency_ms_total += latency_ms
        self.calls.labels(purpose, model, "error").inc()
        self.latency.labels(purpose, model).observe(latency_ms / 1000)

    def as_json(self) -> list[dict[str, object]]:
        return [
            {"purpose": purpose, "model": model, **usage.as_json()}
            for (purpose, model), usage in sorted(self.usage.items())
        ]


class MeteredChatClient:
    """A ChatClient that books every call, success or failure, on a CostMeter."""

    def __init__(self, client: ChatClient, meter: CostMeter, purpose: str) -> None:
        self._client = client
        self._meter = meter
        self._purpose = purpose

    @property
    def model(self) -> str:
        return self._client.model

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        started = time.monotonic()
        try:
            completion = await self._client.complete(system, user, max_tokens)
        except LlmError:
            elapsed_ms = (time.monotonic() - started) * 1000
            self._meter.record_failure(self._purpose, self.model, elapsed_ms)
            raise
        self._meter.record(self._purpose, completion)
        return completion
