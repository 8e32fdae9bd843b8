"""The share-partition leaders' dead-letter writer (KIP-1191): the I/O half of dead-letter queues.

A share-partition's Archiving records (the core decides which: actors/share_partition/core.py) are
written to its group's DLQ topic as Kafka Produce requests with acks=all (-1), so a record is
Archived only once its DLQ copy is replicated to the DLQ partition's in-sync replicas. Requests go
over the data path, as the share-state writes do: a kept-open, pipelined Kafka connection to the
inter-broker listener of the broker leading the DLQ partition (this broker's own where it leads),
one request per batch of up to DLQ_BATCH_RECORDS_MAX records, never one call per record. The
controller is asked (a Ray call, control) only for where the DLQ topic is and whether it may be one.

Which DLQ partition: the source partition modulo the DLQ topic's partition count, so one source
partition's dead letters keep their order in one DLQ partition.

A DLQ topic that cannot be used (KIP-1191): one that does not exist, unless
``errors.deadletterqueue.auto.create.topics.enable`` creates it (``num.partitions``, the default
replication factor bounded by the live brokers, ``errors.deadletterqueue.group.enable=true``), or
one without ``errors.deadletterqueue.group.enable=true``: the records are archived without a DLQ
record, and the reason is logged once per group and topic (and counted: kray_share_dead_letter_record_count
with outcome=skipped). A DLQ topic that refuses copied records as too large (its
max.message.bytes) gets their coordinates-only records instead.
"""
from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Sequence

from actors import controller_client
from actors.security.inter_broker import broker_transport
from actors.partition.log import OffsetOutOfRange
from actors.share_partition.core import DeadLetter, SharePartition
from actors.share_partition.dead_letters import GROUP_ENABLE_CONFIG, dead_letter_records
from actors.share_partition.state_client import BrokerStateConnection
from actors.startup import start_unless_started, succeeded
from protocol.errors import ErrorCode
from protocol.messages import ProduceRequest
from protocol.record_batch import build_batch, decode_records, iter_batches

log = logging.getLogger("kray.share_partition.dead_letters")

DLQ_BATCH_RECORDS_MAX = 500            # DLQ records per Produce request
DLQ_BATCH_BYTES_MAX = 900 * 1024       # a record batch's bytes (below max.message.bytes' 1 MiB default)
DLQ_READ_BYTES = 1024 * 1024           # per log read of the originals (copy.record.enable=true)
DLQ_PRODUCE_TIMEOUT_MS = 30_000
DLQ_TOPIC_REFRESH_S = 5.0              # how long what the controller said about a DLQ topic is used
PRODUCE_VERSION = 9
TOO_LARGE = (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)


@dataclass(frozen=True)
class DlqTarget:
    """Where a DLQ topic's records go now: its partitions' leaders' inter-broker addresses."""
    name: str
    leaders: tuple  # per partition: (host, port), or None without a leader


class DeadLetterWriter:
    """Writes one partition's share groups' dead letters (see the module docstring)."""

    def __init__(self, partition_replica, broker_config: dict, controller):
        self.partition = partition_replica
        self.config = broker_config
        self.controller = controller
        self.targets: dict[str, tuple[float, DlqTarget | str]] = {}  # name -> (when asked, target or why not)
        self.connections: dict[Any, asyncio.Future] = {}
        self.transport = None
        self.warned: set[tuple[str, str]] = set()

    async def write(self, sp: SharePartition, letters: Sequence[DeadLetter], now_ms: int) -> str:
        """'written' once the DLQ records of `letters` are durable; 'skipped' when the group's DLQ
        topic cannot be used (archive them without); raises on a failure worth retrying."""
        name = sp.dead_letter_topic
        target = await self._target(name) if name else "the group has no dead-letter topic now"
        if isinstance(target, str):
            if (sp.group_id, target) not in self.warned:
                self.warned.add((sp.group_id, target))
                log.warning("share group %s: archiving records of %s-%d without a dead-letter record: %s",
                            sp.group_id, self.partition.topic, self.partition.partition, target)
            return "skipped"
        index = self.partition.partition % len(target.leaders)
        address = target.leaders[index]
        if address is None:
            self.targets.pop(name, None)
            raise ConnectionError(f"{name}-{index} has no leader now")
        copy = sp.dead_letter_copy_record
        error = await self._produce(name, index, address, sp, letters, copy, now_ms)
        if error in TOO_LARGE and copy:
            # a copy the DLQ topic refuses as too large would stay ARCHIVING for ever: the
            # coordinates-only records go instead (said once per group and topic)
            if (sp.group_id, name) not in self.warned:
                self.warned.add((sp.group_id, name))
                log.warning("share group %s: %s refused copies of records of %s-%d as too large (%s); writing "
                            "their coordinates only", sp.group_id, name, self.partition.topic,
                            self.partition.partition, ErrorCode(error).name)
            error = await self._produce(name, index, address, sp, letters, False, now_ms)
        if error:
            self.targets.pop(name, None)  # a leader moved, or the topic went: ask again
            raise RuntimeError(f"producing to {name}-{index}: {ErrorCode(error).name}")
        return "written"

    async def _produce(self, name: str, index: int, address, sp: SharePartition, letters: Sequence[DeadLetter],
                       copy: bool, now_ms: int) -> int:
        """One Produce (acks=all) of the DLQ records of `letters`: its error code."""
        originals = self._originals(letters) if copy else None
        records = dead_letter_records(sp.group_id, self.partition.topic, self.partition.partition, letters,
                                      copy_record=copy, originals=originals, now_ms=now_ms)
        request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=DLQ_PRODUCE_TIMEOUT_MS, topic_data=[
            ProduceRequest.TopicProduceData(name=name, partition_data=[ProduceRequest.PartitionProduceData(
                index=index, records=_batches(records))])])
        try:
            connection = await self._connection(address)
            response = await connection.call(request, PRODUCE_VERSION, DLQ_PRODUCE_TIMEOUT_MS / 1000 + 5)
        except Exception:
            self.targets.pop(name, None)
            raise
        return response.responses[0].partition_responses[0].error_code

    def _originals(self, letters: Sequence[DeadLetter]) -> dict[int, Any]:
        """The original records of `letters` (in offset order), offset -> Record, read from this
        partition's log in one pass over the batches they span, each batch decoded once (what
        retention or compaction removed is absent)."""
        core = self.partition.core
        firsts = [letter.first_offset for letter in letters]
        lo, hi = letters[0].first_offset, letters[-1].last_offset

        def wanted(offset: int) -> bool:
            k = bisect_right(firsts, offset) - 1
            return k >= 0 and offset <= letters[k].last_offset

        out: dict[int, Any] = {}
        offset = lo
        while offset <= hi:
            try:
                data = core.log.read(offset, DLQ_READ_BYTES, max_offset=core.high_watermark)
            except (OffsetOutOfRange, OSError):
                break
            moved = False
            for header in iter_batches(data):
                if header.last_offset < offset:
                    continue
                k = bisect_right(firsts, header.last_offset) - 1  # the last letter starting in or before it
                if not header.is_control and k >= 0 and letters[k].last_offset >= max(header.base_offset, lo):
                    for record in decode_records(header):
                        if wanted(record.offset):
                            out[record.offset] = record
                offset, moved = header.last_offset + 1, True
                if offset > hi:
                    break
            if not moved:
                break
        return out

    async def _target(self, name: str) -> DlqTarget | str:
        known = self.targets.get(name)
        if known is not None and time.monotonic() - known[0] < DLQ_TOPIC_REFRESH_S:
            return known[1]
        timeout_s = controller_client.socket_timeout_s(self.config)
        image = await controller_client.call(self.controller, "image", timeout_s=timeout_s)
        topic = image.topics.get(name)
        if topic is None and self.config.get("errors.deadletterqueue.auto.create.topics.enable") in (True, "true"):
            replicas = max(1, min(int(self.config.get("default.replication.factor", 1)), len(image.brokers)))
            error, message, _ = await controller_client.call(
                self.controller, "create_topic", name, int(self.config.get("num.partitions", 1)), replicas,
                {GROUP_ENABLE_CONFIG: "true"}, timeout_s=timeout_s)
            if error and error != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise RuntimeError(f"creating the dead-letter topic {name}: {message}")
            log.info("created the dead-letter topic %s (errors.deadletterqueue.auto.create.topics.enable)", name)
            image = await controller_client.call(self.controller, "image", timeout_s=timeout_s)
            topic = image.topics.get(name)
        if topic is None:
            target: DlqTarget | str = (f"the dead-letter topic {name} does not exist and "
                                       "errors.deadletterqueue.auto.create.topics.enable is false")
        elif topic.configs.get(GROUP_ENABLE_CONFIG) not in (True, "true"):
            target = f"the topic {name} does not have {GROUP_ENABLE_CONFIG}=true"
        else:
            leaders = []
            for p in topic.partitions:
                info = image.brokers.get(p.leader)
                leaders.append(None if info is None else (info.host, info.port))
            target = DlqTarget(name, tuple(leaders))
        self.targets[name] = (time.monotonic(), target)
        return target

    async def _connection(self, address) -> BrokerStateConnection:
        opening = self.connections.get(address)
        if opening is not None and succeeded(opening) and not opening.result().usable:
            opening = None
        opening = self.connections[address] = start_unless_started(opening, lambda: self._connect(address))
        try:
            return await asyncio.shield(opening)
        except Exception:
            self.connections.pop(address, None)
            raise

    async def _connect(self, address) -> BrokerStateConnection:
        if self.transport is None:
            self.transport = broker_transport(self.config)
        ssl_context, login = self.transport
        return await BrokerStateConnection.open(*address, DLQ_PRODUCE_TIMEOUT_MS / 1000, ssl_context, login)

    def close(self) -> None:
        for opening in self.connections.values():
            if succeeded(opening):
                opening.result().close()


def _batches(records: list[tuple]) -> bytes:
    """`records` as v2 record batches of at most DLQ_BATCH_BYTES_MAX bytes (about: a record larger
    than that is a batch of its own), concatenated."""
    out, chunk, chunk_bytes = [], [], 0
    for record in records:
        size = 64 + sum(len(x) for x in (record[0] or b"", record[1] or b"")) + sum(
            len(k) + len(v or b"") + 8 for k, v in record[2])
        if chunk and chunk_bytes + size > DLQ_BATCH_BYTES_MAX:
            out.append(build_batch(chunk))
            chunk, chunk_bytes = [], 0
        chunk.append(record)
        chunk_bytes += size
    if chunk:
        out.append(build_batch(chunk))
    return b"".join(out)
