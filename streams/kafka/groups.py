"""Static membership of a worker in its consumer groups (KIP-345).

A worker that crashes and is started again with the same `group.instance.id` takes its
partitions back at once: the coordinator swaps the new member in for the old one without a
rebalance. A dynamic member's partitions stay with the dead member until its session times
out (CHORUS_SESSION_TIMEOUT_SECONDS, 30 s). The price: a static member does not leave the
group when it stops (aiokafka sends no LeaveGroup for one), so a worker that stops for good
would hold its partitions for a session too. `leave_group` asks the coordinator to remove
it by its instance id (LeaveGroup v3, what Kafka's admin client sends), so a stopped worker
hands its partitions over at once, as a dynamic one does.
"""

from __future__ import annotations

import hashlib
import logging
import socket
from typing import ClassVar

from aiokafka.client import CoordinationType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from streams.kafka.clients import admin, started
from streams.settings import Settings

log = logging.getLogger(__name__)

# Kafka's error codes a leave may answer that mean there was nothing to leave.
_NOTHING_TO_LEAVE = {0, 25, 16}  # none, UNKNOWN_MEMBER_ID, NOT_COORDINATOR (moved on)


def group_instance_id(settings: Settings) -> str:
    """This worker's static member id in each of its groups: CHORUS_GROUP_INSTANCE_ID, else
    its host and data directory, stable across restarts and different for two workers of a
    host (they cannot share a data directory)."""
    if settings.group_instance_id:
        return settings.group_instance_id
    where = str(settings.data_dir.resolve())
    return f"{socket.gethostname()}-{hashlib.sha1(where.encode()).hexdigest()[:12]}"


class _LeaveGroupResponseV3(Response):
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class _LeaveGroupRequestV3(RequestStruct):
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = _LeaveGroupResponseV3
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class _LeaveByInstance(Request[_LeaveGroupRequestV3]):
    API_KEY: ClassVar[int] = 13

    def __init__(self, group: str, instance_id: str) -> None:
        self.group = group
        self.instance_id = instance_id

    def build(self, request_struct_class: type[_LeaveGroupRequestV3]) -> _LeaveGroupRequestV3:
        # No member id: the coordinator finds the member by its instance id.
        return request_struct_class(self.group, [("", self.instance_id)])


async def leave_group(settings: Settings, group: str, instance_id: str) -> bool:
    """Remove the static member `instance_id` from `group` (after its consumer stopped);
    True when it was removed or was not a member. Best effort: a failure is logged and the
    member's partitions move when its session times out."""
    client = await started(admin(settings), settings)
    try:
        network = client._client
        node = await network.coordinator_lookup(CoordinationType.GROUP, group)
        response = await network.send(node, _LeaveByInstance(group, instance_id))
    except Exception as error:
        log.warning("could not leave group %s as %s: %r", group, instance_id, error)
        return False
    finally:
        await client.close()
    codes = [response.error_code, *(member[2] for member in response.members)]
    if any(code not in _NOTHING_TO_LEAVE for code in codes):
        log.warning("leaving group %s as %s answered error codes %s", group, instance_id, codes)
        return False
    return True
