"""A replica's small durable files beside its log: the leader-epoch checkpoint and the high
watermark (Kafka's leader-epoch-checkpoint and replication-offset-checkpoint, one per partition).

Both are written with write-temp, fsync, rename. Neither is needed for safety: a missing or torn
epoch checkpoint is rebuilt from the batch headers (every batch carries its leader epoch), and a
missing high watermark starts at the log start (the leader's next fetch answer, or a leader's
followers, move it up again)."""
from __future__ import annotations

import logging
from pathlib import Path

from actors.partition.epoch_cache import CheckpointError, LeaderEpochCache
from actors.partition.log import Log, _write_text_atomically

log = logging.getLogger("kray.partition")
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "high-watermark-checkpoint"


def load_epochs(directory: Path, partition_log: Log) -> LeaderEpochCache:
    """The checkpointed cache, cut to the log's current range; rebuilt from the log's batch
    headers when the file is missing or torn."""
    path = directory / LEADER_EPOCH_CHECKPOINT
    try:
        cache = LeaderEpochCache.decode_checkpoint(path.read_text())
    except FileNotFoundError:
        cache = None if partition_log.log_end_offset > partition_log.log_start_offset else LeaderEpochCache()
    except (OSError, CheckpointError) as e:
        log.warning("%s: %s; rebuilding it from the log", path, e)
        cache = None
    if cache is None:
        cache = LeaderEpochCache()
        for header in partition_log.iter_batch_headers():
            if header.partition_leader_epoch >= 0:
                cache.assign(header.partition_leader_epoch, header.base_offset)
    cache.truncate_from_end(partition_log.log_end_offset)
    cache.truncate_from_start(partition_log.log_start_offset)
    return cache


def save_epochs(directory: Path, cache: LeaderEpochCache) -> None:
    _write_text_atomically(directory / LEADER_EPOCH_CHECKPOINT, cache.encode_checkpoint())


def load_high_watermark(directory: Path, partition_log: Log) -> int:
    try:
        offset = int((directory / HIGH_WATERMARK_CHECKPOINT).read_text().strip())
    except (OSError, ValueError):
        offset = partition_log.log_start_offset
    return max(partition_log.log_start_offset, min(offset, partition_log.log_end_offset))


def save_high_watermark(directory: Path, offset: int) -> None:
    _write_text_atomically(directory / HIGH_WATERMARK_CHECKPOINT, f"{offset}\n")
