"""Where a new share-partition starts (issue 7 item 5): the group coordinator resolves
share.auto.offset.reset when it initializes the share-partition (KIP-932 InitializeShareGroupState),
so records produced after a member's assignment, before its first ShareFetch, are not skipped.
A fake partition handle stands in for the partition replica's `list_offsets` (no Ray)."""
import asyncio

import pytest

from actors.group_coordinator.actor import UNINITIALIZED_START_OFFSET, resolve_start_offset
from actors.share_partition.core import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, start_offset_timestamp
from protocol.errors import ErrorCode

NOW_MS = 1_800_000_000_000
HOUR_MS = 3_600_000


def test_start_offset_timestamp_follows_share_auto_offset_reset():
    assert start_offset_timestamp(None, NOW_MS) == LATEST_TIMESTAMP == -1   # Kafka's default: latest
    assert start_offset_timestamp("latest", NOW_MS) == LATEST_TIMESTAMP
    assert start_offset_timestamp("earliest", NOW_MS) == EARLIEST_TIMESTAMP == -2
    assert start_offset_timestamp("by_duration:PT1H", NOW_MS) == NOW_MS - HOUR_MS
    assert start_offset_timestamp("by_duration:P1DT30M", NOW_MS) == NOW_MS - 24 * HOUR_MS - HOUR_MS // 2
    with pytest.raises(ValueError):
        start_offset_timestamp("by_duration:soon", NOW_MS)
    with pytest.raises(ValueError):
        start_offset_timestamp("newest", NOW_MS)


class _Remote:
    def __init__(self, fn):
        self.remote = fn


class FakePartition:
    """list_offsets as PartitionReplica answers it: (error, offset, timestamp, leader epoch)."""

    def __init__(self, log_start=10, end=50, first_at_or_after=None, error=0, raises=False):
        self.calls = []

        async def list_offsets(timestamp, leader_epoch, isolation_level):
            self.calls.append((timestamp, leader_epoch, isolation_level))
            if raises:
                raise RuntimeError("the actor died")
            if error:
                return error, -1, -1, -1
            if timestamp == LATEST_TIMESTAMP:
                return 0, end, -1, 0
            if timestamp == EARLIEST_TIMESTAMP:
                return 0, log_start, -1, 0
            found = first_at_or_after(timestamp) if first_at_or_after else None
            return (0, found, timestamp, 0) if found is not None else (0, -1, -1, -1)

        self.list_offsets = _Remote(list_offsets)


def resolve(partition, configs=None):
    return asyncio.run(resolve_start_offset(partition, configs or {}, NOW_MS))


def test_latest_is_the_end_offset_at_initialization():
    p = FakePartition(end=50)
    assert resolve(p) == 50
    assert p.calls == [(LATEST_TIMESTAMP, -1, 0)], "one ListOffsets, no leader epoch, read_uncommitted"
    assert resolve(FakePartition(end=7), {"share.auto.offset.reset": "latest"}) == 7


def test_earliest_is_the_log_start():
    assert resolve(FakePartition(log_start=10), {"share.auto.offset.reset": "earliest"}) == 10


def test_by_duration_looks_up_the_timestamp_and_falls_back_to_the_end():
    p = FakePartition(end=50, first_at_or_after=lambda ts: 33 if ts == NOW_MS - HOUR_MS else None)
    assert resolve(p, {"share.auto.offset.reset": "by_duration:PT1H"}) == 33
    p = FakePartition(end=50, first_at_or_after=lambda ts: None)   # no record that recent
    assert resolve(p, {"share.auto.offset.reset": "by_duration:PT1H"}) == 50
    assert [c[0] for c in p.calls] == [NOW_MS - HOUR_MS, LATEST_TIMESTAMP]


def test_without_an_answer_the_share_partition_leader_resolves_it():
    """No handle, an error or a dead actor: initialize without a start offset (-1), and the
    share-partition leader applies share.auto.offset.reset when it first loads the state."""
    assert UNINITIALIZED_START_OFFSET == -1
    assert resolve(None) == UNINITIALIZED_START_OFFSET
    assert resolve(FakePartition(error=ErrorCode.NOT_LEADER_OR_FOLLOWER)) == UNINITIALIZED_START_OFFSET
    assert resolve(FakePartition(raises=True)) == UNINITIALIZED_START_OFFSET
    assert resolve(FakePartition(), {"share.auto.offset.reset": "by_duration:garbage"}) == UNINITIALIZED_START_OFFSET
