"""How a partition replica hosted by a shard is found and called (no Ray here).

`shard_index` places a replica on one of its broker's shards by a stable function of (topic id,
partition), so a restarted shard, or a restarted controller, finds the same replicas on it. A
topic's partitions go round-robin over the shards from a start that the topic id picks, so a
topic of N partitions loads every shard with N/shards of them (a hash of the partition too would
put all 3 partitions of a topic on one of 2 shards one time in four, halving its throughput).
`HostedReplica` is what the controller, gateways and coordinators hold for a hosted replica: it is
called like an actor handle (`replica.update.remote(...)`), and each call becomes the shard's
`call(key, method, ...)`; `listen` becomes `host(spec)`, which hosts the replica if its shard does
not (first start, or after Ray restarted the shard empty) and answers the shard's listener address.
Only the controller hosts replicas: a HostedReplica sent elsewhere (in the gateways' metadata
image) travels as (shard, partition) alone, without the spec and its actor handles, so an image of
thousands of partitions costs a receiver a handful of actor handles, not thousands.
"""
from __future__ import annotations

import uuid
from typing import Any

from crc32c import crc32c


class ReplicaNotHosted(LookupError):
    """A call reached a shard that hosts no replica of that key: the shard was just restarted (Ray
    starts it empty; the controller hosts its replicas again) or the replica moved away."""


def shard_index(topic_id: uuid.UUID, partition: int, shard_count: int) -> int:
    """The shard of its broker that hosts a replica of (topic id, partition)."""
    return (crc32c(topic_id.bytes) + partition) % shard_count


class HostedReplica:
    __slots__ = ("shard", "key", "spec")

    def __init__(self, shard: Any, spec: dict[str, Any]):
        self.shard = shard  # the shard's Ray actor handle
        self.key = (spec["topic_id"], spec["partition"])
        self.spec = spec

    def __getattr__(self, method: str) -> "_HostedMethod":
        if method.startswith("_"):
            raise AttributeError(method)
        return _HostedMethod(self, method)

    def __getstate__(self):
        return self.shard, self.key

    def __setstate__(self, state) -> None:
        (self.shard, self.key), self.spec = state, None

    def __repr__(self) -> str:
        return f"HostedReplica({self.key[0].hex[:8]}-{self.key[1]})"


class _HostedMethod:
    __slots__ = ("replica", "method")

    def __init__(self, replica: HostedReplica, method: str):
        self.replica, self.method = replica, method

    def remote(self, *args):
        r = self.replica
        if self.method == "listen":
            if r.spec is None:
                raise RuntimeError(f"{r!r} travelled without its spec: only the controller hosts replicas")
            return r.shard.host.remote(r.spec)
        return r.shard.call.remote(r.key, self.method, *args)
