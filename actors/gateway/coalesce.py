"""Group commit for produce: while calls to a partition actor are in flight, later record batches
for that partition wait and travel together in the next call.

A Ray actor call costs milliseconds of CPU on this kind of machine whatever its size, so a busy
partition gets one call per several client requests, and an idle one still gets its call at once.
Batches keep their arrival order: a partition actor appends a call's batches in list order and
starts calls in the order they were made.
"""
from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Awaitable, Callable

CALLS_IN_FLIGHT_MAX = 2
CALL_BYTES_MAX = 8 * 1024 * 1024

# send(blobs, leader_epoch, acks, timeout_ms) -> one result per blob, in order
Send = Callable[[list, int, int, int], Awaitable[list]]


class ProduceCoalescer:
    __slots__ = ("send", "waiting", "in_flight")

    def __init__(self, send: Send):
        self.send = send
        self.waiting: deque[tuple[Any, tuple[int, int, int], asyncio.Future]] = deque()
        self.in_flight = 0

    async def produce(self, records, *, leader_epoch: int, acks: int, timeout_ms: int):
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((records, (leader_epoch, acks, timeout_ms), future))
        self._pump()
        return await future

    def _pump(self) -> None:
        while self.waiting and self.in_flight < CALLS_IN_FLIGHT_MAX:
            key = self.waiting[0][1]
            taken, size_bytes = [], 0
            while self.waiting and self.waiting[0][1] == key and (
                    not taken or size_bytes + len(self.waiting[0][0]) <= CALL_BYTES_MAX):
                item = self.waiting.popleft()
                taken.append(item)
                size_bytes += len(item[0])
            self.in_flight += 1
            asyncio.ensure_future(self._call(taken, key))

    async def _call(self, taken: list, key: tuple[int, int, int]) -> None:
        try:
            results = await self.send([records for records, _, _ in taken], *key)
            for (_, _, future), result in zip(taken, results):
                if not future.done():
                    future.set_result(result)
        except BaseException as e:
            for _, _, future in taken:
                if not future.done():
                    future.set_exception(e)
        finally:
            self.in_flight -= 1
            self._pump()
