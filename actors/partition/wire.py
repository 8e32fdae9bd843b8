"""The partition leader's data-path API: what a gateway asks of the partition replicas on its node,
over a kept-open Unix-socket connection per actor (actors/pipelined.py), instead of Ray calls.

Why not Ray: an actor call costs ~1.2-1.8 ms of CPU here whatever its size; a frame on a Unix
socket costs ~12-25 µs per side. Ray still starts, places and supervises the actor and tells the
gateway where it listens.

Kafka's framing and request header, with api keys in a range of Kray's own: Kafka has no API
for this step (a Kafka broker reaches its partitions in process). Bodies are msgpack of the
call's arguments, followed by raw byte blobs (record batches, exactly as the producer sent them
or as the log holds them: never re-encoded):

    request   int32 size | int16 api key | int16 version 0 | int32 correlation id | int16 -1 (no client id)
              | uint32 meta size | msgpack [topic id (16 bytes), partition, args, [blob sizes]] | blobs
    response  int32 size | int32 correlation id | uint32 meta size | msgpack [status, args, [blob sizes]] | blobs

Every request names its partition, so that one listener (and one connection to it) can serve any
number of partition replicas hosted by one process. The status of a response is ANSWERED, or
NOT_HOSTED when no replica of that partition lives behind the listener (deleted, or not hosted
again yet after its host restarted): then nothing was done.

Every field read off the wire is checked: a malformed frame raises `MalformedMessage`, which
closes that connection and nothing else.
"""
from __future__ import annotations

import struct
import uuid

import msgpack

from protocol.errors import MalformedMessage

PRODUCE = 32000          # [leader_epoch, acks, timeout_ms] + [records]
FETCH = 32001            # [offset, max_bytes, leader_epoch, isolation_level] -> [error, high_watermark,
                         # last_stable, log_start, message, segment path, position, size_bytes, aborted
                         # transactions (read_committed: [[producer id, first offset]...], else None)]: where
                         # the records lie; the gateway (same node) sends them from the file
WAIT_FOR_DATA = 32002    # [offset, timeout_ms, replica]: True once records at or past offset are readable
                         # (replica: WAIT_CONSUMER below the high watermark, WAIT_REPLICA written (a
                         # follower's fetch), WAIT_READ_COMMITTED below the last stable offset)
LIST_OFFSETS = 32003     # [timestamp, leader_epoch, isolation_level]
SHARE_FETCH = 32004      # [group_id, member_id, acks, max_records, batch_size, max_bytes, fetch, record_limit,
                         # limits] (limits: the group's, actors/config_schema.py ShareGroupLimits.as_list(), or None)
                         # -> [error, message, ack_error, ack_message, acquired, segment path, position,
                         # size_bytes]: the acquired batches are sent from the file, as FETCH's are
SHARE_WAIT = 32005       # [group_id, timeout_ms]: True once records may be acquirable (acquires nothing)
SHARE_ACKNOWLEDGE = 32006  # [group_id, member_id, acks, limits]
SHARE_RELEASE = 32007    # [group_id, member_id]
REPLICA_FETCH = 32008    # [replica_id, current_leader_epoch, fetch_offset, last_fetched_epoch, max_bytes]
                         # -> [error, high_watermark, log_start, log_end, diverging epoch, diverging end
                         # offset (-1, -1: none), segment path, position, size_bytes]: a follower's fetch
# Several partitions of one shard in one frame (the frame's own partition is NO_PARTITION):
MANY = 32009             # [[api key, topic id, partition, args]...] of FETCH and REPLICA_FETCH calls
                         # -> [[status, args]...]: one frame instead of one per partition
WAIT_FOR_ANY = 32010     # [timeout_ms, [[topic id, partition, offset, replica]...]] -> [True once any
                         # of them has records at or past its offset (or is not hosted)]
PRODUCE_MANY = 32011     # [leader_epoch, acks, timeout_ms, [[topic id, partition]...]] + one record blob per
                         # partition -> [[status, PRODUCE's answer]...]: a produce request's partitions
                         # of one shard in one frame, appended in order before any of them waits
SHARE_STATE = 32012      # [api key 83-87, group id, [[topic id, partition, fields...]...]] -> [[error, message,
                         # fields...]...]: Kafka's share-state APIs for the share coordinator leading the
                         # frame's partition (a __share_group_state one), in order (see
                         # actors/share_coordinator/wire.py); NOT_HOSTED where no coordinator of it is hosted
RELEASE_WAITERS = 32013  # [] -> [count]: the partition's acks=all produces still waiting are answered
                         # NOT_LEADER_OR_FOLLOWER now (its broker's session with the controller lapsed)
TXN_MARKERS = 32014      # [timeout_ms, [[topic id, partition, producer id, producer epoch, coordinator epoch,
                         # committed]...]] -> [[status, [error, message]]...]: WriteTxnMarkers' markers for the
                         # partitions of one shard, appended in order, answered once replicated as acks=all
DESCRIBE_PRODUCERS = 32015  # [] -> [error, [[producer id, producer epoch, last sequence, last timestamp,
                            # coordinator epoch, current txn start offset]...]]: the leader's producer state
DELETE_RECORDS = 32017   # [leader_epoch, offset (-1: the high watermark)] -> [error, low watermark, message]:
                         # DeleteRecords for one partition at its leader
TXN_COORDINATOR = 32016  # [operation, args] -> [error, [[topic, partition, error]...] or None]: a client's
                         # AddPartitionsToTxn ("add_partitions": [[transactional id, producer id, producer epoch,
                         # [[topic, partition]...], verify only]...] -> one answer each), AddOffsetsToTxn
                         # ("add_offsets") or EndTxn ("end_txn") for the transaction coordinator leading the
                         # frame's partition (a __transaction_state one); NOT_HOSTED where none of it is hosted
BATCHED = (FETCH, REPLICA_FETCH)
WAIT_CONSUMER, WAIT_REPLICA, WAIT_READ_COMMITTED = 0, 1, 2   # WAIT_FOR_DATA / WAIT_FOR_ANY's "replica"  # what MANY may carry: calls without blobs that never wait
NO_PARTITION = (uuid.UUID(int=0), 0)
API_NAMES = {PRODUCE: "produce", FETCH: "fetch", WAIT_FOR_DATA: "wait_for_data", LIST_OFFSETS: "list_offsets",
             SHARE_FETCH: "share_fetch", SHARE_WAIT: "share_wait", SHARE_ACKNOWLEDGE: "share_acknowledge",
             SHARE_RELEASE: "share_release", REPLICA_FETCH: "replica_fetch", MANY: "many",
             WAIT_FOR_ANY: "wait_for_any", PRODUCE_MANY: "produce_many", SHARE_STATE: "share_state",
             RELEASE_WAITERS: "release_waiters", TXN_MARKERS: "txn_markers",
             DESCRIBE_PRODUCERS: "describe_producers", TXN_COORDINATOR: "txn_coordinator",
             DELETE_RECORDS: "delete_records"}

ANSWERED, NOT_HOSTED = 0, 1  # response statuses

_REQUEST_HEADER = struct.Struct(">hhih")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
NO_CLIENT_ID = -1


def _meta(head: list, args: list, blobs) -> tuple[bytes, int]:
    meta = msgpack.packb([*head, args, [len(b) for b in blobs]], use_bin_type=True)
    return meta, len(meta) + sum(len(b) for b in blobs)


def encode_request(api_key: int, correlation_id: int, key: tuple[uuid.UUID, int], args: list, blobs=()) -> list:
    """A request to partition `key` = (topic id, partition index)."""
    meta, size_bytes = _meta([key[0].bytes, key[1]], args, blobs)
    head = _I32.pack(_REQUEST_HEADER.size + 4 + size_bytes) + \
        _REQUEST_HEADER.pack(api_key, 0, correlation_id, NO_CLIENT_ID) + _U32.pack(len(meta))
    return [head, meta, *blobs]


def encode_response(correlation_id: int, args: list, blobs=(), status: int = ANSWERED) -> list:
    meta, size_bytes = _meta([status], args, blobs)
    return [_I32.pack(8 + size_bytes) + _I32.pack(correlation_id) + _U32.pack(len(meta)), meta, *blobs]


def _decode_meta(body: memoryview, pos: int, head_fields: int) -> tuple[list, list, list]:
    if len(body) < pos + 4:
        raise MalformedMessage("internal frame: truncated before its meta size")
    meta_bytes = _U32.unpack_from(body, pos)[0]
    pos += 4
    if meta_bytes > len(body) - pos:
        raise MalformedMessage(f"internal frame: meta of {meta_bytes} bytes in a body of {len(body)}")
    try:
        meta = msgpack.unpackb(body[pos:pos + meta_bytes], raw=False, use_list=True)
    except Exception as e:
        raise MalformedMessage(f"internal frame: bad meta ({e})") from None
    if not (isinstance(meta, list) and len(meta) == head_fields + 2 and isinstance(meta[-2], list)
            and isinstance(meta[-1], list)):
        raise MalformedMessage("internal frame: meta is not [head, args, blob sizes]")
    head, args, sizes = meta[:head_fields], meta[-2], meta[-1]
    pos += meta_bytes
    blobs = []
    for size in sizes:
        if not isinstance(size, int) or size < 0 or size > len(body) - pos:
            raise MalformedMessage("internal frame: a blob runs past the end of the frame")
        blobs.append(body[pos:pos + size])
        pos += size
    if pos != len(body):
        raise MalformedMessage(f"internal frame: {len(body) - pos} bytes after the last blob")
    return head, args, blobs


def decode_request(body: memoryview) -> tuple[int, int, tuple[uuid.UUID, int], list, list]:
    """(api key, correlation id, partition key, args, blobs) of a request frame body."""
    if len(body) < _REQUEST_HEADER.size:
        raise MalformedMessage("internal frame: shorter than its header")
    api_key, version, correlation_id, client_id = _REQUEST_HEADER.unpack_from(body, 0)
    if api_key not in API_NAMES or version != 0 or client_id != NO_CLIENT_ID:
        raise MalformedMessage(f"internal frame: api key {api_key} v{version} is not served here")
    (topic_id, partition), args, blobs = _decode_meta(body, _REQUEST_HEADER.size, 2)
    if not (isinstance(topic_id, bytes) and len(topic_id) == 16 and isinstance(partition, int) and partition >= 0):
        raise MalformedMessage("internal frame: the partition is not (16-byte topic id, index)")
    return api_key, correlation_id, (uuid.UUID(bytes=topic_id), partition), args, blobs


def decode_key(topic_id, partition) -> tuple[uuid.UUID, int]:
    """A partition named inside a MANY or WAIT_FOR_ANY frame, checked."""
    if not (isinstance(topic_id, bytes) and len(topic_id) == 16 and isinstance(partition, int) and partition >= 0):
        raise MalformedMessage("internal frame: a partition is not (16-byte topic id, index)")
    return uuid.UUID(bytes=topic_id), partition


def decode_response(body_after_correlation_id: memoryview) -> tuple[int, list, list]:
    """(status, args, blobs) of a response frame body after its correlation id."""
    (status,), args, blobs = _decode_meta(body_after_correlation_id, 0, 1)
    if status not in (ANSWERED, NOT_HOSTED):
        raise MalformedMessage(f"internal frame: unknown status {status!r}")
    return status, args, blobs
