"""The transaction coordinator's marker channel (actors/transaction_coordinator/marker_sender.py) against peers that
speak WriteTxnMarkers over real sockets: a test double of a partition leader's broker, started here (until the
partition log side serves WriteTxnMarkers, a Kray broker closes the connection on it, as `closing` peers do).

What a transaction relies on: every partition gets its marker from its leader, however the leaders move or fail
for a while; one request per broker carries every marker for it; a transaction is reported written once, only when
its last partition is."""
import asyncio
import time

import pytest

from actors.transaction_coordinator import marker_sender as ms
from actors.transaction_coordinator.core import Markers, MarkersWritten
from protocol.errors import ErrorCode
from protocol.headers import decode_request_header, encode_response
from protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse

E = ErrorCode


class Peer:
    """A broker's listener that answers WriteTxnMarkers: `errors[(topic, partition)]` is a list of error codes to
    answer in turn (then NONE); the first `closing` connections are closed on their first request."""

    def __init__(self, errors=None, closing: int = 0):
        self.errors = {tp: list(codes) for tp, codes in (errors or {}).items()}
        self.closing = closing
        self.requests: list[WriteTxnMarkersRequest] = []
        self.written: list[tuple[int, bool, str, int]] = []  # (producer id, committed, topic, partition)
        self.connections = 0
        self.server = None

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[:2]

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                body = await reader.readexactly(size)
                if self.closing:
                    self.closing -= 1
                    writer.close()
                    return
                header, offset = decode_request_header(body)
                assert header.api_key == ms.WRITE_TXN_MARKERS
                request = WriteTxnMarkersRequest.decode(memoryview(body)[offset:], header.api_version)
                self.requests.append(request)
                writer.write(encode_response(header.api_key, header.api_version, header.correlation_id,
                                             self._answer(request).encode(header.api_version)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()

    def _answer(self, request) -> WriteTxnMarkersResponse:
        R = WriteTxnMarkersResponse
        results = []
        for m in request.markers:
            topics = []
            for t in m.topics:
                partitions = []
                for p in t.partition_indexes:
                    codes = self.errors.get((t.name, p))
                    error = codes.pop(0) if codes else E.NONE
                    if error == E.NONE:
                        self.written.append((m.producer_id, m.transaction_result, t.name, p))
                    partitions.append(R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=error))
                topics.append(R.WritableTxnMarkerTopicResult(name=t.name, partitions=partitions))
            results.append(R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
        return R(markers=results)

    def close(self):
        self.server.close()


def _markers(txn="tx", producer_id=7, partitions=(("t", 0), ("t", 1)), committed=True):
    return Markers(txn, producer_id, 3, committed, 5, tuple(partitions))


async def _run(peers: dict[int, Peer], leaders: dict, markers: list[Markers], until, timeout_s=10.0):
    """Start a sender with `leaders` ((topic, partition) -> broker id, changeable meanwhile) and send `markers`;
    return the reports once `until(reports)`."""
    addresses = {b: await peer.start() for b, peer in peers.items()}
    reports: list[MarkersWritten] = []

    async def written(report):
        reports.append(report)

    async def connect(host, port):
        return await ms.MarkerConnection.open(host, port, 5.0)
    sender = ms.MarkerSender(lambda tp: leaders.get(tp), addresses.get, connect, written)
    try:
        for m in markers:
            sender.start(m)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not until(reports):
            assert asyncio.get_running_loop().time() < deadline, f"reports so far: {reports}"
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # nothing more is reported after
        return reports, sender
    finally:
        sender.close()
        for peer in peers.values():
            peer.close()


def test_each_leader_gets_one_request_with_its_partitions_and_the_transaction_is_reported_once():
    peers = {1: Peer(), 2: Peer()}
    leaders = {("t", 0): 1, ("t", 1): 2, ("u", 0): 1}
    first, second = _markers("a", 7, [("t", 0), ("t", 1)]), _markers("b", 8, [("u", 0)], committed=False)
    reports, _ = asyncio.run(_run(peers, leaders, [first, second], lambda r: len(r) == 2))
    assert sorted(reports) == [MarkersWritten("a", 7, 3, True), MarkersWritten("b", 8, 3, False)]
    assert sorted(peers[1].written) == [(7, True, "t", 0), (8, False, "u", 0)]
    assert peers[2].written == [(7, True, "t", 1)]
    # the markers for broker 1 (two transactions) travelled in one request, each naming only broker 1's partitions
    [request] = peers[1].requests
    assert sorted((m.producer_id, m.coordinator_epoch, [(t.name, t.partition_indexes) for t in m.topics])
                  for m in request.markers) == [(7, 5, [("t", [0])]), (8, 5, [("u", [0])])]


def test_a_retriable_error_is_retried_and_a_moved_leader_gets_the_marker():
    peers = {1: Peer(errors={("t", 1): [E.NOT_LEADER_OR_FOLLOWER, E.NOT_LEADER_OR_FOLLOWER]}), 2: Peer()}
    leaders = {("t", 0): 1, ("t", 1): 1}

    def move(reports):  # once broker 1 refused t-1, the metadata says broker 2 leads it
        if peers[1].requests and len(peers[1].requests) >= 2:
            leaders[("t", 1)] = 2
        return bool(reports)
    reports, _ = asyncio.run(_run(peers, leaders, [_markers()], move))
    assert reports == [MarkersWritten("tx", 7, 3, True)]
    assert (7, True, "t", 1) in peers[2].written + peers[1].written
    assert (7, True, "t", 0) in peers[1].written


def test_a_broker_that_closes_the_connection_is_retried_with_backoff_until_it_takes_the_marker():
    """As a Kray broker without the log side's WriteTxnMarkers handler does: it closes the connection."""
    peers = {1: Peer(closing=3)}
    started = time.monotonic()
    reports, _ = asyncio.run(_run(peers, {("t", 0): 1, ("t", 1): 1}, [_markers()], lambda r: bool(r)))
    assert reports == [MarkersWritten("tx", 7, 3, True)]
    assert sorted(peers[1].written) == [(7, True, "t", 0), (7, True, "t", 1)]
    # one connection per attempt (the three refused, then the one that took both markers), backing off between
    # attempts (0.1 + 0.2 + 0.4 s), not hammering the broker
    assert peers[1].connections == 4
    assert time.monotonic() - started >= 0.7


def test_a_leaderless_partition_waits_and_a_deleted_one_is_skipped():
    peers = {1: Peer()}
    leaders = {("t", 0): 1, ("t", 1): None, ("gone", 0): ms.GONE}

    def elect(reports):
        if peers[1].written:
            leaders[("t", 1)] = 1  # a leader is elected after a while
        return bool(reports)
    markers = _markers(partitions=[("t", 0), ("t", 1), ("gone", 0)])
    reports, _ = asyncio.run(_run(peers, leaders, [markers], elect))
    assert reports == [MarkersWritten("tx", 7, 3, True)]
    assert sorted(peers[1].written) == [(7, True, "t", 0), (7, True, "t", 1)]


def test_a_fenced_producer_cancels_its_markers_without_a_report():
    peers = {1: Peer(errors={("t", 0): [E.INVALID_PRODUCER_EPOCH]})}

    async def scenario():
        addresses = {1: await peers[1].start()}
        reports = []

        async def written(report):
            reports.append(report)
        sender = ms.MarkerSender({("t", 0): 1}.get, addresses.get,
                                 lambda h, p: ms.MarkerConnection.open(h, p, 5.0), written)
        sender.start(_markers(partitions=[("t", 0)]))
        for _ in range(100):
            if peers[1].requests and not sender.pending():
                break
            await asyncio.sleep(0.02)
        sender.close()
        peers[1].close()
        return reports, sender
    reports, sender = asyncio.run(scenario())
    assert reports == [] and sender.pending() == set()


def test_a_transaction_without_partitions_is_written_at_once():
    async def scenario():
        reports = []

        async def written(report):
            reports.append(report)
        sender = ms.MarkerSender(lambda tp: None, lambda b: None, None, written)
        sender.start(_markers(partitions=[]))
        await asyncio.sleep(0.05)
        sender.close()
        return reports
    assert asyncio.run(scenario()) == [MarkersWritten("tx", 7, 3, True)]


@pytest.mark.parametrize("append_error,answered", [
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE), (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR), (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.CORRUPT_MESSAGE, E.UNKNOWN_SERVER_ERROR)])
def test_a_failed_append_is_answered_as_kafkas_coordinator_answers_it(append_error, answered):
    """The producer retries (COORDINATOR_NOT_AVAILABLE) or finds the coordinator again (NOT_COORDINATOR)."""
    from actors.transaction_coordinator.actor import append_error as mapped
    assert mapped(append_error) == answered


def test_an_answer_no_marker_can_take_is_retried_until_the_broker_takes_it():
    """A refusal Kafka's coordinator does not expect (here CLUSTER_AUTHORIZATION_FAILED: the broker's login was not
    allowed yet) is not taken as written: the marker is sent again until the broker writes it."""
    peers = {1: Peer(errors={("t", 0): [E.CLUSTER_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED]})}
    reports, _ = asyncio.run(_run(peers, {("t", 0): 1}, [_markers(partitions=[("t", 0)])], lambda r: bool(r)))
    assert reports == [MarkersWritten("tx", 7, 3, True)]
    assert peers[1].written == [(7, True, "t", 0)] and len(peers[1].requests) == 3
