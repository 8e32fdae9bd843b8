"""Between Kafka's transaction APIs and the core: requests to typed inputs, TxnResponses to responses, and the
WriteTxnMarkers traffic a coordinator sends to partition leaders. Pure: the shell (next, issue 19) routes, authorizes,
allocates producer ids and awaits appends; this module only translates.

Versions: InitProducerId 0-6 (v6's two-phase commit of KIP-939 is refused as Kafka refuses it when it is off),
AddPartitionsToTxn 0-3 (one transaction, the producer's) and 4-5 (a batch, brokers' KIP-890 verification; v5's adds
are transaction version 2's), EndTxn 0-5 (v5+ is transaction version 2: the epoch bumped, the new one answered),
AddOffsetsToTxn 0-4, WriteTxnMarkers 1-2, DescribeTransactions 0, ListTransactions 0-2. Epoch errors go through
`client_error` (INVALID_PRODUCER_EPOCH for versions that predate PRODUCER_FENCED).
"""
from __future__ import annotations

from typing import Callable, Iterable

from protocol.errors import ErrorCode
from protocol.messages import (AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
                               DescribeTransactionsResponse, EndTxnResponse, InitProducerIdResponse,
                               ListTransactionsResponse, WriteTxnMarkersRequest, WriteTxnMarkersResponse)

from .core import AddPartitions, EndTxn, InitProducerId, ListResult, Markers, MarkersWritten, TxnResponse, client_error
from .records import TxnMetadata
from .states import STATE_NAMES

__all__ = ["INIT_PRODUCER_ID", "ADD_PARTITIONS_TO_TXN", "ADD_OFFSETS_TO_TXN", "END_TXN", "init_producer_id_input",
           "init_producer_id_response", "add_partitions_inputs", "add_partitions_response", "end_txn_input",
           "end_txn_response", "add_offsets_response", "describe_transactions_response",
           "list_transactions_response", "write_txn_markers_requests", "marker_outcome", "MarkerProgress",
           "txn_answer", "txn_response"]

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 22, 24, 25, 26
E = ErrorCode
TopicPartition = tuple[str, int]


def txn_answer(response: TxnResponse) -> list:
    """What the gateway needs of a TxnResponse, for a TXN_COORDINATOR frame's answer: [error, [[topic, partition,
    error]...] or None, producer id, producer epoch] (the last two: what EndTxn v5+ answers; never the markers)."""
    errors = response.partition_errors
    return [int(response.error), None if errors is None else [[t, p, int(e)] for (t, p), e in errors.items()],
            response.producer_id, response.producer_epoch]


def txn_response(answer: list) -> TxnResponse:
    """The TxnResponse (its error, partition errors, producer id and epoch) a TXN_COORDINATOR frame answered."""
    error, errors, producer_id, producer_epoch = answer
    return TxnResponse(error=E(error), partition_errors=None if errors is None else {
        (str(t), int(p)): E(e) for t, p, e in errors}, producer_id=int(producer_id), producer_epoch=int(producer_epoch))


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        out.setdefault(topic, []).append(partition)
    return out


# ---- InitProducerId, EndTxn, AddOffsetsToTxn ---------------------------------------------------------------------

def init_producer_id_input(request, new_producer_id: int) -> InitProducerId | ErrorCode:
    """The core's input for a transactional InitProducerId (a None transactional id is the idempotent path)."""
    if request.enable2_pc:
        return E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # KIP-939 two-phase commit: off, as Kafka's default
    if request.keep_prepared_txn:
        return E.UNSUPPORTED_VERSION
    return InitProducerId(request.transactional_id, request.transaction_timeout_ms, new_producer_id,
                          request.producer_id, request.producer_epoch)


def init_producer_id_response(version: int, response: TxnResponse | ErrorCode) -> InitProducerIdResponse:
    if isinstance(response, ErrorCode):
        response = TxnResponse(error=response)
    return InitProducerIdResponse(throttle_time_ms=0,
                                  error_code=client_error(INIT_PRODUCER_ID, version, response.error),
                                  producer_id=response.producer_id, producer_epoch=response.producer_epoch)


TRANSACTION_VERSION_2_END_TXN = 5          # EndTxn from this version is transaction version 2's (an epoch bump)
TRANSACTION_VERSION_2_ADD_PARTITIONS = 5   # AddPartitionsToTxn (brokers') from this version adds for version 2


def end_txn_input(request, version: int) -> EndTxn:
    return EndTxn(request.transactional_id, request.producer_id, request.producer_epoch, request.committed,
                  2 if version >= TRANSACTION_VERSION_2_END_TXN else 0)


def end_txn_response(version: int, response: TxnResponse) -> EndTxnResponse:
    failed = response.error != E.NONE
    return EndTxnResponse(throttle_time_ms=0, error_code=client_error(END_TXN, version, response.error),
                          producer_id=-1 if failed else response.producer_id,
                          producer_epoch=-1 if failed else response.producer_epoch)


def add_offsets_response(version: int, response: TxnResponse) -> AddOffsetsToTxnResponse:
    return AddOffsetsToTxnResponse(throttle_time_ms=0,
                                   error_code=client_error(ADD_OFFSETS_TO_TXN, version, response.error))


# ---- AddPartitionsToTxn ------------------------------------------------------------------------------------------

def add_partitions_inputs(request: AddPartitionsToTxnRequest, version: int) -> list[AddPartitions]:
    """One input per transaction of the request: the top-level one (v0-3), or each of the batch (v4+)."""
    def partitions(topics):
        return tuple((t.name, p) for t in topics for p in t.partitions)
    if version <= 3:
        return [AddPartitions(request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                              request.v3_and_below_producer_epoch, partitions(request.v3_and_below_topics))]
    version_2 = 2 if version >= TRANSACTION_VERSION_2_ADD_PARTITIONS else 0
    return [AddPartitions(t.transactional_id, t.producer_id, t.producer_epoch, partitions(t.topics), t.verify_only,
                          0 if t.verify_only else version_2) for t in request.transactions]


def _topic_results(partition_errors: dict[TopicPartition, ErrorCode], version: int):
    R = AddPartitionsToTxnResponse
    return [R.AddPartitionsToTxnTopicResult(name=topic, results_by_partition=[
        R.AddPartitionsToTxnPartitionResult(
            partition_index=p, partition_error_code=client_error(ADD_PARTITIONS_TO_TXN, version,
                                                                 partition_errors[(topic, p)]))
        for p in partitions]) for topic, partitions in _by_topic(partition_errors).items()]


def add_partitions_response(version: int, inputs: list[AddPartitions], answers: list[TxnResponse | dict],
                            ) -> AddPartitionsToTxnResponse:
    """`answers[i]` answers `inputs[i]`: the coordinator's TxnResponse, or a dict of partition errors the shell
    decided itself (unknown topics, authorization: Kafka answers those and OPERATION_NOT_ATTEMPTED for the rest)."""
    errors = [a if isinstance(a, dict) else (a.partition_errors or {}) for a in answers]
    if version <= 3:
        return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(
            errors[0], version))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0, results_by_transaction=[
        AddPartitionsToTxnResponse.AddPartitionsToTxnResult(transactional_id=i.transactional_id,
                                                            topic_results=_topic_results(e, version))
        for i, e in zip(inputs, errors)])


# ---- DescribeTransactions, ListTransactions ----------------------------------------------------------------------

def describe_transactions_response(results: list[tuple[str, ErrorCode, TxnMetadata | None]],
                                   ) -> DescribeTransactionsResponse:
    R = DescribeTransactionsResponse
    states = []
    for transactional_id, error, meta in results:
        if meta is None:  # the fields left at their defaults, as Kafka 4.4 answers (tests/kafka)
            states.append(R.TransactionState(error_code=error, transactional_id=transactional_id,
                                             transaction_state="", transaction_timeout_ms=0,
                                             transaction_start_time_ms=0, producer_id=0, producer_epoch=0))
            continue
        states.append(R.TransactionState(
            error_code=E.NONE, transactional_id=transactional_id, transaction_state=STATE_NAMES[meta.state],
            transaction_timeout_ms=meta.txn_timeout_ms, transaction_start_time_ms=meta.txn_start_timestamp_ms,
            producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
            topics=[R.TopicData(topic=t, partitions=ps) for t, ps in _by_topic(meta.partitions).items()]))
    return R(throttle_time_ms=0, transaction_states=states)


def list_transactions_response(result: ListResult) -> ListTransactionsResponse:
    R = ListTransactionsResponse
    return R(throttle_time_ms=0, error_code=result.error, unknown_state_filters=list(result.unknown_state_filters),
             transaction_states=[R.TransactionState(transactional_id=t.transactional_id, producer_id=t.producer_id,
                                                    transaction_state=t.state) for t in result.transactions])


# ---- WriteTxnMarkers ---------------------------------------------------------------------------------------------

def write_txn_markers_requests(markers: Iterable[Markers], leader_of: Callable[[TopicPartition], int | None],
                               ) -> tuple[dict[int, WriteTxnMarkersRequest], list[tuple[Markers, TopicPartition]]]:
    """One WriteTxnMarkers request per leader broker, each marker naming only that leader's partitions; and the
    partitions without a leader now (to retry once metadata says where they are)."""
    per_broker: dict[int, list] = {}
    leaderless = []
    for m in markers:
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in m.partitions:
            leader = leader_of(tp)
            if leader is None:
                leaderless.append((m, tp))
            else:
                by_leader.setdefault(leader, []).append(tp)
        for leader, tps in by_leader.items():
            per_broker.setdefault(leader, []).append(WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=m.producer_id, producer_epoch=m.producer_epoch, transaction_result=m.committed,
                coordinator_epoch=m.coordinator_epoch, transaction_version=0, topics=[
                    WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in _by_topic(tps).items()]))
    return {b: WriteTxnMarkersRequest(markers=ms) for b, ms in per_broker.items()}, leaderless


DONE, RETRY, CANCEL = "done", "retry", "cancel"
_RETRIABLE = {E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS,
              E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.REQUEST_TIMED_OUT, E.KAFKA_STORAGE_ERROR}


def marker_outcome(error: int) -> str:
    """What a partition's WriteTxnMarkers error means for the transaction (Kafka's
    TransactionMarkerRequestCompletionHandler): written (or the partition cannot take markers: done), retry, or
    cancel (the producer or this coordinator was fenced: a newer one completes it). Anything else is a bug."""
    if error in (E.NONE, E.UNSUPPORTED_FOR_MESSAGE_FORMAT, E.UNSUPPORTED_VERSION):
        return DONE
    if error in _RETRIABLE:
        return RETRY
    if error in (E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED):
        return CANCEL
    raise RuntimeError(f"unexpected {ErrorCode(error).name} writing a transaction marker")


class MarkerProgress:
    """The partitions of each transaction whose markers are not written yet (Kafka's TransactionMarkerChannelManager,
    without its threads). The shell calls `start` with the core's Markers (once their Prepare record is durable),
    sends what `requests` builds, and gives each answer to `answer` (or `failed` when no answer came): the
    MarkersWritten reports it returns go to the core. A partition is in at most one request at a time; an answer
    to a request of a transaction that was since cancelled or completed is ignored."""

    def __init__(self):
        self.waiting: dict[str, tuple[Markers, set[TopicPartition]]] = {}      # transactional id -> left to write
        self.in_flight: dict[int, list[tuple[Markers, TopicPartition]]] = {}   # request id -> what it carries
        self._sent: set[tuple[str, TopicPartition]] = set()
        self._next_request_id = 0

    def start(self, markers: Markers) -> MarkersWritten | None:
        """Track `markers`; a transaction without partitions is written at once (its report is returned)."""
        if not markers.partitions:
            return _written(markers)
        self.waiting[markers.transactional_id] = (markers, set(markers.partitions))
        return None

    def cancel(self, transactional_id: str) -> None:
        self.waiting.pop(transactional_id, None)

    def requests(self, leader_of: Callable[[TopicPartition], int | None],
                 ) -> tuple[list[tuple[int, int, WriteTxnMarkersRequest]], list[tuple[Markers, TopicPartition]]]:
        """(request id, leader broker id, request) for every partition to write that is not in flight, and the
        partitions without a leader now."""
        to_send = []
        for txn_id, (markers, left) in sorted(self.waiting.items()):
            tps = tuple(tp for tp in sorted(left) if (txn_id, tp) not in self._sent)
            if tps:
                to_send.append(markers._replace(partitions=tps))
        per_broker, leaderless = write_txn_markers_requests(to_send, leader_of)
        out = []
        for broker, request in sorted(per_broker.items()):
            request_id, self._next_request_id = self._next_request_id, self._next_request_id + 1
            carried = []
            for marker in request.markers:
                markers = next(m for m in to_send if (m.producer_id, m.producer_epoch) ==
                               (marker.producer_id, marker.producer_epoch))
                full = self.waiting[markers.transactional_id][0]
                for topic in marker.topics:
                    for p in topic.partition_indexes:
                        carried.append((full, (topic.name, p)))
                        self._sent.add((full.transactional_id, (topic.name, p)))
            self.in_flight[request_id] = carried
            out.append((request_id, broker, request))
        return out, leaderless

    def partition_gone(self, transactional_id: str, tp: TopicPartition) -> MarkersWritten | None:
        """The partition's topic is deleted: its marker is not needed (Kafka skips it). The report, if that was the
        transaction's last partition."""
        entry = self.waiting.get(transactional_id)
        if entry is None or tp not in entry[1]:
            return None
        entry[1].discard(tp)
        if entry[1]:
            return None
        del self.waiting[transactional_id]
        return _written(entry[0])

    def failed(self, request_id: int) -> None:
        """No answer to this request (connection lost, timeout): its partitions are sent again."""
        for markers, tp in self.in_flight.pop(request_id, ()):
            self._sent.discard((markers.transactional_id, tp))

    def answer(self, request_id: int, response: WriteTxnMarkersResponse) -> list[MarkersWritten]:
        carried = self.in_flight.pop(request_id, [])
        for markers, tp in carried:
            self._sent.discard((markers.transactional_id, tp))
        errors = {(r.producer_id, (t.name, p.partition_index)): p.error_code
                  for r in response.markers for t in r.topics for p in t.partitions}
        completed = []
        for markers, tp in carried:
            entry = self.waiting.get(markers.transactional_id)
            if entry is None or entry[0] != markers:
                continue  # completed or cancelled since
            outcome = marker_outcome(errors.get((markers.producer_id, tp), E.REQUEST_TIMED_OUT))
            if outcome == CANCEL:
                del self.waiting[markers.transactional_id]
            elif outcome == DONE:
                entry[1].discard(tp)
                if not entry[1]:
                    del self.waiting[markers.transactional_id]
                    completed.append(_written(markers))
        return completed


def _written(markers: Markers) -> MarkersWritten:
    return MarkersWritten(markers.transactional_id, markers.producer_id, markers.producer_epoch, markers.committed)
