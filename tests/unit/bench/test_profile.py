"""bench.profile: a py-spy profile of `chorus worker` read per role."""

from __future__ import annotations

from pathlib import Path

from bench.profile import by_role, summarise

SUPERVISOR = 'process 1:"python -m streams.interfaces.cli worker"'
FOLD = 'process 2:"python -m streams.interfaces.cli worker --role fold"'
CONTEXT = 'process 3:"python -m streams.interfaces.cli worker --role context"'


def test_samples_are_shared_out_by_role_and_read_within_it(tmp_path: Path) -> None:
    collapsed = tmp_path / "profile.txt"
    collapsed.write_text(
        "\n".join(
            [
                f"{SUPERVISOR};{FOLD};run_worker (streams/worker/run.py:1);"
                "Folder.fold (streams/worker/stages/fold.py:9) 30",
                f"{SUPERVISOR};{FOLD};run_worker (streams/worker/run.py:1);"
                "Store._set (faust/stores/rocksdb.py:3) 10",
                f"{SUPERVISOR};{CONTEXT};run_worker (streams/worker/run.py:1);"
                "DigestSummariser.digest (projections/summarise/digest.py:5) 60",
                f"{SUPERVISOR};Supervisor.run (streams/worker/supervise.py:2) 5",
            ]
        )
    )
    lines = by_role(collapsed)
    assert "| context | 57.1% |" in lines and "| fold | 38.1% |" in lines
    fold = lines[lines.index("| fold role: function (inclusive) | share of the role |") :]
    assert "| `Folder.fold (streams/worker/stages/fold.py)` | 75.0% |" in fold
    assert "| `Store._set (faust/stores/rocksdb.py)` | 25.0% |" in fold
    assert not any("run_worker" in line for line in lines)
    assert "| fold | 38.1% |" in summarise(collapsed)


def test_a_profile_of_one_process_has_no_role_table(tmp_path: Path) -> None:
    collapsed = tmp_path / "profile.txt"
    collapsed.write_text("run (bench/fold_worker.py:1);Folder.fold (streams/x.py:2) 10\n")
    assert by_role(collapsed) == []
