"""streams.ops.broker.files: log tails, reading from an offset, the packaged assets."""

from __future__ import annotations

from pathlib import Path

from streams.ops.broker.files import asset_text, file_lock, file_size, read_from, tail


def test_tail_keeps_the_last_lines() -> None:
    assert tail("a\nb\nc\n\n", lines=2) == "b\nc"


def test_read_from_an_offset_and_after_a_roll_over(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    assert read_from(log) == "" and file_size(log) == 0
    log.write_text("old line\nnew line\n")
    assert read_from(log, len("old line\n")) == "new line\n"
    log.write_text("rolled\n")  # smaller than the offset: read it all
    assert read_from(log, 100) == "rolled\n"


def test_the_lock_file_and_its_folder_are_created(tmp_path: Path) -> None:
    lock = tmp_path / "run" / ".cluster.lock"
    with file_lock(lock):
        assert lock.is_file()


def test_assets_are_packaged() -> None:
    assert "<artifactId>kafka_2.13</artifactId>" in asset_text("pom.xml")
