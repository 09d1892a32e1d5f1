"""streams.kafka.groups: a worker's static member id."""

from __future__ import annotations

from pathlib import Path

from streams.kafka.groups import group_instance_id
from streams.settings import Settings


def test_the_instance_id_is_stable_per_data_dir_and_can_be_set(tmp_path: Path) -> None:
    one = Settings(data_dir=tmp_path / "a")
    assert group_instance_id(one) == group_instance_id(Settings(data_dir=tmp_path / "a"))
    assert group_instance_id(one) != group_instance_id(Settings(data_dir=tmp_path / "b"))
    assert group_instance_id(Settings(group_instance_id="worker-7")) == "worker-7"
