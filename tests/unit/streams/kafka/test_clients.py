"""Starting Kafka clients: a cluster that does not answer is one clear error."""

from __future__ import annotations

import pytest

from streams.kafka.clients import BrokerUnreachable, admin, consumer, producer, started
from streams.ops.broker.cluster import free_port
from streams.settings import Settings


@pytest.mark.parametrize("make", [consumer, producer, admin])
async def test_a_client_that_cannot_reach_its_cluster_is_stopped_and_says_where(
    make: object,
) -> None:
    closed = f"127.0.0.1:{free_port()}"
    settings = Settings(bootstrap_servers=closed)
    client = make(settings)  # type: ignore[operator]
    with pytest.raises(BrokerUnreachable) as raised:
        await started(client, settings)
    message = str(raised.value)
    assert closed in message and "CHORUS_BOOTSTRAP_SERVERS" in message
    assert "\n" not in message
    # stopped again: nothing left open to be reported as the client is collected
    assert client._closed  # type: ignore[attr-defined]
