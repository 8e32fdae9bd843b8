"""QuorumLog: batches, the epoch index, and the two questions Fetch asks of it (does the fetcher
diverge? where does it cut?)."""
import pytest

from actors.controller.quorum import Batch, LogError, QuorumLog


def log_of(*epochs: int, size: int = 1) -> QuorumLog:
    """A log of batches of `size` records, one per epoch given, in order."""
    log = QuorumLog()
    for epoch in epochs:
        log.append(Batch(log.end_offset, epoch, tuple(range(size))))
    return log


def test_an_empty_log_ends_at_0_in_epoch_0_and_any_first_fetch_is_valid():
    log = QuorumLog()
    assert (log.end_offset, log.last_epoch) == (0, 0)
    assert log_of(1, 1).diverging(0, 0) is None


def test_offsets_count_records_and_epochs_start_where_their_first_batch_does():
    log = log_of(1, 1, 3, 3, 5, size=2)
    assert log.end_offset == 10 and log.last_epoch == 5
    assert log.end_offset_for_epoch(1) == (1, 4)
    assert log.end_offset_for_epoch(2) == (1, 4)     # no epoch 2: the largest below it
    assert log.end_offset_for_epoch(3) == (3, 8)
    assert log.end_offset_for_epoch(7) == (5, 10)    # the latest epoch ends at the log end
    assert log.end_offset_for_epoch(0) == (0, 0)     # older than every epoch: the first start


def test_the_leader_answers_a_diverging_epoch_where_the_fetchers_log_is_not_a_prefix():
    leader = log_of(1, 1, 3, 3)                      # epochs 1 at 0..1, 3 at 2..3
    assert leader.diverging(4, 3) is None            # caught up
    assert leader.diverging(3, 3) is None            # behind, same history
    assert leader.diverging(2, 1) is None
    assert leader.diverging(3, 1) == (1, 2)          # a tail of epoch 1 the leader does not have
    assert leader.diverging(3, 2) == (1, 2)          # an epoch the leader never saw
    assert leader.diverging(5, 3) == (3, 4)          # longer than the leader in its own epoch


def test_a_follower_cuts_at_the_end_of_the_shared_epoch_and_never_inside_a_batch():
    follower = log_of(1, 1, 2, 2, 2)                 # epoch 2 written by a leader that lost it
    assert follower.truncation_offset(1, 2) == 2     # same epoch: the smaller end
    assert follower.truncation_offset(1, 5) == 2
    follower_b = log_of(1, 1, 1, 1)
    assert follower_b.truncation_offset(1, 2) == 2   # the leader's epoch 1 is shorter
    assert follower.truncation_offset(3, 9) == 5     # no epoch 3 here: end of the largest below (2)
    assert log_of(4, 4).truncation_offset(1, 0) == 0  # everything here is newer than the leader's epoch
    follower.truncate_to(2)
    assert follower.end_offset == 2 and follower.last_epoch == 1
    with pytest.raises(LogError):
        log_of(1, 1, size=2).truncate_to(1)


def test_reads_are_whole_batches_at_least_one_within_the_record_limit():
    log = log_of(1, 1, 1, 1, size=3)
    assert [b.base_offset for b in log.read(0, 7)] == [0, 3]
    assert [b.base_offset for b in log.read(3, 1)] == [3]   # one batch even above the limit
    assert log.read(12, 5) == ()
    with pytest.raises(LogError):
        log.read(1, 5)
    assert [b.base_offset for b in log.batches_between(3, 9)] == [3, 6]


def test_appends_keep_the_log_contiguous_and_epochs_non_decreasing():
    log = log_of(2)
    with pytest.raises(LogError):
        log.append(Batch(5, 2, ("x",)))      # a gap
    with pytest.raises(LogError):
        log.append(Batch(1, 1, ("x",)))      # an epoch going back
    with pytest.raises(LogError):
        log.append(Batch(1, 2, ()))          # an empty batch
    log.append(Batch(1, 2, ("x",), control=False))
    assert log.end_offset == 2
