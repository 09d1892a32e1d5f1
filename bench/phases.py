"""The phases of `python -m bench.run`, each owning its part of the run, in run order.

A phase is a function of the run's shared context that writes its figures into
`results`; the registry says which phases need the broker and which run only when named in
``--only``. Heavy imports (streams, Faust, the measurements) stay inside the phases, so
`bench.run` can put BENCH_WORKER_SRC on sys.path before anything of streams is imported.
"""

from __future__ import annotations

import argparse
import asyncio
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from bench.common import Broker, Phase
    from bench.common import Worker as BenchWorker
    from streams.conversations import Conversation
    from streams.settings import Settings

# Driver events v2: one per message, every projection's state in it.
EVENTS_PER_MESSAGE = 1


@dataclass
class BenchRun:
    """What every phase shares: the arguments, the results so far, the temp dir."""

    args: argparse.Namespace
    results: dict[str, Any]
    work: Path
    errors: dict[str, str] = field(init=False)  # results["errors"]: empty when all went well

    def __post_init__(self) -> None:
        self.errors = self.results.setdefault("errors", {})

    def failed(self, phase: str, error: BaseException) -> None:
        from bench.common import log

        self.errors[phase] = f"{type(error).__name__}: {error}"
        log(f"{phase} failed: {error}")
        traceback.print_exc()


@dataclass
class BrokerRun:
    """What the broker phases share: the broker and the N messages produced once for all."""

    bench: BenchRun
    broker: Broker
    conversations: list[Conversation]
    phase: Phase  # the throughput phase's topics, which hold the N messages
    settings: Settings  # the throughput phase's
    count: int
    worker: BenchWorker | None = None  # the fold phase's worker, stopped, for recovery
    fold_results: dict[str, Any] = field(default_factory=dict)

    @property
    def args(self) -> argparse.Namespace:
        return self.bench.args

    @property
    def results(self) -> dict[str, Any]:
        return self.bench.results


Context = TypeVar("Context", BenchRun, BrokerRun)


@dataclass(frozen=True)
class BenchPhase(Generic[Context]):
    name: str
    run: Callable[[Context], Awaitable[None]]
    opt_in: bool = False  # runs only when named in --only


# --------------------------------------------------------------------------------------------
# Phases without a broker


async def _summarisers(run: BenchRun) -> None:
    from bench import summarisers
    from bench.common import log

    log("7. summarisers in process")
    run.results["summarisers"] = await summarisers.measure(run.args.summariser_seconds)


async def _quality(run: BenchRun) -> None:
    from bench import summary_quality
    from bench.common import log

    log("9. summary quality (QMSum val)")
    quality = await asyncio.to_thread(summary_quality.measure, "val")
    if quality is None:
        log("  skipped: ../shared/data/qmsum is absent")
    else:
        run.results["summary_quality"] = {k: v for k, v in quality.items() if k != "rows"}


async def _llm(run: BenchRun) -> None:
    from bench import llm_quality
    from bench.common import log

    log("11. summary quality with a real model (opt-in; about 20 s an LLM call)")
    with_model = await asyncio.to_thread(
        llm_quality.measure,
        "val",
        run.args.llm_meetings,
        out=run.args.out,
        command=run.results["meta"]["command"],
    )
    if with_model is None:
        log("  skipped: ../shared/data/qmsum is absent")
        return
    run.results["llm_quality"] = with_model["total"]
    if with_model["total"]["degenerate"]:
        raise AssertionError(
            "a degenerate answer became the summary: "
            + "; ".join(with_model["total"]["degenerate"])
        )


# --------------------------------------------------------------------------------------------
# Phases on the broker


async def _limits(run: BrokerRun) -> None:
    from bench import limits
    from bench.common import log

    log("1. the limit")
    run.results["limits"] = await limits.measure_limits(
        run.broker.lib,
        run.broker.bootstrap,
        run.phase.topic("messages"),
        run.count,
        run.args.repeats,
    )


async def _fold(run: BrokerRun) -> None:
    from bench import fold, pipeline
    from bench.common import log

    log("2. chorus worker fold, and the whole pipeline to its last summary")
    try:
        ends = await pipeline.read_channel_ends(run.broker.bootstrap, run.phase.topic("messages"))
        worker, run.worker = await fold.run_chorus(
            run.phase, run.count, EVENTS_PER_MESSAGE, run.args.timeout, pipeline_ends=ends
        )
        if "pipeline" in worker:
            run.fold_results["chorus_pipeline"] = worker.pop("pipeline")
        run.fold_results["chorus_worker"] = worker
        log(f"  chorus worker: {run.fold_results['chorus_worker']['msgs_per_s']:,.0f} msg/s")
    except Exception as error:
        run.bench.failed("fold", error)
    log("2. chorus fold stage alone")
    try:
        run.fold_results["chorus_fold_stage"], _ = await fold.run_chorus(
            run.phase, run.count, EVENTS_PER_MESSAGE, run.args.timeout, fold_only=True
        )
        log(f"  fold stage: {run.fold_results['chorus_fold_stage']['msgs_per_s']:,.0f} msg/s")
    except Exception as error:
        run.bench.failed("fold_stage", error)


async def _floor(run: BrokerRun) -> None:
    """What Faust alone costs per message, configured like chorus (bench/faust_floor.py)."""
    from bench import fold
    from bench.common import log

    floor_results = run.results.setdefault("faust_floor", {})
    for mode in ("read", "send", "table"):
        log(f"2. Faust floor: {mode}")
        try:
            floor_results[mode] = await fold.run_floor(run.phase, run.count, mode, run.args.timeout)
            log(f"  faust {mode}: {floor_results[mode]['msgs_per_s']:,.0f} msg/s")
        except Exception as error:
            run.bench.failed(f"floor-{mode}", error)


async def _quix(run: BrokerRun) -> None:
    from bench import fold
    from bench.common import log

    log("3. Quix Streams peer")
    try:
        run.fold_results["quix"] = await fold.run_quix(
            run.phase, run.count, EVENTS_PER_MESSAGE, run.args.timeout
        )
        log(f"  quix: {run.fold_results['quix']['msgs_per_s']:,.0f} msg/s")
    except Exception as error:
        run.fold_results["quix_error"] = str(error)
        raise


async def _replay(run: BrokerRun) -> None:
    from bench import replay_phase
    from bench.common import log

    log("5. replay vs raw read")
    replay_settings = run.settings.model_copy(update={"bootstrap_servers": run.broker.bootstrap})
    run.results["replay"] = await replay_phase.measure(replay_settings, run.count)
    log(f"  replay: {run.results['replay']}")


async def _recovery(run: BrokerRun) -> None:
    from bench import recovery
    from bench.common import log

    if run.worker is None:  # the fold phase did not run, or its worker failed
        return
    log("6. recovery")
    data_dir = Path(run.phase.env()["CHORUS_DATA_DIR"])
    log_dirs = [run.broker.run_dir] if run.broker.run_dir else []
    run.results["recovery"] = await recovery.measure(
        run.phase, data_dir, run.count, run.args.timeout, log_dirs
    )


async def _cold(run: BrokerRun) -> None:
    from bench import recovery
    from bench.common import log

    args = run.args
    log(f"6. cold restore at scale: {args.cold_messages} messages")
    run.results["cold_restore"] = await recovery.measure_cold_at_scale(
        run.broker,
        run.bench.work,
        args.cold_messages,
        args.cold_channels,
        args.timeout,
        args.partitions,
        args.cold_build,
    )


async def _latency(run: BrokerRun) -> None:
    from bench import latency
    from bench.common import Phase, log

    args = run.args
    fold_rate = (run.fold_results.get("chorus_worker") or {}).get("msgs_per_s")
    rates = [args.rate]
    if fold_rate and fold_rate < args.rate:
        # Also at a rate the worker sustains, so the percentiles mean something.
        rates.append(max(10.0, round(fold_rate * 0.5, -1)))
    runs = run.results.setdefault("latency", [])
    for rate in rates:
        for llm_delay in (None, 2.0):
            log(f"4. latency at {rate:,.0f} msg/s, LLM delay {llm_delay}")
            try:
                lat_phase = Phase("lat", run.broker, run.bench.work, partitions=args.partitions)
                runs.append(
                    await latency.measure(
                        lat_phase,
                        run.conversations,
                        rate,
                        args.latency_seconds,
                        min(args.channels, 100),
                        args.drain,
                        EVENTS_PER_MESSAGE,
                        llm_delay,
                    )
                )
            except Exception as error:
                run.bench.failed(f"latency-{rate:.0f}-{llm_delay}", error)


async def _memory(run: BrokerRun) -> None:
    from bench import memory
    from bench.common import Phase, log

    args = run.args
    log(f"8. memory over {args.memory_channels:,} channels")
    mem_phase = Phase("mem", run.broker, run.bench.work, partitions=args.partitions)
    run.results["memory"] = await memory.measure(
        mem_phase,
        run.conversations,
        args.memory_channels,
        EVENTS_PER_MESSAGE,
        round_timeout=90.0 if args.quick else 180.0,
    )


async def _growth(run: BrokerRun) -> None:
    from bench import growth
    from bench.common import log

    log("9. bounded state: one growing channel")
    lengths = growth.QUICK_LENGTHS if run.args.quick else growth.LENGTHS
    run.results["growth"] = await growth.measure(
        run.broker,
        run.bench.work,
        lengths,
        lengths,
        timeout=120.0 if run.args.quick else 900.0,
    )


IN_PROCESS: tuple[BenchPhase[BenchRun], ...] = (
    BenchPhase("summarisers", _summarisers),
    BenchPhase("quality", _quality),
    # needs requirements-llm.txt and takes an hour
    BenchPhase("llm", _llm, opt_in=True),
)
ON_BROKER: tuple[BenchPhase[BrokerRun], ...] = (
    BenchPhase("limits", _limits),
    BenchPhase("fold", _fold),
    BenchPhase("floor", _floor),
    BenchPhase("quix", _quix),
    BenchPhase("replay", _replay),
    BenchPhase("recovery", _recovery),
    # takes longer than the whole default run
    BenchPhase("cold", _cold, opt_in=True),
    BenchPhase("latency", _latency),
    BenchPhase("memory", _memory),
    BenchPhase("growth", _growth),
)
PHASES = (*(p.name for p in IN_PROCESS), *(p.name for p in ON_BROKER))


def wanted(args: argparse.Namespace, phase: BenchPhase[Any]) -> bool:
    if args.only:
        return phase.name in args.only and phase.name not in args.skip
    return not phase.opt_in and phase.name not in args.skip


async def run_phase(phase: BenchPhase[Context], context: Context, bench: BenchRun) -> None:
    """Run one phase; its failure is recorded under its name and the run goes on."""
    try:
        await phase.run(context)
    except Exception as error:
        bench.failed(phase.name, error)
