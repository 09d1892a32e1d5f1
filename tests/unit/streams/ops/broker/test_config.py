"""streams.ops.broker.config: what each node's server.properties says."""

from __future__ import annotations

from pathlib import Path

from streams.ops.broker.config import server_properties


def test_multi_node_properties() -> None:
    props = server_properties(
        node_id=2,
        port=19092,
        controller_port=19093,
        voters="1@127.0.0.1:1,2@127.0.0.1:19093,3@127.0.0.1:3",
        data_dir=Path("/x/node-2/data"),
        nodes=3,
    )
    lines = set(props.splitlines())
    for expected in [
        "node.id=2",
        "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
        "advertised.listeners=PLAINTEXT://127.0.0.1:19092",
        "controller.quorum.voters=1@127.0.0.1:1,2@127.0.0.1:19093,3@127.0.0.1:3",
        "default.replication.factor=3",
        "min.insync.replicas=2",
        "offsets.topic.replication.factor=3",
        "transaction.state.log.min.isr=2",
        "share.coordinator.state.topic.min.isr=2",
        "unclean.leader.election.enable=false",
        "broker.session.timeout.ms=4000",
        "auto.create.topics.enable=false",
    ]:
        assert expected in lines


def test_single_node_properties_need_no_quorum_of_replicas() -> None:
    props = server_properties(
        node_id=1,
        port=9092,
        controller_port=9093,
        voters="1@127.0.0.1:9093",
        data_dir=Path("/x/node-1/data"),
        nodes=1,
    )
    lines = set(props.splitlines())
    assert {"default.replication.factor=1", "min.insync.replicas=1"} <= lines
    assert not any(line.startswith("unclean.leader.election") for line in lines)
