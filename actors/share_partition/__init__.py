"""Share-partition leader: the pure in-flight record state machine (``core``) and its Ray shell."""

from actors.share_partition.core import (
    AckOutcome, AckType, Acquired, Event, IllegalTransition, RecordState, ShareMetrics,
    SharePartition, StateBatch, TRANSITIONS, next_state,
)

__all__ = [
    "AckOutcome", "AckType", "Acquired", "Event", "IllegalTransition", "RecordState",
    "ShareMetrics", "SharePartition", "StateBatch", "TRANSITIONS", "next_state",
]
