"""How a fold is stored in the worker's tables: one record per channel and projection, the
whole fold (`Folded.as_record()`), written once per checkpoint (`streams.worker.checkpoint`).

A record is one changelog record, so a crash in the middle of a checkpoint leaves each
projection's fold of a channel either as it was or as the checkpoint wrote it. Each fold
records the offset it applied, and the fold step applies a message only to a fold behind it
(`projections.projection.advance`): the messages delivered again after the crash catch up
the folds the checkpoint did not reach and leave the others as they are. `chorus replay
--rebuild` writes the same records.

Version 2 of the built-in projections split a fold over a second table (each commitment and
each bucket of participants a record), since the fold was written with every message;
written once per checkpoint, a channel's changed keys are its records. The stored form
changed, so the projections are at version 3, each folded into a table of its own from the
log when a worker starts (`CHORUS_REBUILD_ON_START`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from projections.projection import Folded


def stored_folded(record: Mapping[str, Any]) -> Folded:
    """The fold a table record holds."""
    return Folded.model_validate(record)
