"""A transactional id's metadata and its `__transaction_state` record, laid out as Kafka's TransactionLog does.

    record key   = int16 record type (TransactionLogKey's apiKey, 0) + TransactionLogKey at version 0
    record value = int16 value version + TransactionLogValue, or None: a tombstone (the id expired)

We write value version 1 (flexible; its tagged fields carry the previous producer id), which Kafka writes only for
clients of transaction version 2 so that older brokers can still read the log; Kray has no older brokers, and the
previous producer id must survive a coordinator move for KIP-360's retry after a producer id rotation. Both
versions are read.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from protocol.coordinator_records import TransactionLogKey, TransactionLogValue
from protocol.errors import MalformedMessage

from .states import STORED_STATES, TxnState

__all__ = ["NO_PRODUCER_ID", "NO_PRODUCER_EPOCH", "RECORD_TYPE", "VALUE_VERSION", "TxnMetadata",
           "encode_record", "decode_record"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
RECORD_TYPE = TransactionLogKey.API_KEY  # 0
VALUE_VERSION = 1
_INT16 = struct.Struct(">h")

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """What the coordinator knows of one transactional id. Every field but `last_producer_epoch` is in its record
    (Kafka keeps the last epoch in memory only, so a retried InitProducerId after a coordinator move is fenced)."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    txn_last_update_timestamp_ms: int
    partitions: frozenset[TopicPartition] = frozenset()
    txn_start_timestamp_ms: int = -1
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = field(default=NO_PRODUCER_EPOCH, compare=False)
    client_transaction_version: int = 0

    def durable(self) -> "TxnMetadata":
        """This metadata as a replay of its record gives it back."""
        return TxnMetadata(**{f: getattr(self, f) for f in self.__dataclass_fields__ if f != "last_producer_epoch"})


def encode_record(metadata: TxnMetadata | None, transactional_id: str) -> tuple[bytes, bytes | None]:
    """(key bytes, value bytes), or (key bytes, None) for a tombstone when `metadata` is None."""
    key = _INT16.pack(RECORD_TYPE) + TransactionLogKey(transactional_id=transactional_id).encode(0)
    if metadata is None:
        return key, None
    if metadata.state not in STORED_STATES:
        raise ValueError(f"{metadata.state.name} is never stored")
    if metadata.state == TxnState.EMPTY and metadata.partitions:
        raise ValueError("an Empty transaction has no partitions")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(metadata.partitions):
        by_topic.setdefault(topic, []).append(partition)
    value = TransactionLogValue(
        producer_id=metadata.producer_id, previous_producer_id=metadata.prev_producer_id,
        next_producer_id=metadata.next_producer_id, producer_epoch=metadata.producer_epoch,
        transaction_timeout_ms=metadata.txn_timeout_ms, transaction_status=int(metadata.state),
        transaction_partitions=None if metadata.state == TxnState.EMPTY else [
            TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps) for t, ps in by_topic.items()],
        transaction_last_update_timestamp_ms=metadata.txn_last_update_timestamp_ms,
        transaction_start_timestamp_ms=metadata.txn_start_timestamp_ms,
        client_transaction_version=metadata.client_transaction_version)
    return key, _INT16.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)


def decode_record(key_bytes, value_bytes) -> tuple[str, TxnMetadata | None]:
    """(transactional id, its metadata or None for a tombstone). Raises MalformedMessage."""
    key_view = memoryview(key_bytes)
    if len(key_view) < 2:
        raise MalformedMessage("__transaction_state key shorter than its record type")
    (record_type,) = _INT16.unpack_from(key_view, 0)
    if record_type != RECORD_TYPE:
        raise MalformedMessage(f"unknown __transaction_state record type {record_type}")
    transactional_id = TransactionLogKey.decode_from(key_view, 2, 0)[0].transactional_id
    if value_bytes is None:
        return transactional_id, None
    value_view = memoryview(value_bytes)
    if len(value_view) < 2:
        raise MalformedMessage("__transaction_state value shorter than its version")
    (version,) = _INT16.unpack_from(value_view, 0)
    if not TransactionLogValue.MIN_VERSION <= version <= TransactionLogValue.MAX_VERSION:
        raise MalformedMessage(f"TransactionLogValue version {version} is not supported")
    value = TransactionLogValue.decode_from(value_view, 2, version)[0]
    try:
        state = TxnState(value.transaction_status)
    except ValueError:
        raise MalformedMessage(f"unknown transaction state {value.transaction_status}") from None
    if state not in STORED_STATES:
        raise MalformedMessage(f"transaction state {state.name} is never stored")
    partitions = frozenset((p.topic, i) for p in value.transaction_partitions or () for i in p.partition_ids)
    return transactional_id, TxnMetadata(
        transactional_id=transactional_id, producer_id=value.producer_id, producer_epoch=value.producer_epoch,
        txn_timeout_ms=value.transaction_timeout_ms, state=state,
        txn_last_update_timestamp_ms=value.transaction_last_update_timestamp_ms, partitions=partitions,
        txn_start_timestamp_ms=value.transaction_start_timestamp_ms, prev_producer_id=value.previous_producer_id,
        next_producer_id=value.next_producer_id, client_transaction_version=value.client_transaction_version)
