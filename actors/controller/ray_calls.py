"""How the controller's shell calls Ray and the actors it runs: Ray's GCS off the event loop and
bounded (`GcsCalls`), control calls to hosted replicas batched per shard (`ShardCalls`), and the
running actors found by name after a restart or a takeover (`find_running_actors`, whose findings
the reconciler adopts)."""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Any, Callable

import ray

from actors.names import NAMESPACE, gateway_name, shard_name

log = logging.getLogger("kray.controller")
SHARDS_PER_BROKER_MAX = 64


def listen_failure(e: BaseException) -> bool:
    """Whether a gateway's failure is its listener's (the port taken, an address it may not bind:
    `kray start` says "cannot listen" with the fix), not an unreachable or dead node's, nor a
    controller that did not answer in time."""
    cause = getattr(e, "cause", None) or e
    return isinstance(cause, OSError) and not isinstance(cause, (TimeoutError, ConnectionError,
                                                                  ray.exceptions.RayError))


class ReplicaCallFailed(RuntimeError):
    pass


class GcsCalls:
    """Calls that ask Ray's GCS (the node table, named actors), off the event loop and bounded: a
    node cut off from the Ray head gets no answer, and the controller must keep turning. One at a
    time, on a thread of their own: a call still stuck makes the next one fail at once."""

    def __init__(self, timeout_s: float = 10.0):
        self.timeout_s = timeout_s
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kray-gcs")
        self._busy: concurrent.futures.Future | None = None

    async def __call__(self, fn, *args):
        if self._busy is not None and not self._busy.done():
            raise TimeoutError("Ray's GCS has not answered the previous call yet")
        self._busy = self._pool.submit(fn, *args)
        return await asyncio.wait_for(asyncio.wrap_future(self._busy), self.timeout_s)


class ShardCalls:
    """Control calls to hosted replicas ("host": have its shard host it). Calls to one shard made
    while the event loop turns travel as one Ray call (`ShardActor.call_many`): creating 1,000
    partitions, or a broker's loss moving hundreds, is a few Ray calls per shard, not two per
    replica (each costs the controller ~1-2 ms of CPU). A "host" takes no arguments: the replica's
    spec is read when the batch is sent (`hosting_spec(replica)`), so that a config altered before
    then is in it even if the alter's own call to the replica came first and missed it."""

    def __init__(self, hosting_spec: Callable[[Any], dict]):
        self.hosting_spec = hosting_spec
        self.batches: dict[Any, list] = {}

    def __call__(self, replica, method: str, *args) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        shard_id = replica.shard._actor_id
        batch = self.batches.get(shard_id)
        if batch is None:
            batch = self.batches[shard_id] = []
            loop.call_soon(self._send, shard_id, replica.shard)
        answer = loop.create_future()
        batch.append((replica, method, list(args), answer))
        return answer

    def _send(self, shard_id, shard) -> None:
        batch = self.batches.pop(shard_id)
        sent = shard.call_many.remote([(replica.key, method, [self.hosting_spec(replica)] if method == "host" else args)
                                       for replica, method, args, _ in batch])
        asyncio.ensure_future(self._answer(sent, batch))

    @staticmethod
    async def _answer(sent, batch: list) -> None:
        try:
            results = await sent
        except Exception as e:  # the shard died: every call of the batch failed
            results = [(False, e)] * len(batch)
        for (replica, method, _, answer), (ok, result) in zip(batch, results):
            if answer.done():
                continue
            if ok:
                answer.set_result(result)
            else:
                answer.set_exception(result if isinstance(result, Exception) else
                                     ReplicaCallFailed(f"{method} of {replica.key}: {result}"))


def find_running_actors(core, named: dict[str, Any] | None, timeout_s: float) -> tuple[dict, dict]:
    """After Ray restarts the controller, the actors it had started are still running under their
    names: find them (the reconciler adopts them instead of starting twins). Each shard says which
    replicas it hosts (where they really are, whatever the shard count is now), each gateway where
    it runs. `named`: the handles by name, known already (a standby's, when the GCS may be cut
    off), else asked of Ray. Blocking: run it off the event loop. Returns ({(broker id, shard
    index): (shard, its hosted (topic id, partition)s or None if it did not answer)}, {broker id:
    (gateway, its node id, whether it said so)})."""
    def running(name):
        if named is not None:
            return named.get(name)
        try:
            return ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            return None
    names = set(named) if named is not None else {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                                                  if a.get("namespace") == NAMESPACE}
    asked = []
    for broker_id in core.brokers:
        for index in range(SHARDS_PER_BROKER_MAX):
            name = shard_name(broker_id, index)
            shard = running(name) if name in names else None
            if shard is not None:
                asked.append(((broker_id, index), name, shard, shard.hosted.remote()))
    shards = {}
    deadline = time.monotonic() + timeout_s  # all asked at once: a dead node's shards cost one wait
    for key, name, shard, answer in asked:
        try:
            shards[key] = (shard, ray.get(answer, timeout=max(0.0, deadline - time.monotonic())))
        except Exception as e:  # restarting: its replicas are started again when needed
            log.info("shard %s did not say what it hosts: %s", name, e)
            shards[key] = (shard, None)
    # every broker's gateway, also one an earlier controller started that has not registered yet
    brokers = set(core.brokers) | {int(n.split("-", 1)[1]) for n in names
                                   if n.startswith("gateway-") and n.split("-", 1)[1].isdigit()}
    gateways = {b: running(gateway_name(b)) for b in brokers}
    gateways = {b: g for b, g in gateways.items() if g is not None}
    # where each runs: the node its registration recorded, unless it says another (the voting
    # brokers' gateways of a restarted cluster, started on new nodes before the metadata was read)
    where = {b: g.node_id.remote() for b, g in gateways.items()}
    found = {}
    for broker_id, gateway in gateways.items():
        registered = core.brokers.get(broker_id)
        node_id, answered = registered.node_id if registered is not None else None, False
        try:
            node_id, answered = ray.get(where[broker_id], timeout=max(0.1, deadline - time.monotonic())), True
        except Exception as e:  # cut off, or restarting: as registered
            log.info("broker %d's gateway did not say where it runs: %s", broker_id, e)
        if node_id is not None:
            found[broker_id] = (gateway, node_id, answered)
    return shards, found
