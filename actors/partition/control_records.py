"""Control records: Kafka's transaction markers (EndTransactionMarker) in control batches.

A control batch has the transactional and control attribute bits set, the producer id and epoch
of the transaction it ends, no sequence, and one record whose key is (version int16 = 0, type
int16: 0 ABORT, 1 COMMIT) and whose value, for a transaction marker, is (version int16 = 0,
coordinator epoch int32). Clients skip control batches; the log uses them to end a producer's
ongoing transaction (actors/partition/producer_state.py).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from protocol.record_batch import (
    NO_SEQUENCE, BatchHeader, CorruptRecord, build_batch, decode_records,
)

CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0

_CONTROL_KEY = struct.Struct(">hh")      # version, type
_MARKER_VALUE = struct.Struct(">hi")     # version, coordinator epoch


class TxnMarker(NamedTuple):
    committed: bool
    coordinator_epoch: int


def build_marker_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                       timestamp_ms: int) -> bytes:
    """One control batch (base offset 0: the log assigns it) holding a COMMIT or ABORT marker."""
    key = _CONTROL_KEY.pack(CONTROL_KEY_VERSION, CONTROL_TYPE_COMMIT if committed else CONTROL_TYPE_ABORT)
    value = _MARKER_VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)
    return build_batch([(key, value, (), timestamp_ms)], producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=NO_SEQUENCE, is_transactional=True, is_control=True)


def read_marker(header: BatchHeader, buf=None) -> TxnMarker | None:
    """The transaction marker a control batch holds; None for another control type (Kafka
    ignores those, e.g. KRaft's LeaderChange), and for an empty one (the log cleaner emptied it:
    a follower copies it as it is). CorruptRecord when the record is malformed."""
    if header.records_count == 0:
        return None
    records = decode_records(header, buf)
    if len(records) != 1 or records[0].key is None or len(records[0].key) < _CONTROL_KEY.size:
        raise CorruptRecord("a control batch must hold one record with a control key")
    _version, control_type = _CONTROL_KEY.unpack_from(records[0].key, 0)
    if control_type not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        return None
    value = records[0].value
    if value is None or len(value) < _MARKER_VALUE.size:
        raise CorruptRecord("a transaction marker's value is shorter than version + coordinator epoch")
    _version, coordinator_epoch = _MARKER_VALUE.unpack_from(value, 0)
    return TxnMarker(control_type == CONTROL_TYPE_COMMIT, coordinator_epoch)
