"""Kafka's share-state APIs (Initialize, Read, Write, Delete and ReadSummary ShareGroupState, keys
83-87) between a broker and the shard that hosts a share coordinator: one SHARE_STATE frame of the
data path (actors/partition/wire.py) per coordinator partition a request names.

The share coordinator has no listener of its own. Its share-state APIs reach it the way every
other data-path request reaches a partition leader:

- from a share-partition leader on another broker: Kafka's request over TCP to the coordinator
  broker's inter-broker listener (the broker's own port, 9092 on real hosts), where the gateway
  checks CLUSTER_ACTION on the Cluster (actors/gateway/handlers/share_state.py) and forwards the
  partitions as SHARE_STATE frames over its Unix socket to the coordinator's shard;
- from a share-partition leader on the coordinator's own broker: SHARE_STATE frames straight to
  the coordinator's shard over its Unix socket (actors/share_partition/state_client.py), as the
  gateway would send them, one hop less.

Both ends of the frame are here, so the format lives in one place: `items` turns a Kafka request
into a frame's items (one per partition: [topic id, partition, fields...]), `apply` runs them on
the coordinator in order (each operation's records are appended before it answers) and
`response` builds Kafka's response from the results ([error, message, fields...] per item).
Frames of one connection are applied in the order sent: the shard starts their handlers in
order, and a loaded coordinator applies an operation before it first waits (the append), so one
leader's writes never overtake each other.
"""
from __future__ import annotations

import logging
import uuid
from typing import Any

from actors.coordinator_log import CoordinatorLogError
from protocol.errors import ErrorCode, MalformedMessage
from protocol.messages import (DeleteShareGroupStateRequest, DeleteShareGroupStateResponse,
                               InitializeShareGroupStateRequest, InitializeShareGroupStateResponse,
                               ReadShareGroupStateRequest, ReadShareGroupStateResponse,
                               ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse,
                               WriteShareGroupStateRequest, WriteShareGroupStateResponse)

log = logging.getLogger("kray.share_coordinator")
INITIALIZE, READ, WRITE, DELETE, READ_SUMMARY = 83, 84, 85, 86, 87
API_KEYS = (INITIALIZE, READ, WRITE, DELETE, READ_SUMMARY)
REQUESTS = {INITIALIZE: InitializeShareGroupStateRequest, READ: ReadShareGroupStateRequest,
            WRITE: WriteShareGroupStateRequest, DELETE: DeleteShareGroupStateRequest,
            READ_SUMMARY: ReadShareGroupStateSummaryRequest}
RESPONSES = {INITIALIZE: InitializeShareGroupStateResponse, READ: ReadShareGroupStateResponse,
             WRITE: WriteShareGroupStateResponse, DELETE: DeleteShareGroupStateResponse,
             READ_SUMMARY: ReadShareGroupStateSummaryResponse}
_TOPIC_RESULT = {INITIALIZE: "InitializeStateResult", READ: "ReadStateResult", WRITE: "WriteStateResult",
                 DELETE: "DeleteStateResult", READ_SUMMARY: "ReadStateSummaryResult"}
ITEMS_PER_FRAME_MAX = 100_000  # a frame is within socket.request.max.bytes anyway; this bounds the loop
BATCHES_PER_ITEM_MAX = 100_000


# ---- Kafka request -> items (the sender's side) ------------------------------------------------------------------

def _item(api_key: int, p) -> list:
    if api_key == WRITE:
        return [p.state_epoch, p.leader_epoch, p.start_offset,
                [[b.first_offset, b.last_offset, b.delivery_state, b.delivery_count] for b in p.state_batches],
                p.delivery_complete_count]
    if api_key == INITIALIZE:
        return [p.state_epoch, p.start_offset]
    if api_key in (READ, READ_SUMMARY):
        return [p.leader_epoch]
    return []


def items(api_key: int, request) -> list[tuple[tuple[uuid.UUID, int], list]]:
    """((topic id, partition), the frame item) per partition of a Kafka share-state request, in order."""
    return [((topic.topic_id, p.partition), [topic.topic_id.bytes, p.partition, *_item(api_key, p)])
            for topic in request.topics for p in topic.partitions]


def write_item(topic_id: uuid.UUID, partition: int, state_epoch: int, leader_epoch: int, start_offset: int,
               batches, delivery_complete_count: int = -1) -> list:
    """One WriteShareGroupState partition as a frame item (a share-partition leader on the
    coordinator's broker sends these without building Kafka's request)."""
    return [topic_id.bytes, partition, state_epoch, leader_epoch, start_offset, [list(b) for b in batches],
            delivery_complete_count]


# ---- items -> the coordinator (the shard's side) -----------------------------------------------------------------

def _int(value, name: str) -> int:
    if type(value) is not int:
        raise MalformedMessage(f"share state: {name} is not an integer")
    return value


def _batches(value) -> list:
    if not (isinstance(value, list) and len(value) <= BATCHES_PER_ITEM_MAX
            and all(isinstance(b, list) and len(b) == 4 and all(type(x) is int for x in b) for b in value)):
        raise MalformedMessage("share state: the state batches are not [[first, last, state, count]...]")
    return [tuple(b) for b in value]


async def apply(coordinator: Any, api_key: int, group_id, frame_items) -> list[list]:
    """Run each item on `coordinator` (actors/share_coordinator/actor.py), in order; its results.
    Malformed items raise MalformedMessage (the connection closes; nothing after them is run)."""
    if api_key not in API_KEYS or not isinstance(group_id, str) or not isinstance(frame_items, list) \
            or len(frame_items) > ITEMS_PER_FRAME_MAX:
        raise MalformedMessage("share state: not [api key 83-87, group id, [items...]]")
    expected = {INITIALIZE: 4, READ: 3, WRITE: 7, DELETE: 2, READ_SUMMARY: 3}[api_key]
    results = []
    for item in frame_items:
        if not (isinstance(item, list) and len(item) == expected and isinstance(item[0], bytes)
                and len(item[0]) == 16):
            raise MalformedMessage("share state: an item is not [16-byte topic id, partition, fields...]")
        topic_id, partition = uuid.UUID(bytes=item[0]), _int(item[1], "the partition")
        fields = [_batches(f) if api_key == WRITE and i == 3 else _int(f, "a field") for i, f in enumerate(item[2:])]
        try:
            results.append(await _run(coordinator, api_key, group_id, topic_id, partition, fields))
        except CoordinatorLogError as e:  # not the leader now, or still loading: the sender retries
            results.append(error_result(e.error_code, e.message))
        except Exception as e:  # a bug: answer it, and keep the shared data-path connection open
            log.exception("share state %d of %s on %s-%d failed", api_key, group_id, topic_id, partition)
            results.append(error_result(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(e).__name__}: {e}"))
    return results


async def _run(coordinator: Any, api_key: int, group_id: str, topic_id: uuid.UUID, partition: int,
               fields: list) -> list:
    if api_key == WRITE:
        state_epoch, leader_epoch, start_offset, batches, complete = fields
        return list(await coordinator.write_state(group_id, topic_id, partition, state_epoch, leader_epoch,
                                                  start_offset, batches, complete))
    if api_key == READ:
        r = await coordinator.read_state(group_id, topic_id, partition, fields[0])
        return [r.error_code, r.error_message, r.state_epoch, r.start_offset, [list(b) for b in r.state_batches]]
    if api_key == INITIALIZE:
        return list(await coordinator.initialize_state(group_id, topic_id, partition, *fields))
    if api_key == DELETE:
        return list(await coordinator.delete_state(group_id, topic_id, partition))
    s = await coordinator.read_state_summary(group_id, topic_id, partition)
    return [s.error_code, s.error_message, s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count]


# ---- results -> Kafka response (the sender's side) ---------------------------------------------------------------

def _partition_result(api_key: int, partition: int, result: list):
    R = RESPONSES[api_key]
    code, message = result[0], result[1]
    if api_key == READ:
        state_epoch, start_offset, batches = result[2:5] if len(result) >= 5 else (-1, -1, [])
        return R.PartitionResult(partition=partition, error_code=code, error_message=message, state_epoch=state_epoch,
                                 start_offset=start_offset, state_batches=[
                                     R.StateBatch(first_offset=b[0], last_offset=b[1], delivery_state=b[2],
                                                  delivery_count=b[3]) for b in batches])
    if api_key == READ_SUMMARY:
        state_epoch, leader_epoch, start_offset, complete = result[2:6] if len(result) >= 6 else (-1, -1, -1, -1)
        return R.PartitionResult(partition=partition, error_code=code, error_message=message, state_epoch=state_epoch,
                                 leader_epoch=leader_epoch, start_offset=start_offset,
                                 delivery_complete_count=complete)
    return R.PartitionResult(partition=partition, error_code=code, error_message=message)


def error_result(code: int, message: str | None) -> list:
    """A result for a partition that no coordinator answered (refused, or not led here)."""
    return [code, message]


def response(api_key: int, request, results: list[list]):
    """Kafka's response to `request`, one result per partition in the request's order."""
    R = RESPONSES[api_key]
    topic_result = getattr(R, _TOPIC_RESULT[api_key])
    out, answers = [], iter(results)
    for topic in request.topics:
        out.append(topic_result(topic_id=topic.topic_id, partitions=[
            _partition_result(api_key, p.partition, next(answers)) for p in topic.partitions]))
    return R(results=out)
