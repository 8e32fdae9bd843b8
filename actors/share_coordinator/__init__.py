"""Share coordinator (KIP-932): durable share-partition state as ShareSnapshot/ShareUpdate records in
`__share_group_state`. ``core`` is the pure per-partition state machine, ``records`` the record serde;
the Ray shell (``actor``) owns a shard per `__share_group_state` partition it leads."""

from .core import (
    DEFAULT_COLD_PARTITION_SNAPSHOT_INTERVAL_MS, DEFAULT_SNAPSHOT_UPDATE_RECORDS_MAX, NOT_SUPPLIED,
    UNINITIALIZED_DELIVERY_COMPLETE_COUNT, UNINITIALIZED_START_OFFSET, ReadResponse,
    ShareCoordinatorShard, SharePartitionState, StateBatch, StateResponse, SummaryResponse, combine_state_batches,
    java_string_hash, share_coordinator_key, state_partition_for, state_partition_for_key,
)
from .records import decode_record, encode_record

__all__ = [
    "DEFAULT_COLD_PARTITION_SNAPSHOT_INTERVAL_MS", "DEFAULT_SNAPSHOT_UPDATE_RECORDS_MAX", "NOT_SUPPLIED",
    "UNINITIALIZED_DELIVERY_COMPLETE_COUNT", "UNINITIALIZED_START_OFFSET", "ReadResponse",
    "ShareCoordinatorShard", "SharePartitionState", "StateBatch", "StateResponse", "SummaryResponse", "combine_state_batches",
    "java_string_hash", "share_coordinator_key", "state_partition_for", "state_partition_for_key",
    "decode_record", "encode_record",
]
