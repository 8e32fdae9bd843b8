"""Fetch: read every asked-for partition in parallel; if the answer is smaller than min_bytes,
wait (without polling) until one of the partitions gets new data or max_wait_ms passes, then read
again. Kray keeps no fetch sessions yet: every response has session id 0, so clients send full
fetch requests, which KIP-227 allows.
"""
from __future__ import annotations

import asyncio
import logging


from protocol.errors import ErrorCode
from protocol.messages import FetchResponse

from actors.gateway.file_region import FileRegion
from actors.gateway.handlers.routing import partition_client, resolve_topic

log = logging.getLogger("kray.gateway")


class _Wanted:
    __slots__ = ("client", "offset", "max_bytes", "leader_epoch", "response")

    def __init__(self, client, offset, max_bytes, leader_epoch, response):
        self.client, self.offset, self.max_bytes = client, offset, max_bytes
        self.leader_epoch, self.response = leader_epoch, response


async def _read(w: _Wanted, isolation_level: int) -> int:
    """Fill w.response from the partition; return the number of record bytes it got."""
    try:
        r = await w.client.fetch(w.offset, w.max_bytes, leader_epoch=w.leader_epoch, isolation_level=isolation_level)
    except Exception as e:
        log.warning("fetch from a partition actor failed: %s", e)
        w.response.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return 0
    p = w.response
    if isinstance(p.records, FileRegion):  # read again after a wait: the first answer is dropped
        p.records.close()
    p.error_code, p.high_watermark = r.error_code, r.high_watermark
    p.last_stable_offset, p.log_start_offset = r.last_stable_offset, r.log_start_offset
    p.records = r.records
    return len(r.records) if r.records is not None else 0


async def _wait_for_any(wanted: list[_Wanted], timeout_ms: int) -> None:
    tasks = [asyncio.ensure_future(w.client.wait_for_data(w.offset, timeout_ms)) for w in wanted]
    try:
        done, _ = await asyncio.wait(tasks, timeout=timeout_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()


async def handle_fetch(ctx, header, request) -> FetchResponse:
    version = header.api_version
    by_id = version >= 13
    if request.session_id != 0 or request.session_epoch not in (0, -1):
        return FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[])
    responses, wanted = [], []
    for ft in request.topics:
        topic, unknown_error = resolve_topic(ctx, ft.topic, ft.topic_id, by_id)
        tr = FetchResponse.FetchableTopicResponse(topic=ft.topic, topic_id=ft.topic_id, partitions=[])
        responses.append(tr)
        for fp in ft.partitions:
            pr = FetchResponse.PartitionData(partition_index=fp.partition, high_watermark=-1, last_stable_offset=-1,
                                             log_start_offset=-1, records=b"")
            tr.partitions.append(pr)
            client, pr.error_code = partition_client(ctx, topic, fp.partition, unknown_error)
            if client is not None:
                wanted.append(_Wanted(client, fp.fetch_offset, fp.partition_max_bytes, fp.current_leader_epoch, pr))
    isolation = request.isolation_level
    sizes = await asyncio.gather(*(_read(w, isolation) for w in wanted))
    if wanted and sum(sizes) < max(request.min_bytes, 1) and request.max_wait_ms > 0:
        idle = [w for w, size in zip(wanted, sizes) if size == 0 and w.response.error_code == 0]
        if idle:
            await _wait_for_any(idle, request.max_wait_ms)
            sizes = await asyncio.gather(*(_read(w, isolation) for w in wanted))
    _trim_to_max_bytes(wanted, sizes, request.max_bytes)
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)


def _trim_to_max_bytes(wanted: list[_Wanted], sizes: list[int], max_bytes: int) -> None:
    """Keep the response within max_bytes, but always keep the first non-empty partition (KIP-74)."""
    total = 0
    for w, size in zip(wanted, sizes):
        if size and total and total + size > max_bytes:
            if isinstance(w.response.records, FileRegion):
                w.response.records.close()
            w.response.records = b""
            continue
        total += size


