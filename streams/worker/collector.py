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
frozen in the meantime could only pile up, so at each checkpoint the collector reads how
many blocks Python's small-object allocator has handed out (`sys.getallocatedblocks`,
`chorus_python_heap_blocks`): a walk of its pools, about 2 ms with 24 million blocks,
where counting the frozen objects (`gc.get_freeze_count`) walks every one of them, and held
the fold role's event loop 135 ms at a checkpoint with 100,000 channels. If the blocks ever
grow past `LEAK_FACTOR` times what they were after the last full collection, and past what
the role's memory budget holds (`BLOCKS_PER_MIB` per MiB of CHORUS_MEMORY_MB), one full
collection runs (`chorus_gc_full_collections_total`) and the new count is the mark. The
floor is what keeps a heap that is only filling its caches from being collected: at
1,000,000 channels and the default budget (384 MiB) the fold role held 3.9-4.3 million
blocks and the context role 3.3 million, and a full collection there found nothing.

The blocks count only Python's small objects: a cycle that holds a large buffer is barely
seen. The one such cycle found is aiokafka's fetched records dropped unread (up to a MiB
each, bug 25). chorus's own consumers free those before they drop them
(`streams.kafka.clients.drop_fetched_ahead`); Faust's consumer, in its own thread, drops
every partition's at a rebalance, so after partitions move the next checkpoint runs one full
collection (`after_moved`): a second or so at 1,000,000 channels, once per rebalance.

That check and `after_moved` are the only full collections a role runs (`start`):
CPython's own, every tenth young collection or so, walk only what came since the last
freeze, and what came then is a checkpoint's encoded keys while it waits for the broker
(measured at 100,000 channels: the context role ran one every 3-4 s, 11-40 ms of CPU each
over some 50,000 objects, 18,000 of them a checkpoint's pending writes, none finding
garbage), landing in whatever step of a timer or a batch was running. What a young
collection promotes past them is frozen at the next batch or checkpoint, where the leak
check answers for it as for the rest.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections.abc import Callable

from streams.llm.metering import CostMeter

log = logging.getLogger(__name__)

LEAK_FACTOR = 2.0
# The floor of the leak check per MiB of the role's memory budget: 6.1 million blocks at
# the default 384 MiB, above the 4.3 million measured.
BLOCKS_PER_MIB = 16_000
# CPython's threshold for a full collection: how many collections of the middle generation
# first (10 by default). High enough that it is never met: the leak check collects instead.
NO_AUTOMATIC_FULL_COLLECTION = 2**30


class Collector:
    """Freezes what lives after each checkpoint (see the module). `floor`: the blocks below
    which no full collection runs (`BLOCKS_PER_MIB` times the role's memory budget);
    `blocks` reads the allocator's block count (`sys.getallocatedblocks` in production)."""

    def __init__(
        self, meter: CostMeter, floor: int, blocks: Callable[[], int] = sys.getallocatedblocks
    ) -> None:
        self.meter = meter
        self.floor = floor
        self.blocks = blocks
        self.mark: int | None = None
        self.moved = False

    def start(self) -> None:
        """The role's process is built: freeze what its start made (modules, the app) and
        leave full collections to the leak check (see the module)."""
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, NO_AUTOMATIC_FULL_COLLECTION)
        gc.freeze()

    def after_batch(self) -> None:
        gc.freeze()

    def after_moved(self) -> None:
        """Partitions moved: the next checkpoint collects what the consumer dropped of them
        (see the module)."""
        self.moved = True

    def after_checkpoint(self) -> None:
        gc.freeze()
        blocks = self.blocks()
        self.meter.python_heap_blocks.set(blocks)
        if self.mark is None:
            self.mark = blocks
            return
        if not self.moved and blocks <= max(LEAK_FACTOR * self.mark, self.floor):
            return
        self.moved = False
        started = time.monotonic()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.mark = self.blocks()
        self.meter.gc_full.inc()
        log.info(
            "a full garbage collection (%d blocks in Python's heap, %d before) took %.2f s",
            self.mark,
            blocks,
            time.monotonic() - started,
        )
