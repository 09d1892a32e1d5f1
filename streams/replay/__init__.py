"""Replay: fold `chorus.messages` again from the log, with the worker's own projection code.

The log is the truth, so folding it again must give the live state. This package reads the
topic from the beginning with its own consumer (no group, manual assignment, no offsets
committed), folds each channel through the registered projections, and then

- prints states (`--channel`, `--to-offset`, `--as-of`), and recomputed summaries (`--summaries`);
- checks the worker's live tables against the log (`--verify`, and `shadow_check` in the worker);
- builds a new projection version's table before workers switch to it (`--rebuild`), and
  removes old versions' changelogs when asked (`--drop-old`);
- measures itself against a raw aiokafka read of the same topic (`--benchmark`).

Modules: `core` (the hot loop, `Replayer`: pure), `compare` (live against replayed folds:
pure), `log` (reading spans of the log), `run` (`replay`), `parallel` (partitions in worker
processes), `checks` (`verify`, the shadow check), `tables` (rebuilds), `speed` (the
benchmark). The package exports the few names below; the command line (`chorus replay`)
is in `streams.interfaces.cli.replay`, so nothing here loads the CLI.

Positions in the log
--------------------
`--to-offset N`: in every partition, the records at offsets < N, i.e. the first N records of
each partition (Kafka's end-offset convention). A channel lives in one partition, so its
state "as of offset N" is the fold of its messages among the first N records of that
partition, and its fold's `offset` is the last of those it folded.

`--as-of T`: per channel, its messages in log order up to, not including, the first one
later than T (by `created_at`, or by the Kafka record timestamp with `--time-field record`).
A prefix, never a filtered subsequence, so the result is a state the live table really held.

The hot loop and its equivalence to the worker
----------------------------------------------
The worker folds a record with `projections.channel.step` → `fold_at`, which loads the
stored state, applies, and dumps it per message. `Replayer` keeps each state as an object and
dumps it once at the end. Per projection and channel it keeps (state, offset) and, for a
record at `offset` with decoded `message`, does exactly what `fold_at` does:

- skip when `offset <= folded offset` (never true when reading forwards, kept for seeded runs);
- `new = apply(state, message)`; an exception keeps the old state *and* offset (as `step`);
- otherwise the offset becomes `offset`, and the state `new`.

Between two messages the worker's state goes through `dump_state` → table (JSON) →
`load_state`. For non-pydantic states the loop applies the same JSON normalisation
(`to_jsonable_python`, what `Folded.model_dump(mode="json")` does) after every applied
message, so user projections over dicts see exactly what they see in the worker. For pydantic
states it relies on the round-trip law `load_state(p, dump_state(s)) == s`, which holds for the
built-in projections (a unit property test checks it against `fold_at`). `--exact` runs the
worker's own `step` per message instead, for projections whose states do not round-trip.

Records are decoded and validated by `streams.records.validate_record`, the worker's own
gate, so exactly the records the worker dead-letters are skipped here: invalid ones, and
ones that are not on their key's partition (murmur2 of the topic's partition count).

Parallel replay (`--workers N`, `replay(..., workers=N)`; 0: one per CPU)
------------------------------------------------------------------------
A channel lives in one partition, so partitions fold independently: N forked processes each
read a share of the partitions (about equal record counts) with their own consumer and fold
them into a `Replayer` of their own; the parent merges the channels. The result is the same
as in one process (an integration test compares them). Where `fork` is not available, one
process is used.

Verify
------
First the worker group's committed offsets, then the live folds over HTTP, then the log:
each channel's projection is folded up to exactly its live fold's offset. A projection with
no live fold is folded as far as the worker is known to have gone for the channel (its other
folds, and the committed offset), so a fold the worker lost shows up; so does a channel it
does not know although the log has folded messages for it before the committed offset.
States are compared by `canonical_hash`; differences get a unified diff of sorted JSON.

Blue-green rebuilds
-------------------
Tables are versioned (`fold-<name>-v<version>`, changelog `<app_id>-fold-<name>-v<version>-
changelog`), so a new version never touches the old one's data.

1. With the new code installed where the CLI runs, `chorus replay --rebuild` folds the log
   up to its end offsets into the new version's changelog (key: the channel as a JSON
   string, value: the `Folded` JSON, in the record's own partition, as Faust writes it),
   and records a marker (`through`: source offsets folded; `changelog_end`) on the compacted
   `<prefix>rebuilds` topic. Old-version workers keep folding and serving meanwhile.
2. Switch: stop the old workers, run `chorus replay --rebuild` again (incremental: it folds
   only what arrived since, from the folds it wrote), start workers with the new code. They
   recover the new table from its changelog and resume at the group's committed offsets; the
   records already folded are skipped by the fold's offset guard. Readers switch with the
   workers: a worker serves the versions it folds, and the new table is current from its
   first read. `catch_up_rebuilds` does step 2's middle command automatically when a worker
   starts (wired in `streams.worker.run`), and also builds a projection (or version) deployed
   into a running system without a rebuild, which would otherwise start mid-log from its
   identity.
3. `chorus replay --drop-old` deletes older versions' changelogs, only once the worker serves
   the new version.

A table is never written while a worker writes it: a table whose marker says a worker serves
it (`mark_served`, as the fold role starts), a changelog that moved past the marker, or has
data without a marker, belongs to a worker and is left alone.

Limits: reads pause during the restart of step 2 (a worker folds one version of a projection;
serving two versions at once needs the registry to load both). In a rolling upgrade, old
workers still folding after the catch-up leave a gap in the new table; stop them first (or
run `--verify` afterwards: it shows any gap as a difference). Summaries are recomputed with
the non-LLM tiers over batches of `summary_after_messages`, so they match the live ones only
where the count threshold (not the time threshold or an LLM) made the batches.
"""

from streams.replay.checks import VerifyReport, shadow_check, verify
from streams.replay.compare import Difference, render_diff
from streams.replay.core import Rec, Replayer
from streams.replay.log import ReplayError
from streams.replay.run import ReplayRun, replay
from streams.replay.speed import measure_replay_vs_raw
from streams.replay.tables import catch_up_rebuilds, mark_served, rebuild

__all__ = [
    "Difference",
    "Rec",
    "ReplayError",
    "ReplayRun",
    "Replayer",
    "VerifyReport",
    "catch_up_rebuilds",
    "mark_served",
    "measure_replay_vs_raw",
    "rebuild",
    "render_diff",
    "replay",
    "shadow_check",
    "verify",
]
