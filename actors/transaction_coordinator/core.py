"""TransactionCoordinatorCore: the transactions of one `__transaction_state` partition, Ray-free and clock-free.

Every operation takes a typed input and `now_ms`, checks it, and returns a `CoordinatorResult`
(actors/coordinator_result.py): the records to append to the partition, and the response, a `TxnResponse`: the
answer, and the markers to send to partition leaders once the records are durable. The state is applied at once, with the same
record replay reads; the transactional ids written are *pending* until the shell calls `on_appended` (a request
for a pending id is answered CONCURRENT_TRANSACTIONS, as Kafka answers while a transition awaits its append). The
shell appends, calls `on_appended`, then answers and sends the markers (never before the Prepare record is
durable). If an append fails, the core is ahead of the log: drop it and replay the partition. A new leader replays
the partition into a fresh core (`replay`) and sends `markers_to_resend()`.

Kafka behaviour followed (TransactionCoordinator, TransactionMetadata, TransactionStateManager; trunk d79bd502ec7f),
checked step by step against Apache Kafka 4.4 (tests/kafka/txn_script.py), for both transaction versions:

* version 1 (KIP-98 + KIP-360): the epoch is bumped by InitProducerId and by a fence, never at the end of a
  transaction; the client adds every partition with AddPartitionsToTxn (v0-3) and the group with AddOffsetsToTxn.
* version 2 (KIP-890 part 2, Kafka 4's default; the broker finalizes `transaction.version` 2): every EndTxn (v5+)
  bumps the epoch, and its markers carry the new epoch, so a zombie of the old one is fenced at every partition;
  partitions are added implicitly by transactional Produce v12+ and TxnOffsetCommit v5+ (the gateway and the group
  coordinator send `AddPartitions` with `transaction_version` 2); an EndTxn(abort) with no transaction open ends an
  empty transaction (its epoch bumped); an EndTxn retried with the epoch before its bump is answered as done; an
  exhausted epoch takes the next producer id at the end (`new_producer_id`, answered with epoch 0). Which version a
  transaction follows is the one its last add or end came with (`client_transaction_version`, in its record).

* InitProducerId: a new id gets `new_producer_id` (the shell asks the controller for one beforehand; unused, it is
  wasted, as ids are 64-bit) and epoch 0. An existing one in Empty/Complete* gets its epoch + 1, or, once the
  epoch is exhausted (>= 32766), a new producer id with epoch 0 (KIP-360). With the producer's current id and
  epoch (KIP-360), a retry whose bump was already made is answered with the current epoch (from memory only: the
  last epoch is not in the record, as in Kafka), anything else is PRODUCER_FENCED. While a transaction is Ongoing
  it is fenced (epoch + 1) and aborted, answered CONCURRENT_TRANSACTIONS (the producer retries); while one is
  Prepare*, CONCURRENT_TRANSACTIONS.
* `transaction.timeout.ms` must be in 1..`transaction.max.timeout.ms`, else INVALID_TRANSACTION_TIMEOUT.
* AddPartitionsToTxn / AddOffsetsToTxn (the group's `__consumer_offsets` partition): unknown id or another producer
  id -> INVALID_PRODUCER_ID_MAPPING; another epoch -> PRODUCER_FENCED; Prepare* -> CONCURRENT_TRANSACTIONS;
  partitions already in the Ongoing transaction -> no record. The transaction starts (start time) at its first
  partition. Verification (KIP-890 part 1, v4 `verify_only`) writes nothing: TRANSACTION_ABORTABLE for a
  partition not in the transaction.
* EndTxn: Ongoing -> Prepare{Commit,Abort} + markers; a retry after completion (same result) -> NONE; the same
  result while Prepare* -> CONCURRENT_TRANSACTIONS; anything else INVALID_TXN_STATE.
* Markers written on every partition -> Complete{Commit,Abort}.
* `abort_timed_out`: an Ongoing transaction older than its timeout is fenced (epoch + 1) and aborted.
* `expire_transactional_ids`: an id idle in Empty/Complete* for `transactional.id.expiration.ms` is removed (a
  tombstone).
* Epoch errors are PRODUCER_FENCED; `client_error` turns them into INVALID_PRODUCER_EPOCH for the request versions
  that predate PRODUCER_FENCED, as KafkaApis does.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable, NamedTuple

from actors.coordinator_result import CoordinatorResult
from protocol.errors import ErrorCode

from .records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnMetadata, decode_record, encode_record
from .states import EXPIRATION_ALLOWED, STATE_BY_NAME, STATE_NAMES, TxnState, check_transition

__all__ = ["SHORT_MAX", "CONSUMER_OFFSETS_TOPIC", "TxnConfig", "InitProducerId", "AddPartitions", "AddOffsets",
           "EndTxn", "MarkersWritten", "Markers", "TxnResponse", "TxnResult", "ListedTransaction", "ListResult",
           "TransactionCoordinatorCore", "epoch_exhausted", "client_error"]

SHORT_MAX = 32767
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000             # transaction.max.timeout.ms
DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS = 604_800_000     # transactional.id.expiration.ms (7 days)

TopicPartition = tuple[str, int]
E = ErrorCode
_PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
# api key -> the first version that knows PRODUCER_FENCED (older ones get INVALID_PRODUCER_EPOCH)
_PRODUCER_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}


def epoch_exhausted(producer_epoch: int) -> bool:
    """No epoch left to bump to (Kafka keeps Short.MAX_VALUE itself for the partitions' fence)."""
    return producer_epoch >= SHORT_MAX - 1


def client_error(api_key: int, api_version: int, error: ErrorCode) -> ErrorCode:
    if error == E.PRODUCER_FENCED and api_version < _PRODUCER_FENCED_SINCE.get(api_key, 0):
        return E.INVALID_PRODUCER_EPOCH
    return error


@dataclass(frozen=True, slots=True)
class TxnConfig:
    transaction_max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS
    transactional_id_expiration_ms: int = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS

    @classmethod
    def from_configs(cls, configs) -> "TxnConfig":
        """From broker configs by Kafka's keys (missing keys take Kafka's defaults; both must be at least 1)."""
        values = {}
        for key, name, default in (("transaction.max.timeout.ms", "transaction_max_timeout_ms",
                                    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS),
                                   ("transactional.id.expiration.ms", "transactional_id_expiration_ms",
                                    DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS)):
            value = int(configs.get(key, default))
            if value < 1:
                raise ValueError(f"Invalid value {value} for configuration {key}: Value must be at least 1")
            values[name] = value
        return cls(**values)


# ---- inputs ------------------------------------------------------------------------------------------------------

class InitProducerId(NamedTuple):
    transactional_id: str
    transaction_timeout_ms: int
    new_producer_id: int                  # a fresh id from the controller, used for a new id or after exhaustion
    producer_id: int = NO_PRODUCER_ID     # KIP-360: the producer's current id and epoch, when it has them
    producer_epoch: int = NO_PRODUCER_EPOCH


class AddPartitions(NamedTuple):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    verify_only: bool = False             # KIP-890 part 1: a partition leader asks, nothing is added
    transaction_version: int = 0          # 2: an implicit add (transactional Produce v12+, TxnOffsetCommit v5+)


class AddOffsets(NamedTuple):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    offsets_partition: int                # the group's __consumer_offsets partition (the shell maps it)


class EndTxn(NamedTuple):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    transaction_version: int = 0          # 2: EndTxn v5+, the epoch bumped at the end
    new_producer_id: int = NO_PRODUCER_ID  # version 2 with the epoch exhausted: the id to continue with


class MarkersWritten(NamedTuple):
    """Every partition of `Markers` has its marker (or is gone): the shell's report."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


# ---- outputs -----------------------------------------------------------------------------------------------------

class Markers(NamedTuple):
    """WriteTxnMarkers to send to the leaders of `partitions` (grouped by leader by the shell)."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


class TxnResponse(NamedTuple):
    """What an operation answers (the error, the producer id and epoch to go on with, an error per partition of an
    add), and `markers`: the WriteTxnMarkers the shell sends once the operation's records are durable (the client's
    answer never carries them)."""
    error: ErrorCode = E.NONE
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partition_errors: dict[TopicPartition, ErrorCode] | None = None
    markers: tuple[Markers, ...] = ()


TxnResult = CoordinatorResult[TxnResponse]


def _result(records: Iterable[tuple[bytes, bytes | None]] = (), **response) -> TxnResult:
    return CoordinatorResult(list(records), TxnResponse(**response))


class ListedTransaction(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str


class ListResult(NamedTuple):
    error: ErrorCode
    transactions: list[ListedTransaction]
    unknown_state_filters: list[str]


def _fail(error: ErrorCode, partitions: Iterable[TopicPartition] = ()) -> TxnResult:
    return _result(error=error, partition_errors={tp: error for tp in partitions} or None)


# ---- the core ----------------------------------------------------------------------------------------------------

class TransactionCoordinatorCore:
    def __init__(self, config: TxnConfig = TxnConfig(), coordinator_epoch: int = 0):
        self.config = config
        self.coordinator_epoch = coordinator_epoch  # the leader epoch of this __transaction_state partition
        self.transactions: dict[str, TxnMetadata] = {}
        self.pending: set[str] = set()

    # -- transitions: every change goes through here --------------------------------------------------------------

    def _transit(self, old: TxnMetadata, new: TxnMetadata) -> tuple[bytes, bytes | None]:
        check_transition(old.state, new.state)
        if new.producer_id < 0 or new.producer_epoch < 0:
            raise ValueError(f"{new.transactional_id}: illegal producer id/epoch "
                             f"{new.producer_id}/{new.producer_epoch}")
        new = replace(new, prev_producer_id=old.producer_id)  # as Kafka: the id before the latest transition
        self.transactions[new.transactional_id] = new
        self.pending.add(new.transactional_id)
        return encode_record(new, new.transactional_id)

    def _fence_and_abort(self, meta: TxnMetadata, now_ms: int) -> tuple[tuple, Markers]:
        """Ongoing -> PrepareEpochFence -> PrepareAbort with the epoch bumped: the producer is fenced, the
        markers carry the new epoch (so its zombie is fenced at the partitions too)."""
        check_transition(meta.state, TxnState.PREPARE_EPOCH_FENCE)
        epoch = meta.producer_epoch if meta.producer_epoch == SHORT_MAX else meta.producer_epoch + 1
        fenced = replace(meta, state=TxnState.PREPARE_EPOCH_FENCE, producer_epoch=epoch,
                         last_producer_epoch=NO_PRODUCER_EPOCH)
        record = self._transit(fenced, replace(fenced, state=TxnState.PREPARE_ABORT,
                                               txn_last_update_timestamp_ms=now_ms))
        return record, self._markers(self.transactions[meta.transactional_id])

    def _markers(self, meta: TxnMetadata) -> Markers:
        return Markers(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                       meta.state == TxnState.PREPARE_COMMIT, self.coordinator_epoch, tuple(sorted(meta.partitions)))

    def on_appended(self, transactional_ids: Iterable[str]) -> None:
        """The records of these ids are durable: they take requests again."""
        self.pending.difference_update(transactional_ids)

    # -- InitProducerId -------------------------------------------------------------------------------------------

    def init_producer_id(self, request: InitProducerId, now_ms: int) -> TxnResult:
        txn_id, timeout_ms = request.transactional_id, request.transaction_timeout_ms
        if not txn_id:
            return _fail(E.INVALID_REQUEST)
        if (request.producer_id == NO_PRODUCER_ID) != (request.producer_epoch == NO_PRODUCER_EPOCH):
            return _fail(E.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.transaction_max_timeout_ms:
            return _fail(E.INVALID_TRANSACTION_TIMEOUT)
        if txn_id in self.pending:
            return _fail(E.CONCURRENT_TRANSACTIONS)
        meta = self.transactions.get(txn_id) or TxnMetadata(
            txn_id, request.new_producer_id, NO_PRODUCER_EPOCH, timeout_ms, TxnState.EMPTY, now_ms)
        expected = None if request.producer_id == NO_PRODUCER_ID else (request.producer_id, request.producer_epoch)
        if expected is not None and not (
                meta.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == meta.producer_id
                or (expected[0] == meta.prev_producer_id and epoch_exhausted(expected[1]))):
            return _fail(E.PRODUCER_FENCED)
        if meta.state in _PREPARE:
            return _fail(E.CONCURRENT_TRANSACTIONS)
        if meta.state == TxnState.ONGOING:
            record, markers = self._fence_and_abort(meta, now_ms)
            return _result((record,), markers=(markers,), error=E.CONCURRENT_TRANSACTIONS)
        fresh = dict(state=TxnState.EMPTY, txn_timeout_ms=timeout_ms, partitions=frozenset(),
                     txn_start_timestamp_ms=-1, txn_last_update_timestamp_ms=now_ms)
        if epoch_exhausted(meta.producer_epoch) and (expected is None or expected[1] == meta.producer_epoch):
            new = replace(meta, producer_id=request.new_producer_id, producer_epoch=0,
                          last_producer_epoch=NO_PRODUCER_EPOCH if expected is None else meta.producer_epoch, **fresh)
        elif expected is None:
            new = replace(meta, producer_epoch=meta.producer_epoch + 1, last_producer_epoch=NO_PRODUCER_EPOCH, **fresh)
        elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
            new = replace(meta, producer_epoch=meta.producer_epoch + 1, last_producer_epoch=meta.producer_epoch,
                          **fresh)
        elif expected[1] == meta.last_producer_epoch:  # a retry of a bump already made
            new = replace(meta, **fresh)
        else:
            return _fail(E.PRODUCER_FENCED)
        record = self._transit(meta, new)
        return _result((record,), producer_id=new.producer_id, producer_epoch=new.producer_epoch)

    # -- AddPartitionsToTxn, AddOffsetsToTxn ----------------------------------------------------------------------

    def _producer_of(self, txn_id: str, producer_id: int, producer_epoch: int) -> ErrorCode | TxnMetadata:
        """The transaction of this producer (id and epoch), else the error that says why not."""
        meta = self.transactions.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return E.PRODUCER_FENCED
        return meta

    def _check_producer(self, txn_id: str, producer_id: int, producer_epoch: int) -> ErrorCode | TxnMetadata:
        meta = self._producer_of(txn_id, producer_id, producer_epoch)
        if not isinstance(meta, ErrorCode) and meta.state in _PREPARE:
            return E.CONCURRENT_TRANSACTIONS
        return meta

    def add_partitions(self, request: AddPartitions, now_ms: int) -> TxnResult:
        partitions = tuple(request.partitions)
        if not request.transactional_id:
            return _fail(E.INVALID_REQUEST, partitions)
        if request.verify_only:
            return self._verify(request, partitions)
        if request.transactional_id in self.pending:
            return _fail(E.CONCURRENT_TRANSACTIONS, partitions)
        meta = self._check_producer(request.transactional_id, request.producer_id, request.producer_epoch)
        if isinstance(meta, ErrorCode):
            return _fail(meta, partitions)
        ok = {tp: E.NONE for tp in partitions}
        if meta.state == TxnState.ONGOING and meta.partitions.issuperset(partitions):
            return _result(partition_errors=ok)
        starts = meta.state != TxnState.ONGOING
        new = replace(meta, state=TxnState.ONGOING, partitions=meta.partitions | frozenset(partitions),
                      txn_start_timestamp_ms=now_ms if starts else meta.txn_start_timestamp_ms,
                      txn_last_update_timestamp_ms=now_ms, client_transaction_version=request.transaction_version)
        return _result((self._transit(meta, new),), partition_errors=ok)

    def _verify(self, request: AddPartitions, partitions: tuple) -> TxnResult:
        meta = self._check_producer(request.transactional_id, request.producer_id, request.producer_epoch)
        if isinstance(meta, ErrorCode):
            return _fail(meta, partitions)
        return _result(partition_errors={tp: E.NONE if tp in meta.partitions else E.TRANSACTION_ABORTABLE
                                         for tp in partitions})

    def add_offsets(self, request: AddOffsets, now_ms: int) -> TxnResult:
        result = self.add_partitions(AddPartitions(request.transactional_id, request.producer_id,
                                                   request.producer_epoch,
                                                   ((CONSUMER_OFFSETS_TOPIC, request.offsets_partition),)), now_ms)
        return CoordinatorResult(result.records, result.response._replace(partition_errors=None))

    # -- EndTxn and the markers -----------------------------------------------------------------------------------

    def needs_new_producer_id(self, request: EndTxn) -> bool:
        """Whether this EndTxn, if it ends a transaction, continues with a new producer id (version 2 with the
        epoch exhausted): the shell allocates one first."""
        meta = self.transactions.get(request.transactional_id)
        return (request.transaction_version >= 2 and meta is not None and meta.producer_id == request.producer_id
                and epoch_exhausted(meta.producer_epoch))

    def end_txn(self, request: EndTxn, now_ms: int) -> TxnResult:
        if not request.transactional_id:
            return _fail(E.INVALID_REQUEST)
        meta = self.transactions.get(request.transactional_id)
        if meta is None:
            return _fail(E.INVALID_PRODUCER_ID_MAPPING)
        committed, state, epoch = request.committed, meta.state, request.producer_epoch
        bumps = request.transaction_version >= 2
        v2 = meta.client_transaction_version >= 2
        # version 2 retries: the end that was answered bumped the epoch (or rotated the producer id past an
        # exhausted one), so the retry carries the epoch before it
        retry_after_bump = v2 and meta.producer_epoch == epoch + 1
        retry_after_rotation = (v2 and state in _COMPLETE and meta.prev_producer_id == request.producer_id
                                and epoch == SHORT_MAX - 1 and meta.producer_epoch == 0)
        if meta.producer_id != request.producer_id and not retry_after_rotation:
            return _fail(E.INVALID_PRODUCER_ID_MAPPING)
        # version 2: an abort with nothing open ends an empty transaction (Kafka 4.4 bumps the epoch for it)
        empty_abort = bumps and not committed and state in (TxnState.EMPTY, *_COMPLETE) and epoch == meta.producer_epoch
        if v2 and state in _PREPARE:
            valid = retry_after_bump
        elif v2 and state in _COMPLETE:  # (the current epoch too, as Kafka 4.4 answers: tests/kafka/txn_script.py)
            valid = retry_after_bump or retry_after_rotation or epoch == meta.producer_epoch
        else:
            valid = epoch == meta.producer_epoch
        if not valid:
            return _fail(E.PRODUCER_FENCED)
        if request.transactional_id in self.pending:
            return _fail(E.CONCURRENT_TRANSACTIONS)
        if state == TxnState.ONGOING or empty_abort:
            return self._prepare_end(meta, request, now_ms)
        same_result = (state in (TxnState.COMPLETE_COMMIT, TxnState.PREPARE_COMMIT)) == committed
        if state in _COMPLETE and same_result:
            return _result(producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)  # a retry
        if state in _PREPARE and same_result:
            return _fail(E.CONCURRENT_TRANSACTIONS)
        return _fail(E.INVALID_TXN_STATE)

    def _prepare_end(self, meta: TxnMetadata, request: EndTxn, now_ms: int) -> TxnResult:
        """Ongoing (or, version 2, nothing open and aborted) -> Prepare{Commit,Abort}, with version 2's bump: the
        markers carry the new epoch; the answer is the epoch (or, the epoch exhausted, the producer id) to go on
        with."""
        state = TxnState.PREPARE_COMMIT if request.committed else TxnState.PREPARE_ABORT
        changes = dict(state=state, txn_last_update_timestamp_ms=now_ms)
        answer = (meta.producer_id, meta.producer_epoch)
        if request.transaction_version >= 2:
            changes.update(producer_epoch=meta.producer_epoch + 1, last_producer_epoch=meta.producer_epoch,
                           client_transaction_version=request.transaction_version)
            answer = (meta.producer_id, meta.producer_epoch + 1)
            if epoch_exhausted(meta.producer_epoch):
                if request.new_producer_id == NO_PRODUCER_ID:
                    return _fail(E.COORDINATOR_NOT_AVAILABLE)  # the shell had no id to give: the client retries
                changes.update(next_producer_id=request.new_producer_id)
                answer = (request.new_producer_id, 0)
            if meta.state != TxnState.ONGOING:
                changes.update(partitions=frozenset(), txn_start_timestamp_ms=now_ms)
        new = replace(meta, **changes)
        record = self._transit(meta, new)
        return _result((record,), markers=(self._markers(self.transactions[meta.transactional_id]),),
                       producer_id=answer[0], producer_epoch=answer[1])

    def markers_written(self, report: MarkersWritten, now_ms: int) -> TxnResult:
        meta = self._producer_of(report.transactional_id, report.producer_id, report.producer_epoch)
        if isinstance(meta, ErrorCode):
            return _fail(meta)
        if report.transactional_id in self.pending:
            return _fail(E.CONCURRENT_TRANSACTIONS)
        expected = TxnState.PREPARE_COMMIT if report.committed else TxnState.PREPARE_ABORT
        if meta.state != expected:
            return _fail(E.INVALID_TXN_STATE)
        new = replace(meta, state=TxnState.COMPLETE_COMMIT if report.committed else TxnState.COMPLETE_ABORT,
                      partitions=frozenset(), next_producer_id=NO_PRODUCER_ID, txn_last_update_timestamp_ms=now_ms)
        if meta.next_producer_id != NO_PRODUCER_ID:  # version 2, the epoch exhausted: on with the next id
            new = replace(new, producer_id=meta.next_producer_id, producer_epoch=0,
                          last_producer_epoch=NO_PRODUCER_EPOCH)
        return _result((self._transit(meta, new),))

    # -- what the shell polls -------------------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        """The earliest time an Ongoing transaction times out (the shell also polls expiry, hourly in Kafka)."""
        deadlines = [m.txn_start_timestamp_ms + m.txn_timeout_ms for m in self.transactions.values()
                     if m.state == TxnState.ONGOING]
        return min(deadlines, default=None)

    def abort_timed_out(self, now_ms: int) -> TxnResult:
        records, markers = [], []
        for txn_id, meta in sorted(self.transactions.items()):
            if (meta.state == TxnState.ONGOING and txn_id not in self.pending
                    and meta.txn_start_timestamp_ms + meta.txn_timeout_ms < now_ms):
                record, marker = self._fence_and_abort(meta, now_ms)
                records.append(record)
                markers.append(marker)
        return _result(records, markers=tuple(markers))

    def expire_transactional_ids(self, now_ms: int) -> TxnResult:
        cutoff_ms = now_ms - self.config.transactional_id_expiration_ms
        records = []
        for txn_id, meta in sorted(self.transactions.items()):
            if (meta.state in EXPIRATION_ALLOWED and txn_id not in self.pending
                    and meta.txn_last_update_timestamp_ms <= cutoff_ms):
                check_transition(meta.state, TxnState.DEAD)
                del self.transactions[txn_id]
                self.pending.add(txn_id)
                records.append(encode_record(None, txn_id))
        return _result(records)

    # -- replay ---------------------------------------------------------------------------------------------------

    def replay(self, key_bytes, value_bytes) -> None:
        """Apply one record of the partition, oldest first (a later record of an id replaces it)."""
        txn_id, meta = decode_record(key_bytes, value_bytes)
        if meta is None:
            self.transactions.pop(txn_id, None)
        else:
            self.transactions[txn_id] = meta

    def markers_to_resend(self) -> list[Markers]:
        """After a replay: the transactions a previous coordinator left half-way (Prepare*)."""
        return [self._markers(m) for _, m in sorted(self.transactions.items()) if m.state in _PREPARE]

    # -- DescribeTransactions, ListTransactions -------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        if not transactional_id:
            return E.INVALID_REQUEST, None
        meta = self.transactions.get(transactional_id)
        return (E.TRANSACTIONAL_ID_NOT_FOUND, None) if meta is None else (E.NONE, meta)

    def list_transactions(self, now_ms: int, state_filters: Iterable[str] = (), producer_id_filters: Iterable[int] = (),
                          duration_filter_ms: int = -1, transactional_id_pattern: str | None = None) -> ListResult:
        state_filters, producer_ids = list(state_filters), set(producer_id_filters)
        states = {STATE_BY_NAME[n] for n in state_filters if n in STATE_BY_NAME}
        unknown = [n for n in state_filters if n not in STATE_BY_NAME]
        try:
            pattern = re.compile(transactional_id_pattern) if transactional_id_pattern else None
        except re.error:
            return ListResult(E.INVALID_REGULAR_EXPRESSION, [], unknown)
        out = []
        for txn_id, meta in sorted(self.transactions.items()):
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if state_filters and meta.state not in states:
                continue
            if duration_filter_ms >= 0 and now_ms - meta.txn_start_timestamp_ms <= duration_filter_ms:
                continue
            if pattern is not None and not pattern.fullmatch(txn_id):
                continue
            out.append(ListedTransaction(txn_id, meta.producer_id, STATE_NAMES[meta.state]))
        return ListResult(E.NONE, out, unknown)
