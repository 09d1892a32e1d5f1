"""bench.profile: a py-spy profile read per process (role) and function."""

from __future__ import annotations

from bench.profile import process_name, summarise

SUPERVISOR = 'process 1:"python -m streams.interfaces.cli worker --loglevel warning"'
FOLD = 'process 2:"python -m streams.interfaces.cli worker --role fold"'
CONTEXT = 'process 3:"python -m streams.interfaces.cli worker --role context"'
ENTRY = "run_worker (streams/worker/run.py:1);worker (streams/interfaces/cli/main.py:4)"


def test_process_frames_are_named_by_role_or_module() -> None:
    assert process_name(FOLD) == "fold"
    assert process_name(SUPERVISOR) == "streams.interfaces.cli"
    assert process_name('process 9:"python -m bench.fold_worker"') == "bench.fold_worker"
    assert process_name("Folder.fold (streams/worker/stages/fold.py:9)") is None


def test_samples_are_shared_out_by_process_and_read_within_it() -> None:
    text = summarise(
        "\n".join(
            [
                f"{SUPERVISOR};{FOLD};{ENTRY};Folder.fold (streams/worker/stages/fold.py:9) 30",
                f"{SUPERVISOR};{FOLD};{ENTRY};Store._set (faust/stores/rocksdb.py:3) 10",
                f"{SUPERVISOR};{CONTEXT};{ENTRY};Digest.read (projections/digest.py:5) 60",
                f"{SUPERVISOR};Supervisor.run (streams/worker/supervise.py:2) 5",
            ]
        )
    )
    assert "| context | 57.1% |" in text and "| fold | 38.1% |" in text
    fold = text[text.index("| fold: function (inclusive)") :]
    assert "| `Folder.fold (streams/worker/stages/fold.py)` | 75.0% |" in fold
    assert "| `Store._set (faust/stores/rocksdb.py)` | 25.0% |" in fold
    assert "run_worker" not in text and "cli/main.py" not in text


def test_a_profile_of_one_process_without_process_frames() -> None:
    text = summarise("run (bench/fold_worker.py:1);Folder.fold (streams/x.py:2) 10\n")
    assert "| worker | 100.0% |" in text
