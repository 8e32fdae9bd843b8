"""`kray delete-records`, after kafka-delete-records.sh: move partitions' log start offsets forward
(DeleteRecords), from Kafka's JSON file of offsets:

    {"partitions": [{"topic": "orders", "partition": 0, "offset": 42}], "version": 1}

An offset of -1 deletes up to the high watermark. Each partition's request goes to its leader."""
from __future__ import annotations

import json
import sys

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import DeleteRecordsRequest, MetadataRequest

CLIENT_ID = "kray-delete-records"
TIMEOUT_MS = 30_000


def add_parser(sub) -> None:
    p = sub.add_parser("delete-records", help="delete records below given offsets (like kafka-delete-records.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="HOST:PORT of a Kray broker")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='{"partitions": [{"topic": T, "partition": P, "offset": O}], "version": 1}; '
                        "offset -1: up to the high watermark")
    p.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"kray delete-records: {message}", file=sys.stderr)
    return 1


def read_offsets(path: str) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of each entry of a kafka-delete-records.sh offset file; AdminError
    saying what is wrong with it otherwise."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise AdminError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise AdminError(f"{path} is not JSON: {e}") from None
    entries = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise AdminError(f'{path}: expected {{"partitions": [{{"topic": ..., "partition": ..., "offset": ...}}]}}')
    out = []
    for i, e in enumerate(entries):
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
                and isinstance(e.get("offset"), int)):
            raise AdminError(f"{path}: partitions[{i}] needs a string topic and integer partition and offset")
        out.append((e["topic"], e["partition"], e["offset"]))
    seen = set()
    for topic, partition, _ in out:
        if (topic, partition) in seen:
            raise AdminError(f"{path}: {topic}-{partition} is listed twice")
        seen.add((topic, partition))
    return out


def run(args) -> int:
    try:
        wanted = read_offsets(args.offset_json_file)
        print("Executing records delete operation")
        with KafkaConnection(args.bootstrap_server, client_id=CLIENT_ID) as conn:
            results = _delete(conn, wanted)
    except AdminError as e:
        return _fail(str(e))
    print("Records delete operation completed:")
    failed = 0
    for topic, partition, _ in wanted:
        error, low_watermark = results[(topic, partition)]
        if error:
            failed += 1
            print(f"partition: {topic}-{partition}\terror: {ErrorCode(error).name}")
        else:
            print(f"partition: {topic}-{partition}\tlow_watermark: {low_watermark}")
    return 1 if failed else 0


def _delete(conn: KafkaConnection, wanted: list[tuple[str, int, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """(error, low watermark) of each (topic, partition): one DeleteRecords per leader."""
    topics = sorted({t for t, _, _ in wanted})
    metadata = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                                         allow_auto_topic_creation=False))
    leaders = {(t.name, p.partition_index): p.leader_id for t in metadata.topics if not t.error_code
               for p in t.partitions}
    brokers = {b.node_id: b for b in metadata.brokers}
    results: dict[tuple[str, int], tuple[int, int]] = {}
    by_leader: dict[int, list[tuple[str, int, int]]] = {}
    for topic, partition, offset in wanted:
        leader = leaders.get((topic, partition))
        if leader is None:
            results[(topic, partition)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
        elif leader not in brokers:
            results[(topic, partition)] = (ErrorCode.LEADER_NOT_AVAILABLE, -1)
        else:
            by_leader.setdefault(leader, []).append((topic, partition, offset))
    for leader, items in by_leader.items():
        b = brokers[leader]
        broker = conn if (b.host, b.port) == conn.address else KafkaConnection(f"{b.host}:{b.port}", client_id=CLIENT_ID)
        try:
            by_topic: dict[str, list] = {}
            for topic, partition, offset in items:
                by_topic.setdefault(topic, []).append(DeleteRecordsRequest.DeleteRecordsPartition(
                    partition_index=partition, offset=offset))
            r = broker.send(DeleteRecordsRequest(timeout_ms=TIMEOUT_MS, topics=[
                DeleteRecordsRequest.DeleteRecordsTopic(name=t, partitions=ps) for t, ps in by_topic.items()]))
        finally:
            if broker is not conn:
                broker.close()
        for t in r.topics:
            for p in t.partitions:
                results[(t.name, p.partition_index)] = (p.error_code, p.low_watermark)
    return results
