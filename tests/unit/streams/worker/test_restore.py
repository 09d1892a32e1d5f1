"""streams.worker.restore: which members of a group are other workers."""

from __future__ import annotations

from streams.worker.restore import other_members


def test_a_static_member_of_this_worker_s_instance_id_is_not_another_worker() -> None:
    members = ["host-abc-3f2c", "host-abd-77aa", "faust-0.11-91b0"]
    assert other_members(members, "host-abc") == ["host-abd-77aa", "faust-0.11-91b0"]
    assert other_members(["host-abc-3f2c"], "host-abc") == []
    assert other_members([], "host-abc") == []


def test_without_an_instance_id_every_member_is_another_worker() -> None:
    assert other_members(["host-abc-3f2c"], None) == ["host-abc-3f2c"]
