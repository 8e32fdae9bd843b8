"""A partition replica that stops (a reassignment moved it off its broker: the balancer draining a broker, kray
reassign-partitions) while it still leads: its shard keeps serving it until `close` returns, and `close` waits
for the replica's I/O (the high watermark checkpoint, on the shard's I/O thread; slow on a loaded machine).

An acks=all produce that reaches it in that window must be answered NOT_LEADER_OR_FOLLOWER at once, as Kafka's
old leader answers once it learns it is no longer a replica, so the producer asks for the new leader. Appended
and left waiting instead, it waited for its request timeout (30 s): no follower fetches from a replica that is
being removed, so its high watermark never moves; and a Kafka connection answers in request order, so every
later request of that producer's connection to the broker waited too. This is what stalled acks=all producers
for ~30 s in benchmarks/balancer.py's drain (issue 36)."""
import asyncio
import concurrent.futures
import uuid

from actors.partition.actor import PartitionReplica
from actors.partition.core import PartitionConfig
from protocol.errors import ErrorCode
from protocol.record_batch import build_batch

ACKS_ALL = -1
REQUEST_TIMEOUT_MS = 30000  # librdkafka's and Kafka's producers' request.timeout.ms
ANSWER_WITHIN_S = 2.0


class Fetchers:
    def follow(self, replica, endpoint):
        pass

    def unfollow(self, key):
        pass


class SlowIoHost:
    """A shard whose I/O thread is busy: what is handed to it finishes only when the test says."""

    def __init__(self):
        self.fetchers = Fetchers()
        self.io_done = concurrent.futures.Future()

    async def listen(self) -> str:
        return "unused"

    def took_records(self) -> None:
        pass

    def in_background(self, fn, *args) -> concurrent.futures.Future:
        done = concurrent.futures.Future()

        def run(_):
            fn(*args)
            done.set_result(None)
        self.io_done.add_done_callback(run)
        return done


def batch() -> bytes:
    return build_batch([(b"k", b"v" * 20, [], 1_700_000_000_000)])


def test_a_leader_that_closes_answers_produces_not_leader_at_once(tmp_path):
    async def scenario():
        host = SlowIoHost()
        replica = PartitionReplica({"topic": "t", "topic_id": uuid.uuid4(), "partition": 0, "broker_id": 1,
                                    "log_dir": str(tmp_path), "config": PartitionConfig(), "broker_config": {},
                                    "internal": False, "controller": None}, host)
        # broker 1 leads, broker 2 is in the ISR: an acks=all produce waits for 2 to fetch it
        await replica.update({"leader": 1, "leader_epoch": 3, "partition_epoch": 5, "replicas": [1, 2],
                              "isr": [1, 2]}, None, 7, [])
        waiting = asyncio.ensure_future(replica.produce([batch()], -1, ACKS_ALL, REQUEST_TIMEOUT_MS))
        await asyncio.sleep(0.05)
        assert not waiting.done(), "an acks=all produce waits for the follower in the ISR"

        closing = asyncio.ensure_future(replica.close())  # a reassignment stops it; its I/O thread is busy
        await asyncio.sleep(0.05)
        assert not closing.done()
        [answer] = await asyncio.wait_for(waiting, ANSWER_WITHIN_S)
        assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

        # a produce that reaches it while it closes: refused at once, nothing appended
        end_before = replica.core.log_end_offset
        [late] = await asyncio.wait_for(replica.produce([batch()], -1, ACKS_ALL, REQUEST_TIMEOUT_MS),
                                        ANSWER_WITHIN_S)
        assert late.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert replica.core.log_end_offset == end_before
        # and a state the controller told it before the stop does not make it lead again
        await replica.update({"leader": 1, "leader_epoch": 4, "partition_epoch": 6, "replicas": [1, 2],
                              "isr": [1, 2]}, None, 7, [])
        [again] = await asyncio.wait_for(replica.produce([batch()], -1, 1, REQUEST_TIMEOUT_MS), ANSWER_WITHIN_S)
        assert again.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

        # a consumer's long poll on it ends at once (its fetch is then refused), not at its max wait
        assert await asyncio.wait_for(replica.wait_for_data(10**6, REQUEST_TIMEOUT_MS), ANSWER_WITHIN_S)
        error = replica.replica.validate_leader_epoch(-1)
        assert error == ErrorCode.NOT_LEADER_OR_FOLLOWER

        host.io_done.set_result(None)
        await asyncio.wait_for(closing, 10)

    asyncio.run(scenario())
