"""The leader-epoch cache (Kafka's LeaderEpochFileCache) and its checkpoint text."""
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from actors.partition.epoch_cache import (
    UNDEFINED_EPOCH_END, CheckpointError, EpochEndOffset, EpochEntry, LeaderEpochCache, decode_checkpoint,
    encode_checkpoint,
)


def cache(*pairs):
    return LeaderEpochCache(pairs)


def test_assign_keeps_epochs_and_offsets_increasing():
    c = LeaderEpochCache()
    assert c.latest_epoch == -1 and c.latest_entry is None
    assert c.assign(0, 0)
    assert not c.assign(0, 5), "a later batch of the latest epoch changes nothing"
    assert c.assign(2, 5)
    assert c.entries() == [EpochEntry(0, 0), EpochEntry(2, 5)]
    # a new epoch starting at or below an existing start removes the contradicted entries
    assert c.assign(3, 5)
    assert c.entries() == [EpochEntry(0, 0), EpochEntry(3, 5)]
    # an older epoch than the latest replaces everything from that epoch on (a new leader wins)
    assert c.assign(1, 7)
    assert c.entries() == [EpochEntry(0, 0), EpochEntry(1, 7)]
    # the same epoch moving its start down
    assert c.assign(1, 6)
    assert c.entries() == [EpochEntry(0, 0), EpochEntry(1, 6)]
    with pytest.raises(ValueError):
        c.assign(-1, 3)


def test_end_offset_for_answers_like_offsets_for_leader_epoch():
    c = cache((1, 0), (3, 10), (5, 20))
    assert c.end_offset_for(5, 27) == EpochEndOffset(5, 27), "latest epoch ends at the log end"
    assert c.end_offset_for(3, 27) == EpochEndOffset(3, 20)
    assert c.end_offset_for(4, 27) == EpochEndOffset(3, 20), "largest known epoch <= requested"
    assert c.end_offset_for(2, 27) == EpochEndOffset(1, 10)
    assert c.end_offset_for(0, 27) == EpochEndOffset(0, 0), "older than the first epoch: its start"
    assert c.end_offset_for(6, 27) == UNDEFINED_EPOCH_END, "newer than anything we have"
    assert c.end_offset_for(-1, 27) == UNDEFINED_EPOCH_END
    assert LeaderEpochCache().end_offset_for(0, 0) == UNDEFINED_EPOCH_END
    assert UNDEFINED_EPOCH_END.undefined and not EpochEndOffset(3, 20).undefined


def test_epoch_lookups():
    c = cache((1, 0), (3, 10))
    assert c.epoch_for_offset(0) == 1 and c.epoch_for_offset(9) == 1 and c.epoch_for_offset(10) == 3
    assert c.start_offset_of(3) == 10 and c.start_offset_of(2) == -1
    assert cache((2, 5)).epoch_for_offset(4) == -1


def test_truncate_from_end_drops_epochs_starting_at_or_after_the_cut():
    c = cache((1, 0), (3, 10), (5, 20))
    assert not c.truncate_from_end(25)
    assert c.truncate_from_end(20)
    assert c.entries() == [EpochEntry(1, 0), EpochEntry(3, 10)]
    assert c.truncate_from_end(11) is False
    assert c.truncate_from_end(0)
    assert c.entries() == []


def test_truncate_from_start_moves_the_covering_epoch_up():
    c = cache((1, 0), (3, 10), (5, 20))
    assert c.truncate_from_start(15)
    assert c.entries() == [EpochEntry(3, 15), EpochEntry(5, 20)]
    assert not c.truncate_from_start(15)
    assert c.truncate_from_start(20)
    assert c.entries() == [EpochEntry(5, 20)]
    assert c.truncate_from_start(30)
    assert c.entries() == [EpochEntry(5, 30)]
    assert not cache((2, 5)).truncate_from_start(3), "below the first epoch: nothing to drop"


def test_checkpoint_round_trip_and_corruption():
    c = cache((0, 0), (2, 5), (7, 123456789012))
    text = c.encode_checkpoint()
    assert text.splitlines()[:3] == ["1", "3", "0 0"]
    assert LeaderEpochCache.decode_checkpoint(text).entries() == c.entries()
    assert decode_checkpoint(encode_checkpoint([])) == []
    with pytest.raises(CheckpointError):
        decode_checkpoint(text[:-5])                      # torn
    with pytest.raises(CheckpointError):
        decode_checkpoint(text.replace("2 5", "2 6"))     # bit rot: checksum
    with pytest.raises(CheckpointError):
        decode_checkpoint("")
    # well-formed checksums over bad content are still refused
    for body in ("2\n0\n", "1\n2\n0 0\n", "1\n2\n3 0\n2 5\n", "1\n1\nx y\n", "1\n1\n-1 0\n",
                 "1\n1\n\u00b2 0\n", "1\n\u00b9\n0 0\n"):
        with pytest.raises(CheckpointError):
            decode_checkpoint(body + f"crc32 {zlib.crc32(body.encode()):08x}\n")


# ---- property: the cache answers as a scan of the log would --------------------------------
def _scan(log, requested_epoch):
    """OffsetsForLeaderEpoch computed from the log's (offset -> epoch) entries directly."""
    epochs = sorted(set(log))
    if requested_epoch < 0 or not epochs or requested_epoch > epochs[-1]:
        return EpochEndOffset(-1, -1)
    if requested_epoch == epochs[-1]:
        return EpochEndOffset(requested_epoch, len(log))
    below = [e for e in epochs if e <= requested_epoch]
    next_start = min(o for o, e in enumerate(log) if e > requested_epoch)
    return EpochEndOffset(below[-1] if below else requested_epoch, next_start)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("append"), st.integers(0, 3), st.integers(1, 4)),
                          st.tuples(st.just("truncate"), st.integers(0, 30), st.just(0))), max_size=25))
def test_cache_matches_a_scan_of_the_log(ops):
    log: list[int] = []
    c = LeaderEpochCache()
    for op, a, b in ops:
        if op == "append":  # a batch of b records in epoch (latest + a): epochs never go down
            epoch = (log[-1] if log else 0) + a
            c.assign(epoch, len(log))
            log.extend([epoch] * b)
        else:
            cut = min(a, len(log))
            del log[cut:]
            c.truncate_from_end(cut)
        for requested in range(-1, (log[-1] if log else 0) + 3):
            assert c.end_offset_for(requested, len(log)) == _scan(log, requested), (log, requested)
        if log:
            assert c.epoch_for_offset(len(log) - 1) == log[-1]
            assert LeaderEpochCache.decode_checkpoint(c.encode_checkpoint()).entries() == c.entries()
