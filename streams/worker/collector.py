"""Python's garbage collector kept off a role's long-lived state (both roles).

CPython's cyclic collector runs a full collection whenever the objects that survived two
younger collections grow by a quarter: with a role's caches full of decoded state (a
million tracked objects at 100,000 channels), that was a second-long pause every few
seconds, holding the event loop and starving Faust's consumer thread (measured: 84 full
collections, 75 s of a 130 s run, none of them finding any garbage).

What the caches hold is freed by reference counting when they let it go: it needs no
cyclic collector. So after each batch a stage takes from the log, and after each
checkpoint, what is alive is frozen (`gc.freeze`, which only moves the collector's lists:
it no longer visits those objects) and collections only visit what came since. Cyclic garbage
frozen in the meantime could only pile up; if the frozen objects ever grow past
`LEAK_FACTOR` times what they were after the last full collection (and `LEAK_FLOOR`), one
full collection runs (`chorus_gc_full_collections_total`) and the new count is the mark.
"""

from __future__ import annotations

import gc
import logging
import time

from streams.llm.metering import CostMeter

log = logging.getLogger(__name__)

LEAK_FACTOR = 2.0
LEAK_FLOOR = 1_000_000
# Counting the frozen objects walks them all: once in this many checkpoints (a minute).
COUNT_EVERY = 12


class Collector:
    """Freezes what lives after each checkpoint (see the module)."""

    def __init__(self, meter: CostMeter) -> None:
        self.meter = meter
        self.mark: int | None = None
        self.checkpoints = 0

    def after_batch(self) -> None:
        gc.freeze()

    def after_checkpoint(self) -> None:
        gc.freeze()
        self.checkpoints += 1
        if self.checkpoints % COUNT_EVERY != 1:
            return
        frozen = gc.get_freeze_count()
        self.meter.gc_frozen.set(frozen)
        if self.mark is None:
            self.mark = frozen
            return
        if frozen <= max(LEAK_FACTOR * self.mark, LEAK_FLOOR):
            return
        started = time.monotonic()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.mark = gc.get_freeze_count()
        self.meter.gc_full.inc()
        log.info(
            "a full garbage collection (%d objects frozen, %d before) took %.2f s",
            self.mark,
            frozen,
            time.monotonic() - started,
        )
