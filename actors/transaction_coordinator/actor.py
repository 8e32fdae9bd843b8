"""The transaction coordinator's Ray shell: the leader actor of one `__transaction_state` partition.

It is that partition's PartitionReplica (the log, replicated like any other) plus the coordinator that writes it, so
the coordinator moves with the partition's leadership and its appends stay in process. In each leader term it
replays the partition into a fresh TransactionCoordinatorCore (coordinator epoch = the leader epoch) and
resends the markers of the transactions a previous leader left in Prepare*. Each operation steps the core
synchronously, appends its result's records (acks=all, through CoordinatorLog), calls `on_appended`, then answers
the result's response and hands the response's markers to the MarkerSender (marker_sender.py: WriteTxnMarkers over the brokers' listeners),
whose reports become Complete* records. A timer aborts transactions past their timeout and expires idle
transactional ids. A failed append leaves the core ahead of the log: it is dropped and replayed. The partition is
replayed as soon as this replica leads it (and again soon after a drop), as Kafka loads on election: a transaction
a dead coordinator left in Prepare* gets its markers without waiting for a client's request.

The gateway sends the per-transaction requests (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) as TXN_COORDINATOR
frames over its Unix socket to the shard that hosts this replica (`txn_operation`), as produce's records go: no Ray
call on a transaction's path. InitProducerId and the admin APIs (rare) are Ray calls.
"""
from __future__ import annotations

import asyncio
import logging
import time

from actors import controller_client, internal_topics
from actors.coordinator_log import CoordinatorLog, CoordinatorLogError, ShardHost
from actors.security.inter_broker import broker_transport
from actors.partition.actor import PartitionReplica
from protocol.errors import ErrorCode

from .core import (AddOffsets, AddPartitions, EndTxn, InitProducerId, ListResult, MarkersWritten,
                   TransactionCoordinatorCore, TxnConfig, TxnResponse, TxnResult, epoch_exhausted)
from .marker_sender import GONE, MARKER_REQUEST_TIMEOUT_S, MarkerConnection, MarkerSender
from .records import decode_record
from .wire import txn_answer

log = logging.getLogger("kray.transaction_coordinator")
E = ErrorCode
TIMER_RETRY_S = 1.0
# AddPartitionsToTxn / AddOffsetsToTxn for a transactional id whose previous transaction still has markers out
# (Prepare*), or whose record is being appended, waits up to this long for that to end before answering
# CONCURRENT_TRANSACTIONS: a producer starts its next transaction right after EndTxn's answer, and librdkafka
# retries CONCURRENT_TRANSACTIONS only after retry.backoff.ms (100 ms), where the markers take a few ms
CONCURRENT_WAIT_S = 1.0

# Kafka's TransactionStateManager: how an append error reaches the client (retriable either way: the client finds
# the coordinator again, or retries where it is)
_APPEND_ERRORS = {E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
                  E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
                  E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
                  E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
                  E.COORDINATOR_NOT_AVAILABLE: E.COORDINATOR_NOT_AVAILABLE,
                  E.COORDINATOR_LOAD_IN_PROGRESS: E.COORDINATOR_LOAD_IN_PROGRESS,
                  E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
                  E.FENCED_LEADER_EPOCH: E.NOT_COORDINATOR,
                  E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
                  E.NOT_COORDINATOR: E.NOT_COORDINATOR}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def append_error(error_code: int) -> ErrorCode:
    """What the client is answered when the coordinator's append failed with `error_code`."""
    return _APPEND_ERRORS.get(error_code, E.UNKNOWN_SERVER_ERROR)


def transactional_ids(records) -> list[str]:
    return [decode_record(key, value)[0] for key, value in records]


class TransactionCoordinator(PartitionReplica):
    def __init__(self, spec: dict, host):
        super().__init__(spec, host)
        self.config = spec["broker_config"]
        self.controller = spec["controller"]
        self.txn_config = TxnConfig.from_configs(self.config)
        self.expire_interval_ms = int(self.config.get(
            "transaction.remove.expired.transaction.cleanup.interval.ms", 3_600_000))
        self.abort_interval_ms = int(self.config.get(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms", 10_000))
        self.txn_log = CoordinatorLog(self)
        self.host = ShardHost(self.txn_log, self._build)
        self.sender: MarkerSender | None = None
        self.image = None
        self.unknown_topics: dict[str, int] = {}  # topic -> the image version it was first missing from
        self.transport = None
        self.timer: asyncio.Task | None = None
        self.wake = asyncio.Event()
        self.appended: dict[str, asyncio.Event] = {}  # transactional id -> set at the next append of its records

    # ---- loading, leadership -------------------------------------------------------------------------------------
    @property
    def shard(self) -> TransactionCoordinatorCore | None:
        return self.host.shard

    def _leadership_changed(self, leading: bool) -> None:
        super()._leadership_changed(leading)
        self._drop()  # the next leader term replays the partition afresh
        if leading:  # at once, as Kafka loads on election: the markers a previous leader left are sent again now
            self._start_timer()
            self.wake.set()

    def _start_timer(self) -> None:
        if self.timer is None:
            self.timer = asyncio.ensure_future(self._timer_loop())

    def _drop(self) -> None:
        """Forget the core (memory may be ahead of the log, or another broker leads): replayed on next use."""
        self.host.invalidate()
        if self.sender is not None:
            self.sender.close()
            self.sender = None
        self.wake.set()  # the timer loop reloads it where this replica still leads

    async def _ready(self) -> TransactionCoordinatorCore:
        if self.replica.leader_epoch < 0:  # hosted just now (its shard restarted): not told its state yet
            raise CoordinatorLogError(E.COORDINATOR_LOAD_IN_PROGRESS, "the coordinator is starting; retry")
        if not self.replica.is_leader:
            raise CoordinatorLogError(E.NOT_COORDINATOR, "this replica does not lead the partition now")
        core = await self.host.ready()
        self._start_timer()
        return core

    async def _build(self, records) -> TransactionCoordinatorCore:
        core = TransactionCoordinatorCore(self.txn_config, coordinator_epoch=self.replica.leader_epoch)
        for _offset, key, value in records:
            core.replay(key, value)
        resend = core.markers_to_resend()
        if resend and self.image is None:  # where the partitions' leaders are (fetched when markers need it)
            await self._refresh_metadata()
        if self.sender is not None:
            self.sender.close()
        self.sender = MarkerSender(self._leader_of, self._address_of, self._connect,
                                   self._markers_written_by(core), self._refresh_metadata)
        if resend:
            log.info("%s-%d: resending the markers of %d transactions left half-way", self.topic, self.partition,
                     len(resend))
        for markers in resend:
            self.sender.start(markers)
        return core

    # ---- stepping the core ---------------------------------------------------------------------------------------
    async def _commit(self, core: TransactionCoordinatorCore, result: TxnResult) -> ErrorCode:
        """Append the result's records, mark them durable, hand its markers over; the error to answer."""
        if result.records:
            ids = transactional_ids(result.records)
            try:
                await self.txn_log.append(list(result.records))
            except CoordinatorLogError as e:
                log.warning("%s-%d: append failed (%s); the coordinator reloads from the log", self.topic,
                            self.partition, e)
                if core is self.shard:
                    self._drop()
                self._appended(ids)
                return append_error(e.error_code)
            core.on_appended(ids)
            self._appended(ids)
        if result.response.markers and self.image is None:
            await self._refresh_metadata()
        if core is not self.shard:
            return E.NOT_COORDINATOR  # the partition moved (or reloaded) meanwhile: its new coordinator resends
        for markers in result.response.markers:
            self.sender.start(markers)
        if result.records:
            self.wake.set()  # a transaction may have started: its timeout is a new deadline
        return E.NONE

    def _appended(self, transactional_ids: list[str]) -> None:
        """Wake the requests of these ids waiting in `_run_when_settled`."""
        for transactional_id in transactional_ids:
            waiting = self.appended.pop(transactional_id, None)
            if waiting is not None:
                waiting.set()

    async def _run(self, operation) -> TxnResult:
        """`operation(core)` -> its result, committed; when committing failed, no records and the error."""
        try:
            core = await self._ready()
        except CoordinatorLogError as e:
            return TxnResult([], TxnResponse(error=ErrorCode(e.error_code)))
        result = operation(core)
        error = await self._commit(core, result)
        if error:
            errors = {tp: error for tp in result.response.partition_errors or ()} or None
            return TxnResult([], TxnResponse(error=error, partition_errors=errors))
        return result

    # ---- the operations (Ray calls from the gateway) ---------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int, producer_id: int,
                               producer_epoch: int) -> TxnResponse:
        """InitProducerId of a transactional id. A new id (or one whose epoch is exhausted) takes a fresh producer
        id from the controller first (outside the step: no state change straddles the await)."""
        try:
            core = await self._ready()
        except CoordinatorLogError as e:
            return TxnResponse(error=ErrorCode(e.error_code))
        new_producer_id = -1
        meta = core.transactions.get(transactional_id)
        if transactional_id and (meta is None or epoch_exhausted(meta.producer_epoch)):
            try:
                new_producer_id = await controller_client.call(self.controller, "allocate_producer_id",
                                                               timeout_s=MARKER_REQUEST_TIMEOUT_S)
            except Exception as e:
                log.warning("allocating a producer id failed: %s", e)
                return TxnResponse(error=E.COORDINATOR_NOT_AVAILABLE)
        request = InitProducerId(transactional_id, transaction_timeout_ms, new_producer_id, producer_id,
                                 producer_epoch)
        result = await self._run(lambda c: c.init_producer_id(request, now_ms()) if c is core else
                                 TxnResult([], TxnResponse(error=E.NOT_COORDINATOR)))
        return result.response

    async def add_partitions(self, inputs: list[AddPartitions]) -> list[TxnResponse]:
        """One response per transaction, each with an error for every partition of its input."""
        responses = []
        for i in inputs:
            result = await self._run_when_settled(i.transactional_id,
                                                  lambda core, i=i: core.add_partitions(i, now_ms()))
            response = result.response
            if response.partition_errors is None:
                response = response._replace(partition_errors={tp: response.error for tp in i.partitions})
            responses.append(response)
        return responses

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> TxnResponse:
        partition = internal_topics.group_partition(group_id, int(self.config["offsets.topic.num.partitions"]))
        request = AddOffsets(transactional_id, producer_id, producer_epoch, group_id, partition)
        result = await self._run_when_settled(transactional_id, lambda core: core.add_offsets(request, now_ms()))
        return result.response

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool,
                      transaction_version: int = 0) -> TxnResponse:
        """EndTxn. Version 2 with the epoch exhausted takes a fresh producer id from the controller first (outside
        the step, as InitProducerId)."""
        request = EndTxn(transactional_id, producer_id, producer_epoch, committed, transaction_version)
        try:
            core = await self._ready()
        except CoordinatorLogError as e:
            return TxnResponse(error=ErrorCode(e.error_code))
        if core.needs_new_producer_id(request):
            try:
                request = request._replace(new_producer_id=await controller_client.call(
                    self.controller, "allocate_producer_id", timeout_s=MARKER_REQUEST_TIMEOUT_S))
            except Exception as e:
                log.warning("allocating a producer id failed: %s", e)
                return TxnResponse(error=E.COORDINATOR_NOT_AVAILABLE)
        return (await self._run(lambda c: c.end_txn(request, now_ms()))).response

    async def txn_operation(self, operation: str, args: list) -> list:
        """A TXN_COORDINATOR frame (actors/partition/wire.py) from this broker's gateway: the per-transaction
        requests a client sends (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) over the data path instead of
        a Ray call each; answered as wire.py's txn_answer."""
        if operation == "add_partitions":
            inputs = [AddPartitions(str(t), int(pid), int(epoch), tuple((str(topic), int(p)) for topic, p in tps),
                                    bool(verify), int(version)) for t, pid, epoch, tps, verify, version in args]
            return [txn_answer(response) for response in await self.add_partitions(inputs)]
        if operation == "add_offsets":
            transactional_id, producer_id, producer_epoch, group_id = args
            return txn_answer(await self.add_offsets(str(transactional_id), int(producer_id), int(producer_epoch),
                                                     str(group_id)))
        if operation == "end_txn":
            transactional_id, producer_id, producer_epoch, committed, transaction_version = args
            return txn_answer(await self.end_txn(str(transactional_id), int(producer_id), int(producer_epoch),
                                                 bool(committed), int(transaction_version)))
        raise ValueError(f"unknown transaction coordinator operation {operation!r}")

    async def describe_transactions(self, ids: list[str]) -> list[tuple]:
        """(transactional id, error, TxnMetadata or None) each."""
        try:
            core = await self._ready()
        except CoordinatorLogError as e:
            return [(i, ErrorCode(e.error_code), None) for i in ids]
        return [(i, *core.describe(i)) for i in ids]

    async def list_transactions(self, state_filters: list[str], producer_id_filters: list[int],
                                duration_filter_ms: int, transactional_id_pattern: str | None) -> ListResult:
        try:
            core = await self._ready()
        except CoordinatorLogError as e:
            return ListResult(ErrorCode(e.error_code), [], [])
        return core.list_transactions(now_ms(), state_filters, producer_id_filters, duration_filter_ms,
                                      transactional_id_pattern)

    # ---- markers -------------------------------------------------------------------------------------------------
    def _markers_written_by(self, core: TransactionCoordinatorCore):
        async def written(report: MarkersWritten) -> None:
            if core is not self.shard:
                return  # another term's core: its replay resends and completes
            result = core.markers_written(report, now_ms())
            if result.response.error:
                log.warning("%s: markers written, but %s", report.transactional_id, result.response.error.name)
                return
            error = await self._commit(core, result)
            if error:
                log.warning("%s: writing its Complete record failed (%s); a reload resends its markers",
                            report.transactional_id, error.name)
        return written

    async def _run_when_settled(self, transactional_id: str, operation) -> TxnResult:
        """`_run(operation)`; while it is answered CONCURRENT_TRANSACTIONS (the id's previous transaction still
        has markers out, or one of its records is being appended), once more after each append of the id's records
        (the Complete record among them), for at most CONCURRENT_WAIT_S."""
        deadline = time.monotonic() + CONCURRENT_WAIT_S
        while True:
            result = await self._run(operation)
            remaining = deadline - time.monotonic()
            if result.response.error != E.CONCURRENT_TRANSACTIONS or result.records or remaining <= 0:
                return result  # (records: a timed-out transaction being aborted, answered as it is)
            appended = self.appended.setdefault(transactional_id, asyncio.Event())
            try:
                await asyncio.wait_for(appended.wait(), remaining)
            except asyncio.TimeoutError:
                return result

    def _leader_of(self, tp: tuple[str, int]) -> int | None:
        """The partition's leader broker; None while it has none (or the image does not know its topic yet); GONE
        where its topic is missing from an image newer than the one it was first missing from (deleted)."""
        image, (name, index) = self.image, tp
        if image is None:
            return None  # no metadata yet: the next round refreshes it
        topic = image.topics.get(name)
        if topic is None:
            first_missing = self.unknown_topics.setdefault(name, image.version)
            return GONE if image.version > first_missing else None
        self.unknown_topics.pop(name, None)
        if not 0 <= index < len(topic.partitions):
            return GONE
        leader = topic.partitions[index].leader
        return leader if leader in image.brokers else None

    def _address_of(self, broker_id: int) -> tuple[str, int] | None:
        info = self.image.brokers.get(broker_id) if self.image is not None else None
        return None if info is None else (info.host, info.port)

    async def _connect(self, host: str, port: int) -> MarkerConnection:
        if self.transport is None:
            self.transport = broker_transport(self.config)
        ssl_context, login = self.transport
        return await MarkerConnection.open(host, port, MARKER_REQUEST_TIMEOUT_S, ssl_context, login)

    async def _refresh_metadata(self) -> None:
        try:
            self.image = await controller_client.wait_for_metadata(self.controller, -1, 0)
        except Exception as e:
            log.warning("refreshing metadata for the transaction markers failed: %s", e)

    # ---- timers --------------------------------------------------------------------------------------------------
    async def _timer_loop(self) -> None:
        """Abort transactions past their timeout (at their deadline, polled at least every
        transaction.abort.timed.out.transaction.cleanup.interval.ms) and expire idle transactional ids (every
        transaction.remove.expired.transaction.cleanup.interval.ms)."""
        next_expiry_ms = now_ms() + self.expire_interval_ms
        while True:
            if self.shard is None and self.replica.is_leader:
                try:  # elected, or dropped after a failed append: load now (and resend what was left half-way)
                    await self._ready()
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.info("%s-%d: loading the transaction coordinator: %s; retrying", self.topic,
                             self.partition, e)
                    await asyncio.sleep(TIMER_RETRY_S)
                    continue
            core = self.shard
            deadline_ms = core.next_deadline_ms() if core is not None else None
            wait_ms = min(self.abort_interval_ms, next_expiry_ms - now_ms(),
                          self.abort_interval_ms if deadline_ms is None else deadline_ms + 1 - now_ms())
            try:
                await asyncio.wait_for(self.wake.wait(), max(wait_ms, 1) / 1000)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()
            core = self.shard
            if core is None or not self.replica.is_leader:
                continue
            try:
                if await self._commit(core, core.abort_timed_out(now_ms())):
                    await asyncio.sleep(TIMER_RETRY_S)
                if now_ms() >= next_expiry_ms:
                    next_expiry_ms = now_ms() + self.expire_interval_ms
                    if core is self.shard:
                        await self._commit(core, core.expire_transactional_ids(now_ms()))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s-%d: the transaction timers failed", self.topic, self.partition)
                await asyncio.sleep(TIMER_RETRY_S)

    async def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.sender is not None:
            self.sender.close()
        await super().close()
