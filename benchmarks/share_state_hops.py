#!/usr/bin/env python3
"""CPU per share-state write over each path a share-partition leader uses (issue 17), every hop in
this one process, so the figure is the sum over client, gateway, shard listener and a coordinator
stand-in that answers at once (no log append):

- ``local``: a coordinator on the leader's own broker: a SHARE_STATE frame over the shard's Unix
  socket (one hop);
- ``remote``: a coordinator on another broker: Kafka's WriteShareGroupState over TCP to that
  broker's gateway front end (PLAINTEXT, no authorizer), which forwards a SHARE_STATE frame over
  its Unix socket to the shard (two hops).

Run from the repo root: ``python -m benchmarks.share_state_hops [--writes 5000] [--window 4]``.
Prints one line per path; nothing is written to disk.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid

TOPIC, STATE = uuid.uuid4(), uuid.uuid4()
BATCHES = [(i * 10, i * 10 + 9, 2, 1) for i in range(5)]
CONFIG = {"socket.request.max.bytes": 1 << 20, "connections.max.idle.ms": 60000}


class Coordinator:
    async def share_state(self, api_key, group_id, items):
        from actors.share_coordinator import wire
        return await wire.apply(self, api_key, group_id, items)

    async def write_state(self, *args):
        return 0, None


async def drive(send, writes: int, window: int) -> tuple[float, float]:
    limit = asyncio.Semaphore(window)

    async def one(i):
        async with limit:
            code, message = await send(i)
            if code:
                raise RuntimeError(f"write {i}: error {code} {message}")
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(writes)))
    return time.perf_counter() - wall, time.process_time() - cpu


async def measure(path: str, writes: int, window: int) -> str:
    from actors.partition.listener import start_listener
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)  # servers' tasks cancelled at the end
    address = os.path.join(tempfile.mkdtemp(), "shard.sock")
    servers = [await start_listener({(STATE, 0): Coordinator()}.get, address, 1 << 20, asyncio.Event)]
    if path == "local":
        from actors.share_partition.state_client import LocalStateConnection
        connection = await LocalStateConnection.open(address, 5)

        def send(i):
            return connection.send_write((STATE, 0), "g", TOPIC, 0, 1, 1, i, BATCHES, 10)
    else:
        from actors.gateway.context import GatewayContext
        from actors.gateway.frontend import start_frontend
        from actors.gateway.handlers import share_state
        from actors.gateway.partition_client import DataPaths, SocketPartition
        from actors.share_partition.state_client import BrokerStateConnection
        client = SocketPartition(address, (STATE, 0), DataPaths())
        share_state._routes = lambda ctx, group_id, keys: ([client] * len(keys), None)  # the coordinator leads here
        servers.append(await start_frontend(GatewayContext(broker_id=1, config=CONFIG, controller=None),
                                            "127.0.0.1", 0))
        connection = await BrokerStateConnection.open("127.0.0.1", servers[-1].sockets[0].getsockname()[1], 5)

        def send(i):
            return connection.send_write("g", TOPIC, 0, 1, 1, i, BATCHES, 10)
    await drive(send, writes, window)  # warm up
    wall, cpu = await drive(send, writes, window)
    connection.close()
    for server in servers:
        server.close()
    return (f"{path}: {writes} writes ({window} in flight), {wall:.2f} s wall, "
            f"{cpu / writes * 1e6:.0f} µs CPU per write (all hops, one process)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=5000)
    ap.add_argument("--window", type=int, default=4)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()}")
    for path in ("local", "remote"):
        print(asyncio.run(measure(path, args.writes, args.window)))


if __name__ == "__main__":
    main()
