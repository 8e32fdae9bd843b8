"""The partition leaders' data-path listener: serves wire.py's API on a Unix socket for the
gateway of its node, by calling the methods of the partition replica each frame names (one
listener serves every replica its process hosts).

SHARE_STATE frames go to the share coordinator a `__share_group_state` replica hosts (its
`share_state`), TXN_COORDINATOR frames to the transaction coordinator a `__transaction_state`
replica hosts (its `txn_operation`); a replica without one answers NOT_HOSTED, as for a partition
not hosted here.

Long polls (WAIT_FOR_DATA, SHARE_WAIT) wait here, in the partition replica, and answer with a
flag only: whatever is read or acquired afterwards is asked for by a call whose answer is used,
so a wait the gateway gave up on costs nothing and acquires nothing.

The frames carry no login (the gateway checked the client's ACLs before sending one), so the
socket is reachable by the broker's own user only: a file in a 0700 directory, mode 0600, and a
connection from any other uid is closed before its first frame (actors/local_socket.py).
"""
from __future__ import annotations

import asyncio
import uuid
from typing import Any, Callable

from actors.local_socket import start_private_server
from actors.partition.log import FileSlice
from actors.partition import wire
from actors.pipelined import serve_multiplexed
from protocol.errors import MalformedMessage

# A gateway multiplexes all its clients' requests for the partitions behind a listener over one connection.
INFLIGHT_REQUESTS_PER_CONNECTION_MAX = 4096


def _expect(args: list, count: int, name: str) -> list:
    if len(args) != count:
        raise MalformedMessage(f"{name}: {len(args)} arguments, expected {count}")
    return args


def _produce_answer(r) -> list:
    return [r.error_code, r.base_offset, r.log_append_time_ms, r.log_start_offset, r.error_message,
            [list(e) for e in r.record_errors]]


async def _produce(actor, args, blobs):
    leader_epoch, acks, timeout_ms = _expect(args, 3, "produce")
    if len(blobs) != 1:
        raise MalformedMessage(f"produce: {len(blobs)} record blobs, expected 1")
    [r] = await actor.produce(blobs, leader_epoch, acks, timeout_ms)
    return _produce_answer(r), ()


async def _produce_many(replica_for, args, blobs):
    """PRODUCE_MANY: every partition's batch appended in the frame's order, before any of them
    waits for acks=all (so frames of one connection still append in the order they came); then
    the answers, once every partition's wait is over."""
    leader_epoch, acks, timeout_ms, keys = _expect(args, 4, "produce_many")
    if not (isinstance(keys, list) and len(keys) == len(blobs)
            and all(isinstance(k, list) and len(k) == 2 for k in keys)):
        raise MalformedMessage("produce_many: not one [topic id, partition] per record blob")
    appended = []
    for (topic_id, partition), blob in zip(keys, blobs):
        replica = replica_for(wire.decode_key(topic_id, partition))
        appended.append(None if replica is None else (replica, *replica.append([blob], leader_epoch, acks)))
    waits = [replica.acknowledged(results, required, timeout_ms)
             for replica, results, required in filter(None, appended) if required is not None]
    done = iter(await asyncio.gather(*waits))
    answers = []
    for a in appended:
        if a is None:
            answers.append([wire.NOT_HOSTED, []])
            continue
        [r] = a[1] if a[2] is None else next(done)
        answers.append([wire.ANSWERED, _produce_answer(r)])
    return [answers], ()


async def _fetch(actor, args, blobs):
    offset, max_bytes, leader_epoch, isolation_level = _expect(args, 4, "fetch")
    r = await actor.fetch_slice(offset, max_bytes, leader_epoch, isolation_level)
    path, position, size_bytes = r.records if isinstance(r.records, FileSlice) else ("", 0, 0)
    aborted = None if r.aborted_transactions is None else [list(a) for a in r.aborted_transactions]
    return [r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset, r.error_message,
            path, position, size_bytes, aborted], ()


async def _replica_fetch(actor, args, blobs):
    replica_id, current_leader_epoch, fetch_offset, last_fetched_epoch, max_bytes = _expect(args, 5, "replica_fetch")
    answer, records = await actor.replica_fetch(replica_id, current_leader_epoch, fetch_offset, last_fetched_epoch,
                                                max_bytes)
    path, position, size_bytes = records if isinstance(records, FileSlice) else ("", 0, 0)
    diverging = answer.diverging_epoch
    return [answer.error_code, answer.high_watermark, answer.log_start_offset, answer.log_end_offset,
            diverging.leader_epoch if diverging else -1, diverging.end_offset if diverging else -1,
            path, position, size_bytes], ()


async def _wait_for_data(actor, args, blobs):
    offset, timeout_ms, replica = _expect(args, 3, "wait_for_data")
    return [await actor.wait_for_data(offset, timeout_ms, _wait_mode(replica))], ()


def _wait_mode(replica) -> int:
    """WAIT_FOR_DATA's "replica": a bool (older gateways) or one of wire.WAIT_*."""
    mode = int(replica)
    if mode not in (wire.WAIT_CONSUMER, wire.WAIT_REPLICA, wire.WAIT_READ_COMMITTED):
        raise MalformedMessage(f"wait: unknown mode {replica!r}")
    return mode


async def _list_offsets(actor, args, blobs):
    timestamp, leader_epoch, isolation_level = _expect(args, 3, "list_offsets")
    return list(await actor.list_offsets(timestamp, leader_epoch, isolation_level)), ()


async def _delete_records(actor, args, blobs):
    leader_epoch, offset = _expect(args, 2, "delete_records")
    return list(await actor.delete_records_for_client(offset, leader_epoch)), ()


async def _describe_producers(actor, args, blobs):
    _expect(args, 0, "describe_producers")
    error, producers = actor.describe_producers()
    return [int(error), [list(p) for p in producers]], ()


async def _share_fetch(actor, args, blobs):
    group_id, member_id, acks, max_records, batch_size, max_bytes, fetch, record_limit, limits = \
        _expect(args, 9, "share_fetch")
    r = await actor.share_fetch(group_id, member_id, acks, max_records, batch_size, max_bytes, fetch, record_limit,
                                limits)
    path, position, size_bytes = r.records if isinstance(r.records, FileSlice) and r.acquired else ("", 0, 0)
    return [r.error_code, r.error_message, r.ack_error_code, r.ack_error_message,
            [list(a) for a in r.acquired], path, position, size_bytes], ()


async def _share_wait(actor, args, blobs):
    group_id, timeout_ms = _expect(args, 2, "share_wait")
    return [await actor.share_wait(group_id, timeout_ms)], ()


async def _share_acknowledge(actor, args, blobs):
    group_id, member_id, acks, limits = _expect(args, 4, "share_acknowledge")
    return list(await actor.share_acknowledge(group_id, member_id, acks, limits)), ()


async def _share_release(actor, args, blobs):
    group_id, member_id = _expect(args, 2, "share_release")
    await actor.share_release(group_id, member_id)
    return [], ()


async def _share_state(actor, args, blobs):
    api_key, group_id, items = _expect(args, 3, "share_state")
    return [await actor.share_state(api_key, group_id, items)], ()


async def _many(replica_for, args):
    """MANY: each call to its own replica, in order; one answer per call."""
    calls = _expect(args, 1, "many")[0]
    if not isinstance(calls, list):
        raise MalformedMessage("many: the calls are not a list")
    answers = []
    for call in calls:
        if not (isinstance(call, list) and len(call) == 4 and call[0] in wire.BATCHED):
            raise MalformedMessage("many: a call is not [fetch or replica fetch, topic id, partition, args]")
        replica = replica_for(wire.decode_key(call[1], call[2]))
        if replica is None:
            answers.append([wire.NOT_HOSTED, []])
            continue
        out_args, _ = await HANDLERS[call[0]](replica, call[3], ())
        answers.append([wire.ANSWERED, out_args])
    return [answers], ()


async def _wait_for_any(replica_for, wake, args):
    """WAIT_FOR_ANY: checks every named partition when any replica of this process takes records
    (`wake()` is the event that is set then), not one waiting task per partition."""
    timeout_ms, wanted = _expect(args, 2, "wait_for_any")
    if not (isinstance(wanted, list) and all(isinstance(w, list) and len(w) == 4 for w in wanted)):
        raise MalformedMessage("wait_for_any: the partitions are not [[topic id, partition, offset, replica]...]")
    wanted = [(wire.decode_key(t, p), offset, _wait_mode(replica)) for t, p, offset, replica in wanted]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    while True:
        woken = wake()
        for key, offset, replica in wanted:
            actor = replica_for(key)
            if actor is None or actor.has_data(offset, replica):
                return [True], ()
        remaining = deadline - loop.time()
        if remaining <= 0:
            return [False], ()
        try:
            await asyncio.wait_for(woken.wait(), remaining)
        except asyncio.TimeoutError:
            return [False], ()


async def _txn_markers(replica_for, args):
    """TXN_MARKERS: every marker appended in the frame's order (one partition may get several:
    one per producer), before any of them waits for acks=all; then the answers."""
    timeout_ms, markers = _expect(args, 2, "txn_markers")
    if not (isinstance(markers, list) and all(isinstance(m, list) and len(m) == 6 for m in markers)):
        raise MalformedMessage("txn_markers: the markers are not [[topic id, partition, producer id, producer "
                               "epoch, coordinator epoch, committed]...]")
    appended = []
    for topic_id, partition, producer_id, producer_epoch, coordinator_epoch, committed in markers:
        replica = replica_for(wire.decode_key(topic_id, partition))
        appended.append(None if replica is None else (replica, *replica.append_marker(
            int(producer_id), int(producer_epoch), int(coordinator_epoch), bool(committed))))
    waits = [replica.acknowledged(results, required, timeout_ms)
             for replica, results, required in filter(None, appended) if required is not None]
    done = iter(await asyncio.gather(*waits))
    answers = []
    for a in appended:
        if a is None:
            answers.append([wire.NOT_HOSTED, []])
            continue
        [r] = a[1] if a[2] is None else next(done)
        answers.append([wire.ANSWERED, [r.error_code, r.error_message]])
    return [answers], ()


async def _txn_coordinator(actor, args, blobs):
    _expect(args, 2, "txn_coordinator")
    operation, operation_args = args
    return [await actor.txn_operation(operation, operation_args)], ()


async def _release_waiters(actor, args, blobs):
    _expect(args, 0, "release_waiters")
    return [actor.release_acks_waits()], ()


HANDLERS = {wire.PRODUCE: _produce, wire.FETCH: _fetch, wire.WAIT_FOR_DATA: _wait_for_data,
            wire.LIST_OFFSETS: _list_offsets, wire.SHARE_FETCH: _share_fetch, wire.SHARE_WAIT: _share_wait,
            wire.SHARE_ACKNOWLEDGE: _share_acknowledge, wire.SHARE_RELEASE: _share_release,
            wire.REPLICA_FETCH: _replica_fetch, wire.SHARE_STATE: _share_state,
            wire.RELEASE_WAITERS: _release_waiters, wire.DESCRIBE_PRODUCERS: _describe_producers,
            wire.TXN_COORDINATOR: _txn_coordinator, wire.DELETE_RECORDS: _delete_records}
# what only a coordinator's replica answers (a plain replica of the partition answers NOT_HOSTED)
COORDINATOR_OPERATIONS = {wire.SHARE_STATE: "share_state", wire.TXN_COORDINATOR: "txn_operation"}


async def start_listener(replica_for: Callable[[tuple[uuid.UUID, int]], Any], address: str,
                         frame_bytes_max: int, wake: Callable[[], asyncio.Event]) -> asyncio.AbstractServer:
    """Listen on `address` (a path in a private directory: actors/local_socket.py's
    private_address); `replica_for(key)` is the replica a frame for partition `key` goes to,
    or None (answered NOT_HOSTED: nothing done); `wake()` is an event set the next time any replica
    takes records (WAIT_FOR_ANY waits on it)."""
    async def handle(body: memoryview) -> list:
        api_key, correlation_id, key, args, blobs = wire.decode_request(body)
        if api_key in (wire.MANY, wire.WAIT_FOR_ANY, wire.PRODUCE_MANY, wire.TXN_MARKERS):
            try:
                out_args, _ = await (_many(replica_for, args) if api_key == wire.MANY
                                     else _produce_many(replica_for, args, blobs) if api_key == wire.PRODUCE_MANY
                                     else _txn_markers(replica_for, args) if api_key == wire.TXN_MARKERS
                                     else _wait_for_any(replica_for, wake, args))
            except (TypeError, ValueError) as e:
                raise MalformedMessage(f"{wire.API_NAMES[api_key]}: {e}") from None
            return wire.encode_response(correlation_id, out_args)
        actor = replica_for(key)
        if actor is None or (api_key in COORDINATOR_OPERATIONS and not hasattr(actor, COORDINATOR_OPERATIONS[api_key])):
            return wire.encode_response(correlation_id, [], (), status=wire.NOT_HOSTED)
        try:
            out_args, out_blobs = await HANDLERS[api_key](actor, args, blobs)
        except (TypeError, ValueError) as e:  # arguments of the wrong type or shape
            raise MalformedMessage(f"{wire.API_NAMES[api_key]}: {e}") from None
        return wire.encode_response(correlation_id, out_args, out_blobs)

    async def serve(reader, writer):
        await serve_multiplexed(reader, writer, handle, frame_bytes_max=frame_bytes_max,
                                inflight_requests_max=INFLIGHT_REQUESTS_PER_CONNECTION_MAX)

    return await start_private_server(serve, address, "a shard's data-path listener")
