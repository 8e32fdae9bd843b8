"""WriteTxnMarkers' gateway handler: who may send markers, and what each partition answers."""
import asyncio
import uuid
from types import SimpleNamespace

from actors.gateway.handlers import ROUTES
from actors.gateway.dispatch import Dispatcher
from actors.gateway.handlers.txn_markers import handle_write_txn_markers
from actors.gateway.partition_client import PartitionNotHosted
from actors.gateway.txn_verifications import TxnVerifications
from protocol.errors import ErrorCode
from protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse

TOPIC_ID = uuid.uuid4()


class Leader:
    """A partition leader's data-path client: answers each marker with the next planned result."""

    def __init__(self, key, answer):
        self.key, self.answer, self.calls = key, answer, []

    async def send_txn_markers(self, markers, *, timeout_ms):
        self.calls += markers

        async def results():
            return [self.answer for _ in markers]
        return results()


class Ctx:
    def __init__(self, *, allowed=True, answers=None):
        self.allowed = allowed
        topic = SimpleNamespace(name="t", topic_id=TOPIC_ID, partitions=[0, 1, 2])
        self.metadata = SimpleNamespace(topics={"t": topic}, topic_by_id=lambda _id: None)
        self.leaders = {i: Leader((TOPIC_ID, i), a) for i, a in (answers or {}).items()}
        self.txn_verifications = TxnVerifications()

    def access(self, connection):
        return SimpleNamespace(allows_cluster=lambda operation: self.allowed)

    def partition(self, topic_id, index, follower=False):
        return self.leaders.get(index)

    async def catch_up_metadata(self):
        pass


def request(pid=5, partitions=(0, 1, 2), topic="t", committed=True, coordinator_epoch=3):
    return WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=pid, producer_epoch=1, transaction_result=committed, coordinator_epoch=coordinator_epoch,
        topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=list(partitions))])])


def errors(response: WriteTxnMarkersResponse) -> list[int]:
    decoded = WriteTxnMarkersResponse.decode(response.encode(1), 1)
    return [p.error_code for m in decoded.markers for t in m.topics for p in t.partitions]


def test_a_caller_without_cluster_action_writes_nothing():
    ctx = Ctx(allowed=False, answers={0: (0, None)})
    response = asyncio.run(handle_write_txn_markers(ctx, None, request(partitions=(0,))))
    assert errors(response) == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    assert ctx.leaders[0].calls == []


def test_each_partition_answers_for_itself():
    ctx = Ctx(answers={0: (0, None), 1: (ErrorCode.TRANSACTION_COORDINATOR_FENCED, "older coordinator"),
                       2: PartitionNotHosted("moved")})
    response = asyncio.run(handle_write_txn_markers(ctx, None, request(partitions=(0, 1, 2, 7))))
    assert errors(response) == [0, ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert ctx.leaders[0].calls == [((TOPIC_ID, 0), 5, 1, 3, True)]


def test_unknown_topic():
    response = asyncio.run(handle_write_txn_markers(Ctx(), None, request(topic="nope")))
    assert errors(response) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 3


def test_advertised_with_the_coordinator_that_sends_it():
    assert (27, 1, 2) in Dispatcher(None, ROUTES).advertised()
