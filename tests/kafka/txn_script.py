"""Transaction version 2 (KIP-890 part 2) step by step over one raw connection, the same steps against
Apache Kafka 4.4 and against Kray: what each answers, with producer ids replaced by the order they first
appear (p0, p1...) so two brokers' answers compare as they are.

A step is a request at a fixed version, so the script says which protocol a client speaks: Produce v12+,
EndTxn v5+ and TxnOffsetCommit v5+ are version 2's (no AddPartitionsToTxn, no AddOffsetsToTxn, an epoch
bump at every end); AddPartitionsToTxn v3, Produce v11, EndTxn v4 are version 1's.

Run by hand against one broker:  python -m tests.kafka.txn_script 127.0.0.1:9092
"""
from __future__ import annotations

import sys
import time
import uuid
from typing import Any

from cluster.admin import KafkaConnection
from protocol import messages as m
from protocol.record_batch import build_batch, decode_records, iter_batches

TOPIC = "txn-v2"  # + a suffix per run
PARTITIONS = 2


class Script:
    def __init__(self, conn: KafkaConnection, suffix: str):
        self.conn, self.suffix = conn, suffix
        self.topic = f"{TOPIC}-{suffix}"
        self.steps: list[tuple[str, Any]] = []
        self._pids: dict[int, str] = {}
        self.sequences: dict[tuple[int, int, int], int] = {}  # (pid, epoch, partition) -> next sequence

    def pid(self, producer_id: int) -> str:
        if producer_id < 0:
            return str(producer_id)
        return self._pids.setdefault(producer_id, f"p{len(self._pids)}")

    def note(self, name: str, answer: Any) -> Any:
        self.steps.append((name, answer))
        return answer

    # -- requests ---------------------------------------------------------------------------------------------------

    def init(self, txn_id: str, timeout_ms: int = 60_000) -> tuple[int, int]:
        for _ in range(150):  # a fresh Kafka creates __transaction_state at the first FindCoordinator
            r = self.conn.send(m.FindCoordinatorRequest(key=txn_id, key_type=1, coordinator_keys=[txn_id]))
            if (r.coordinators[0] if r.coordinators else r).error_code == 0:
                break
            time.sleep(0.2)
        for _ in range(150):
            r = self.conn.send(m.InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=timeout_ms,
                                                       producer_id=-1, producer_epoch=-1), 5)
            if r.error_code not in (14, 15, 16, 51):  # coordinator loading / concurrent: retry as clients do
                break
            time.sleep(0.2)
        self.note(f"InitProducerId({txn_id.removesuffix('-' + self.suffix)})",
                  (r.error_code, self.pid(r.producer_id), r.producer_epoch))
        return r.producer_id, r.producer_epoch

    def produce(self, name: str, txn_id: str, pid: int, epoch: int, partition: int, version: int,
                values: tuple[bytes, ...] = (b"v",), sequence: int | None = None) -> int:
        key = (pid, epoch, partition)
        seq = self.sequences.get(key, 0) if sequence is None else sequence
        batch = build_batch([(b"k", v, [], int(time.time() * 1000)) for v in values], producer_id=pid,
                            producer_epoch=epoch, base_sequence=seq, is_transactional=True)
        r = self.conn.send(m.ProduceRequest(transactional_id=txn_id, acks=-1, timeout_ms=10_000, topic_data=[
            m.ProduceRequest.TopicProduceData(name=self.topic, partition_data=[
                m.ProduceRequest.PartitionProduceData(index=partition, records=batch)])]), version)
        error = r.responses[0].partition_responses[0].error_code
        if error == 0:
            self.sequences[key] = seq + len(values)
        self.note(name, error)
        return error

    def add_partitions(self, name: str, txn_id: str, pid: int, epoch: int, partitions: list[int]) -> None:
        r = self.conn.send(m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=self.topic,
                                                                                     partitions=partitions)]), 3)
        self.note(name, sorted((p.partition_index, p.partition_error_code)
                               for t in r.results_by_topic_v3_and_below for p in t.results_by_partition))

    def end(self, name: str, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 5) -> tuple[int, int]:
        for _ in range(50):
            r = self.conn.send(m.EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                               committed=commit), version)
            if r.error_code != 51:  # CONCURRENT_TRANSACTIONS: the previous end's markers are still being written
                break
            time.sleep(0.1)
        answer = (r.error_code,) if version < 5 else (r.error_code, self.pid(r.producer_id), r.producer_epoch)
        self.note(name, answer)
        return (r.producer_id, r.producer_epoch) if version >= 5 else (pid, epoch)

    def describe(self, name: str, txn_id: str) -> None:
        for _ in range(50):
            s = self.conn.send(m.DescribeTransactionsRequest(transactional_ids=[txn_id])).transaction_states[0]
            if not s.transaction_state.startswith("Prepare"):
                break
            time.sleep(0.1)
        # (the group's __consumer_offsets partition is the hash of a group name unique to the run)
        self.note(name, (s.error_code, s.transaction_state, self.pid(s.producer_id), s.producer_epoch,
                         sorted(("<topic>" if t.topic == self.topic else t.topic,
                                 "*" if t.topic == "__consumer_offsets" else p)
                                for t in s.topics for p in t.partitions)))

    def producers(self, name: str, partition: int) -> None:
        r = self.conn.send(m.DescribeProducersRequest(topics=[m.DescribeProducersRequest.TopicRequest(
            name=self.topic, partition_indexes=[partition])]))
        p = r.topics[0].partitions[0]
        self.note(name, (p.error_code, sorted((self.pid(s.producer_id), s.producer_epoch, s.last_sequence,
                                               s.current_txn_start_offset) for s in p.active_producers)))

    def txn_offset_commit(self, name: str, txn_id: str, group: str, pid: int, epoch: int, offset: int,
                          version: int = 5) -> None:
        T = m.TxnOffsetCommitRequest
        for _ in range(50):
            r = self.conn.send(T(transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch,
                                 generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=[
                                     T.TxnOffsetCommitRequestTopic(name=self.topic, partitions=[
                                         T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                           committed_leader_epoch=-1,
                                                                           committed_metadata="")])]), version)
            error = r.topics[0].partitions[0].error_code
            if error not in (14, 15, 16):
                break
            time.sleep(0.2)
        self.note(name, error)

    def find_group(self, group: str) -> None:
        for _ in range(50):
            r = self.conn.send(m.FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group]))
            if (r.coordinators[0] if r.coordinators else r).error_code == 0:
                return
            time.sleep(0.2)

    def committed(self, name: str, group: str) -> None:
        O = m.OffsetFetchRequest
        for _ in range(50):
            r = self.conn.send(O(group_id=group, topics=[O.OffsetFetchRequestTopic(name=self.topic, partition_indexes=[0])],
                                 require_stable=True, groups=[O.OffsetFetchRequestGroup(
                                     group_id=group, topics=[O.OffsetFetchRequestTopics(name=self.topic,
                                                                                        partition_indexes=[0])])]), 8)
            group_answer = r.groups[0] if r.groups else r
            p = group_answer.topics[0].partitions[0]
            if p.error_code != 88:  # UNSTABLE_OFFSET_COMMIT: the markers are still being written
                break
            time.sleep(0.1)
        self.note(name, (p.error_code, p.committed_offset))

    def read_committed(self, name: str, partition: int) -> None:
        """The values a read_committed consumer sees on the partition (once the markers are written)."""
        topic_id = self.conn.send(m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=self.topic)],
                                                    allow_auto_topic_creation=False)).topics[0].topic_id
        F = m.FetchRequest
        r = self.conn.send(F(replica_id=-1, max_wait_ms=100, min_bytes=0, max_bytes=1 << 20, isolation_level=1,
                             session_id=0, session_epoch=-1, topics=[F.FetchTopic(topic=self.topic, topic_id=topic_id, partitions=[
                                 F.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=0,
                                                  log_start_offset=-1, partition_max_bytes=1 << 20)])],
                             forgotten_topics_data=[], rack_id=""))
        p = r.responses[0].partitions[0]
        aborted = {(a.producer_id, a.first_offset) for a in (p.aborted_transactions or ())}
        values = []
        for batch in iter_batches(bytes(p.records or b"")):
            if batch.is_control:
                continue
            if batch.is_transactional and any(pid == batch.producer_id and first <= batch.base_offset
                                              for pid, first in aborted):
                continue
            values.extend(bytes(r.value) for r in decode_records(batch))
        self.note(name, (p.error_code, p.last_stable_offset, values))


def setup(conn: KafkaConnection, topic: str) -> None:
    C = m.CreateTopicsRequest
    r = conn.send(C(topics=[C.CreatableTopic(name=topic, num_partitions=PARTITIONS, replication_factor=1,
                                             assignments=[], configs=[])], timeout_ms=30_000, validate_only=False))
    assert r.topics[0].error_code in (0, 36), r.topics[0]
    time.sleep(1)


def run(bootstrap: str) -> list[tuple[str, Any]]:
    """Every step and its answer."""
    suffix = uuid.uuid4().hex[:8]
    with KafkaConnection(bootstrap, client_id="kray-txn-v2") as conn:
        s = Script(conn, suffix)
        setup(conn, s.topic)
        txn = f"tv2-{suffix}"
        # version 2: produce without AddPartitionsToTxn, an epoch bump at every end
        pid, epoch = s.init(txn)
        s.produce("v2 produce p0 (no AddPartitionsToTxn)", txn, pid, epoch, 0, 12, (b"a",))
        s.produce("v2 produce p1", txn, pid, epoch, 1, 12, (b"b",))
        s.describe("v2 ongoing", txn)
        s.producers("v2 producers p0 ongoing", 0)
        new_pid, new_epoch = s.end("v2 commit: EndTxn v5 answers the bumped epoch", txn, pid, epoch, True)
        s.describe("v2 after commit", txn)
        s.producers("v2 producers p0 after commit", 0)
        s.end("v2 commit retried with the old epoch", txn, pid, epoch, True)
        s.produce("v2 old epoch produces after the bump", txn, pid, epoch, 0, 12, (b"zombie",))
        s.produce("v2 next transaction, bumped epoch", txn, new_pid, new_epoch, 0, 12, (b"c",))
        pid, epoch = new_pid, new_epoch
        new_pid, new_epoch = s.end("v2 abort", txn, pid, epoch, False)
        s.describe("v2 after abort", txn)
        s.end("v2 commit with a stale epoch", txn, pid, epoch - 1, True)
        pid, epoch = new_pid, new_epoch
        pid, epoch = s.end("v2 abort with no transaction open", txn, pid, epoch, False)
        s.describe("v2 after an abort with nothing open", txn)
        s.end("v2 commit with no transaction open", txn, pid, epoch, True)
        s.end("v1 abort with no transaction open (EndTxn v4)", txn, pid, epoch, False, version=4)
        s.read_committed("v2 read_committed p0", 0)
        s.read_committed("v2 read_committed p1", 1)
        # version 2 offsets: TxnOffsetCommit v5 without AddOffsetsToTxn
        group = f"tv2-group-{suffix}"
        s.find_group(group)
        txn2 = f"tv2-offsets-{suffix}"
        pid, epoch = s.init(txn2)
        s.txn_offset_commit("v2 TxnOffsetCommit v5 (no AddOffsetsToTxn)", txn2, group, pid, epoch, 7)
        s.describe("v2 offsets ongoing", txn2)
        s.end("v2 offsets commit", txn2, pid, epoch, True)
        s.committed("v2 offsets committed", group)
        # version 1 beside it: AddPartitionsToTxn v3, Produce v11, EndTxn v4 (one epoch for every transaction)
        txn1 = f"tv1-{suffix}"
        pid, epoch = s.init(txn1)
        s.produce("v1 produce before AddPartitionsToTxn", txn1, pid, epoch, 0, 11, (b"early",))
        s.add_partitions("v1 AddPartitionsToTxn v3", txn1, pid, epoch, [0])
        s.produce("v1 produce", txn1, pid, epoch, 0, 11, (b"d",))
        s.end("v1 commit: EndTxn v4", txn1, pid, epoch, True, version=4)
        s.describe("v1 after commit", txn1)
        s.producers("v1 producers p0", 0)
        return s.steps


if __name__ == "__main__":
    for name, answer in run(sys.argv[1]):
        print(f"{name:55} {answer}")
