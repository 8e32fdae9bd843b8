"""`kray transactions`, after kafka-transactions.sh: list the transactions every broker coordinates, describe one
transactional id's (its coordinator, producer id and epoch, state, timeout, start and partitions), describe the
producers a partition's leader knows (describe-producers). Speaks ListTransactions, FindCoordinator,
DescribeTransactions, Metadata and DescribeProducers through Kray's own small client, at named versions (the
transaction APIs were served before Kray advertised them)."""
from __future__ import annotations

import sys
import time

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import (DescribeProducersRequest, DescribeTransactionsRequest, FindCoordinatorRequest,
                               ListTransactionsRequest, MetadataRequest)

CLIENT_ID = "kray-transactions"
KEY_TYPE_TRANSACTION = 1
LIST_TRANSACTIONS_VERSION = 1
DESCRIBE_TRANSACTIONS_VERSION = 0
FIND_COORDINATOR_VERSION = 4
DESCRIBE_PRODUCERS_VERSION = 0
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset")  # kafka-transactions.sh describe-producers' columns


def add_parser(sub) -> None:
    p = sub.add_parser("transactions", help="list and describe transactions (like kafka-transactions.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="HOST:PORT of a Kray broker")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="every transactional id the brokers coordinate")
    actions.add_argument("--describe", action="store_true", help="one transactional id's current transaction")
    actions.add_argument("--describe-producers", action="store_true",
                         help="the producers a partition's leader knows (with --topic and --partition)")
    p.add_argument("--transactional-id", help="with --describe: the transactional id")
    p.add_argument("--topic", help="with --describe-producers: the topic")
    p.add_argument("--partition", type=int, help="with --describe-producers: the partition")
    p.add_argument("--state", action="append", default=[],
                   help="with --list: only transactions in this state (Ongoing, PrepareCommit, ...; repeatable)")
    p.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"kray transactions: {message}", file=sys.stderr)
    return 1


def run(args) -> int:
    if args.describe and not args.transactional_id:
        return _fail("--describe needs --transactional-id ID")
    if args.describe_producers and (not args.topic or args.partition is None):
        return _fail("--describe-producers needs --topic TOPIC and --partition N")
    try:
        with KafkaConnection(args.bootstrap_server, client_id=CLIENT_ID) as conn:
            if args.describe_producers:
                return _describe_producers(conn, args.topic, args.partition)
            return _list(conn, args.state) if args.list else _describe(conn, args.transactional_id)
    except AdminError as e:
        return _fail(str(e))


def _list(conn: KafkaConnection, states: list[str]) -> int:
    """Each broker lists the transactions of the coordinators it leads: ask them all (as kafka-transactions does)."""
    brokers = conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False)).brokers
    rows = []
    for b in sorted(brokers, key=lambda b: b.node_id):
        broker = conn if (b.host, b.port) == conn.address else KafkaConnection(f"{b.host}:{b.port}",
                                                                               client_id=CLIENT_ID)
        try:
            r = broker.send(ListTransactionsRequest(state_filters=states, producer_id_filters=[]),
                            LIST_TRANSACTIONS_VERSION)
        finally:
            if broker is not conn:
                broker.close()
        if r.error_code:
            return _fail(f"listing transactions on broker {b.node_id} failed: {ErrorCode(r.error_code).name}")
        if r.unknown_state_filters:
            return _fail(f"unknown transaction states: {', '.join(r.unknown_state_filters)}")
        rows += [(t.transactional_id, b.node_id, t.producer_id, t.transaction_state) for t in r.transaction_states]
    print("TransactionalId\tCoordinator\tProducerId\tTransactionState")
    for row in sorted(rows):
        print("\t".join(map(str, row)))
    return 0


def _describe(conn: KafkaConnection, transactional_id: str) -> int:
    [c] = conn.send(FindCoordinatorRequest(key_type=KEY_TYPE_TRANSACTION, coordinator_keys=[transactional_id]),
                    FIND_COORDINATOR_VERSION).coordinators
    if c.error_code:
        return _fail(f"no coordinator for transactional id {transactional_id}: {ErrorCode(c.error_code).name}")
    coordinator = conn if (c.host, c.port) == conn.address else KafkaConnection(f"{c.host}:{c.port}",
                                                                                client_id=CLIENT_ID)
    try:
        [s] = coordinator.send(DescribeTransactionsRequest(transactional_ids=[transactional_id]),
                               DESCRIBE_TRANSACTIONS_VERSION).transaction_states
    finally:
        if coordinator is not conn:
            coordinator.close()
    if s.error_code:
        return _fail(f"transactional id {transactional_id}: {ErrorCode(s.error_code).name}")
    started = s.transaction_start_time_ms >= 0
    duration = str(int(time.time() * 1000) - s.transaction_start_time_ms) if started else "None"
    partitions = ",".join(f"{t.topic}-{p}" for t in s.topics for p in sorted(t.partitions))
    print("\t".join(("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                     "CurrentTransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                     "TopicPartitions")))
    print("\t".join(map(str, (c.node_id, s.transactional_id, s.producer_id, s.producer_epoch, s.transaction_state,
                              s.transaction_timeout_ms, s.transaction_start_time_ms if started else "None",
                              duration, partitions))))
    return 0


def _describe_producers(conn: KafkaConnection, topic: str, partition: int) -> int:
    """Ask the partition's leader (from Metadata), as kafka-transactions.sh describe-producers does."""
    metadata = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                         allow_auto_topic_creation=False))
    [t] = metadata.topics
    if t.error_code:
        return _fail(f"topic {topic}: {ErrorCode(t.error_code).name}")
    p = next((p for p in t.partitions if p.partition_index == partition), None)
    if p is None:
        return _fail(f"topic {topic} has no partition {partition}")
    b = next((b for b in metadata.brokers if b.node_id == p.leader_id), None)
    if b is None:
        return _fail(f"partition {topic}-{partition} has no leader now ({p.leader_id}); try again")
    leader = conn if (b.host, b.port) == conn.address else KafkaConnection(f"{b.host}:{b.port}", client_id=CLIENT_ID)
    try:
        [tr] = leader.send(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
            name=topic, partition_indexes=[partition])]), DESCRIBE_PRODUCERS_VERSION).topics
    finally:
        if leader is not conn:
            leader.close()
    [r] = tr.partitions
    if r.error_code:
        return _fail(f"describing the producers of {topic}-{partition} on its leader (broker {b.node_id}) failed: "
                     f"{ErrorCode(r.error_code).name}")
    print("\t".join(PRODUCERS_HEADERS))
    for s in sorted(r.active_producers, key=lambda s: s.producer_id):
        start = s.current_txn_start_offset if s.current_txn_start_offset >= 0 else "None"
        print("\t".join(map(str, (s.producer_id, s.producer_epoch, s.coordinator_epoch, s.last_sequence,
                                  s.last_timestamp, start))))
    return 0
