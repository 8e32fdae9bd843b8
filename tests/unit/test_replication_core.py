"""ReplicaCore: the leader side (HW, ISR proposals, acks=all, follower fetches) and the follower
side (next fetch, append, truncation on a diverging epoch), with a manual clock."""
import pytest

from actors.partition.epoch_cache import EpochEndOffset, LeaderEpochCache
from actors.partition.replication import (
    ACKS_ALL, AlterPartitionRequest, AlterPartitionResponse, BatchSpan, FetchAnswer, FetchRequest,
    FollowerAction, PartitionRegistration, ReplicaCore, ReplicationConfig, Role,
)
from protocol.errors import ErrorCode

LAG_MS = 1000
CONFIG = ReplicationConfig(replica_lag_time_max_ms=LAG_MS, min_insync_replicas=2)


def reg(leader=0, leader_epoch=1, partition_epoch=1, replicas=(0, 1, 2), isr=(0, 1, 2)):
    return PartitionRegistration(leader, leader_epoch, partition_epoch, tuple(replicas), tuple(isr))


def leader(log_end_offset=0, *, isr=(0, 1, 2), now_ms=0, epochs=None, high_watermark=0, config=CONFIG,
           leader_epoch=1):
    core = ReplicaCore(0, log_end_offset=log_end_offset, high_watermark=high_watermark,
                       epochs=epochs, config=config)
    core.apply_registration(reg(isr=isr, leader_epoch=leader_epoch), now_ms)
    assert core.is_leader
    return core


def fetch(core, replica, offset, now_ms, last_epoch=None):
    last = core.leader_epoch if last_epoch is None else last_epoch
    return core.handle_follower_fetch(FetchRequest(replica, core.leader_epoch, offset, last), now_ms)


def test_becoming_leader_starts_the_epoch_at_the_log_end():
    core = leader(5, epochs=LeaderEpochCache([(0, 0)]), high_watermark=3)
    assert core.leader_epoch_start_offset == 5
    assert core.epochs.end_offset_for(0, 5) == EpochEndOffset(0, 5)
    assert core.epochs.latest_entry.epoch == 1 and core.epochs.latest_entry.start_offset == 5
    assert core.high_watermark == 3, "a new leader keeps its HW until followers report"


def test_a_new_leader_answers_list_offsets_only_once_its_high_watermark_reaches_its_epoch_start():
    core = leader(5, epochs=LeaderEpochCache([(0, 0)]), high_watermark=3)
    assert core.check_list_offsets() == ErrorCode.OFFSET_NOT_AVAILABLE   # the latest offset would say 3, not 5
    fetch(core, 1, 5, 1)
    assert core.check_list_offsets() == ErrorCode.OFFSET_NOT_AVAILABLE   # follower 2 has not fetched yet
    fetch(core, 2, 5, 2)
    assert core.high_watermark == 5 and core.check_list_offsets() == ErrorCode.NONE
    assert core.check_list_offsets(current_leader_epoch=0) == ErrorCode.FENCED_LEADER_EPOCH


def test_high_watermark_is_the_smallest_log_end_of_the_isr_and_never_goes_back():
    core = leader()
    effects = core.on_leader_append(10, now_ms=1)
    assert effects.high_watermark is None and core.high_watermark == 0
    _, effects = fetch(core, 1, 10, 2)
    assert core.high_watermark == 0, "follower 2's log end is still unknown"
    _, effects = fetch(core, 2, 4, 3)
    assert effects.high_watermark == 4 and core.high_watermark == 4
    _, effects = fetch(core, 2, 8, 4)
    assert core.high_watermark == 8
    _, effects = fetch(core, 2, 6, 5)  # a delayed duplicate of an older fetch
    assert core.high_watermark == 8 and effects.high_watermark is None
    assert core.followers[2].log_end_offset == 6


def test_fetch_answer_tells_the_follower_what_to_read():
    core = leader()
    core.on_leader_append(7, now_ms=0)
    answer, _ = fetch(core, 1, 3, 1)
    assert answer.error_code == 0 and answer.read_from == 3 and answer.log_end_offset == 7
    assert answer.diverging_epoch is None and answer.high_watermark == core.high_watermark


def test_leader_epoch_checks_fence_stale_followers_and_stale_leaders():
    core = leader()
    stale = core.handle_follower_fetch(FetchRequest(1, 0, 0, -1), 0)[0]
    newer = core.handle_follower_fetch(FetchRequest(1, 2, 0, -1), 0)[0]
    stranger = core.handle_follower_fetch(FetchRequest(7, 1, 0, -1), 0)[0]
    assert stale.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert newer.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert stranger.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    follower = ReplicaCore(1, config=CONFIG)
    follower.apply_registration(reg(leader=0), 0)
    assert follower.handle_follower_fetch(FetchRequest(2, 1, 0, -1), 0)[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert follower.check_produce(1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert follower.offsets_for_leader_epoch(1, 0)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # produce and consumer reads that carry a leader epoch are checked too; -1 skips the check
    assert core.check_produce(1, current_leader_epoch=0) == ErrorCode.FENCED_LEADER_EPOCH
    assert core.check_produce(1, current_leader_epoch=2) == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert core.check_produce(1, current_leader_epoch=1) == core.check_produce(1) == ErrorCode.NONE
    assert core.validate_leader_epoch(0) == ErrorCode.FENCED_LEADER_EPOCH and core.validate_leader_epoch() == 0
    assert follower.validate_leader_epoch() == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_diverging_epoch_when_the_followers_log_parted_from_the_leaders():
    # leader: epoch 0 for [0, 5), epoch 2 from 5; a follower that wrote epoch 1 from offset 3
    core = leader(9, epochs=LeaderEpochCache([(0, 0), (2, 5)]), leader_epoch=3)
    answer, effects = fetch(core, 1, 6, 1, last_epoch=1)
    assert answer.diverging_epoch == EpochEndOffset(0, 5) and answer.read_from is None
    assert core.followers[1].log_end_offset == -1, "a diverging fetch leaves the follower's state alone"
    # a follower ahead in an epoch the leader has (its epoch ended earlier on the leader)
    answer, _ = fetch(core, 1, 7, 1, last_epoch=0)
    assert answer.diverging_epoch == EpochEndOffset(0, 5)
    # consistent: epoch 0 up to 5 -> read from 5
    answer, _ = fetch(core, 1, 5, 1, last_epoch=0)
    assert answer.diverging_epoch is None and answer.read_from == 5
    # a last fetched epoch newer than anything the leader knows, or an offset past the log end
    assert fetch(core, 1, 9, 1, last_epoch=7)[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetch(core, 2, 12, 1, last_epoch=-1)[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert core.offsets_for_leader_epoch(3, 1) == (0, EpochEndOffset(0, 5))
    assert core.offsets_for_leader_epoch(2, 1)[0] == ErrorCode.FENCED_LEADER_EPOCH


def test_isr_shrinks_by_proposal_and_the_maximal_isr_holds_the_hw_meanwhile():
    core = leader()
    core.on_leader_append(10, now_ms=0)
    fetch(core, 1, 10, 100)
    fetch(core, 2, 2, 100)
    assert core.high_watermark == 2
    assert core.tick(now_ms=LAG_MS).alter_partition is None, "within replica.lag.time.max.ms"
    fetch(core, 1, 10, LAG_MS + 50)
    effects = core.tick(now_ms=LAG_MS + 100)
    request = effects.alter_partition
    assert request == AlterPartitionRequest(leader_epoch=1, partition_epoch=1, new_isr=(0, 1), proposal_id=0)
    assert core.isr == {0, 1, 2} and core.maximal_isr == {0, 1, 2}
    assert core.high_watermark == 2, "the pending shrink still waits for replica 2"
    assert core.tick(now_ms=LAG_MS + 200).alter_partition is None, "one proposal in flight"
    assert core.tick(now_ms=LAG_MS + 100 + 1000).alter_partition == request, "unanswered: resent"
    effects = core.on_alter_partition_response(
        request, AlterPartitionResponse(0, 0, 1, 2, (0, 1)), now_ms=LAG_MS + 1200)
    assert core.isr == {0, 1} and core.partition_epoch == 2 and core.pending_alter_partition is None
    assert effects.high_watermark == 10


def test_isr_expands_when_a_follower_reaches_the_hw_and_the_epoch_start():
    core = leader(4, isr=(0, 1))      # epoch 1 starts at 4
    core.on_leader_append(10, now_ms=0)
    fetch(core, 1, 10, 1)
    assert core.high_watermark == 10
    _, effects = fetch(core, 2, 6, 2)
    assert effects.alter_partition is None, "below the HW: not in sync yet"
    core.on_leader_append(12, now_ms=3)
    _, effects = fetch(core, 2, 10, 4)
    request = effects.alter_partition
    assert request == AlterPartitionRequest(1, 1, (0, 1, 2), proposal_id=0)
    assert core.maximal_isr == {0, 1, 2} and core.isr == {0, 1}
    fetch(core, 1, 12, 5)
    assert core.high_watermark == 10, "a pending expansion already counts for the HW"
    # the controller refuses (e.g. the broker is fenced): the proposal is dropped
    effects = core.on_alter_partition_response(request, AlterPartitionResponse(ErrorCode.INELIGIBLE_REPLICA), 6)
    assert core.pending_alter_partition is None and core.maximal_isr == {0, 1}
    assert core.high_watermark == 10, "replica 2 is caught up and may join: the HW waits for it (Kafka)"
    _, effects = fetch(core, 2, 12, 7)
    assert effects.alter_partition is None, "the refused proposal is not repeated at once"
    _, effects = fetch(core, 2, 12, 6 + 1000)
    assert effects.alter_partition.same_change(request), "but is after ALTER_PARTITION_RETRY_MS"
    assert effects.alter_partition.proposal_id == 1, "as a new proposal"


def test_an_error_that_may_follow_an_applied_change_keeps_the_maximal_isr():
    """Found by the simulation (seed 5137): the controller applied an expansion, and the answer to
    a duplicate of the request (INVALID_UPDATE_VERSION) overtook the success. Dropping the pending
    expansion let the HW pass records the new ISR member did not have."""
    core = leader(0, isr=(0, 2))
    core.on_leader_append(5, now_ms=0)
    fetch(core, 2, 5, 1)
    _, effects = fetch(core, 1, 5, 2)
    request = effects.alter_partition
    assert request.new_isr == (0, 1, 2)
    core.on_leader_append(9, now_ms=3)
    effects = core.on_alter_partition_response(request, AlterPartitionResponse(ErrorCode.INVALID_UPDATE_VERSION), 4)
    assert core.maximal_isr == {0, 1, 2}, "unknown outcome: keep counting replica 1"
    fetch(core, 2, 9, 5)
    assert core.high_watermark == 5, "the HW waits for replica 1"
    assert core.tick(now_ms=5000).alter_partition is None, "no resend: waiting for metadata"
    # the late success (or the metadata) settles it
    core.on_alter_partition_response(request, AlterPartitionResponse(0, 0, 1, 2, (0, 1, 2)), 6)
    assert core.isr == {0, 1, 2} and core.pending_alter_partition is None


def test_new_follower_does_not_count_for_the_hw_until_it_catches_up():
    core = leader(0, isr=(0, 1))
    core.on_leader_append(10, now_ms=0)
    fetch(core, 1, 10, 1)
    assert core.high_watermark == 10
    core.on_leader_append(20, now_ms=2)
    fetch(core, 2, 0, 3)   # far behind, never caught up
    fetch(core, 1, 20, 4)
    assert core.high_watermark == 20


def test_acks_all_waits_for_the_high_watermark():
    core = leader()
    assert core.check_produce(ACKS_ALL) == 0
    core.on_leader_append(3, now_ms=0)
    waiter, error = core.register_waiter(3)
    assert error is None and core.waiter_count == 1
    fetch(core, 1, 3, 1)
    _, effects = fetch(core, 2, 2, 1)
    assert effects.released == []
    _, effects = fetch(core, 2, 3, 2)
    assert effects.released == [(waiter, ErrorCode.NONE)]
    assert core.register_waiter(3)[1] == ErrorCode.NONE, "already below the HW: answered at once"
    waiter, error = core.register_waiter(9)
    assert error is None and core.cancel_waiter(waiter) and not core.cancel_waiter(waiter)
    # several waiters: released in offset order as the HW passes each
    core.on_leader_append(9, now_ms=3)
    w5, _ = core.register_waiter(5)
    w7, _ = core.register_waiter(7)
    w9, _ = core.register_waiter(9)
    w6, _ = core.register_waiter(6)  # out of append order (an idempotent duplicate's old offset)
    fetch(core, 1, 9, 4)
    _, effects = fetch(core, 2, 7, 4)
    assert effects.released == [(w5, 0), (w7, 0), (w6, 0)] and core.waiter_count == 1
    _, effects = fetch(core, 2, 9, 5)
    assert effects.released == [(w9, 0)]


def test_a_lapsed_broker_session_answers_every_waiting_acks_all_produce_at_once():
    """The gateway's session with the controller ran out: its leaders answer their waiting
    acks=all produces NOT_LEADER_OR_FOLLOWER now rather than at the request timeout; nothing is
    committed by that, and the high watermark moving later releases nothing twice."""
    core = leader()
    core.on_leader_append(9, now_ms=0)
    w3, _ = core.register_waiter(3)
    w9, _ = core.register_waiter(9)
    effects = core.release_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert effects.released == [(w3, ErrorCode.NOT_LEADER_OR_FOLLOWER), (w9, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    assert effects.high_watermark is None and core.high_watermark == 0 and core.waiter_count == 0
    fetch(core, 1, 9, 1)
    _, effects = fetch(core, 2, 9, 2)
    assert effects.released == [] and core.high_watermark == 9
    assert not core.cancel_waiter(w3)


def test_min_insync_replicas_before_and_after_the_append():
    core = leader()
    core.on_leader_append(3, now_ms=0)
    waiter, _ = core.register_waiter(3)
    fetch(core, 1, 0, 1)
    request = core.tick(now_ms=LAG_MS + 10).alter_partition
    assert request.new_isr == (0,)
    effects = core.on_alter_partition_response(request, AlterPartitionResponse(0, 0, 1, 2, (0,)), LAG_MS + 20)
    assert effects.released == [(waiter, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)]
    assert core.high_watermark == 0, "no HW progress under min.insync.replicas"
    assert core.check_produce(ACKS_ALL) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert core.check_produce(1) == ErrorCode.NONE
    assert core.register_waiter(4)[1] == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    # min.insync.replicas is capped by the replication factor
    single = ReplicaCore(0, config=CONFIG)
    single.apply_registration(reg(replicas=(0,), isr=(0,)), 0)
    assert single.check_produce(ACKS_ALL) == 0
    single.on_leader_append(1, now_ms=0)
    assert single.high_watermark == 1


def test_losing_leadership_releases_waiters_and_stale_metadata_is_ignored():
    core = leader()
    core.on_leader_append(3, now_ms=0)
    waiter, _ = core.register_waiter(3)
    assert core.apply_registration(reg(leader=1, leader_epoch=0, partition_epoch=9), 1).released == []
    assert core.is_leader, "an older leader epoch is stale"
    effects = core.apply_registration(reg(leader=1, leader_epoch=2, partition_epoch=2), 1)
    assert effects.released == [(waiter, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    assert core.role is Role.FOLLOWER and core.leader_id == 1
    assert core.check_produce(ACKS_ALL) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # removed from the assignment: no role
    core.apply_registration(reg(leader=1, leader_epoch=3, partition_epoch=3, replicas=(1, 2), isr=(1, 2)), 2)
    assert core.role is Role.NONE and core.next_fetch() is None


def test_metadata_older_than_the_logs_newest_epoch_is_ignored_after_a_restart():
    restarted = ReplicaCore(0, log_end_offset=12, epochs=LeaderEpochCache([(0, 0), (2, 9)]), config=CONFIG)
    restarted.apply_registration(reg(leader=0, leader_epoch=0, partition_epoch=3), 0)
    assert restarted.role is Role.NONE and restarted.epochs.latest_epoch == 2
    restarted.apply_registration(reg(leader=1, leader_epoch=3, partition_epoch=6), 0)
    assert restarted.role is Role.FOLLOWER


def test_same_epoch_metadata_updates_the_isr_and_replaces_a_pending_proposal():
    core = leader()
    core.on_leader_append(5, now_ms=0)
    fetch(core, 1, 5, 1)
    request = core.tick(now_ms=LAG_MS + 1).alter_partition
    assert request.new_isr == (0, 1)
    core.apply_registration(reg(partition_epoch=2, isr=(0, 1)), LAG_MS + 2)
    assert core.isr == {0, 1} and core.pending_alter_partition is None and core.high_watermark == 5
    # the answer to the overtaken proposal changes nothing
    effects = core.on_alter_partition_response(request, AlterPartitionResponse(ErrorCode.INVALID_UPDATE_VERSION), 9)
    assert effects.alter_partition is None and core.isr == {0, 1}


# ---- follower side --------------------------------------------------------------------------
def follower(log_end_offset=0, epochs=(), leader_epoch=1, high_watermark=0):
    core = ReplicaCore(1, log_end_offset=log_end_offset, epochs=LeaderEpochCache(epochs),
                       high_watermark=high_watermark, config=CONFIG)
    core.apply_registration(reg(leader=0, leader_epoch=leader_epoch), 0)
    assert core.role is Role.FOLLOWER
    return core


def test_follower_fetches_from_its_log_end_and_appends():
    core = follower()
    request = core.next_fetch()
    assert request == FetchRequest(1, 1, 0, -1)
    step = core.on_fetch_response(request, FetchAnswer(0, 2, 0, 5, read_from=0),
                                  [BatchSpan(0, 2, 0), BatchSpan(3, 4, 1)])
    assert step.action is FollowerAction.APPEND and step.high_watermark == 2
    assert core.log_end_offset == 5 and core.epochs.entries()[-1].start_offset == 3
    assert core.next_fetch() == FetchRequest(1, 1, 5, 1)
    # duplicates and answers to older requests are ignored
    assert core.on_fetch_response(request, FetchAnswer(0, 2, 0, 5, read_from=0), [BatchSpan(0, 2, 0)]).action \
        is FollowerAction.IGNORE
    assert core.on_fetch_response(core.next_fetch(), FetchAnswer(0, 9, 0, 9, read_from=4), [BatchSpan(4, 8, 1)]).action \
        is FollowerAction.IGNORE, "batches that do not start at the log end"
    step = core.on_fetch_response(core.next_fetch(), FetchAnswer(0, 5, 0, 5, read_from=5))
    assert step.action is FollowerAction.NONE and core.high_watermark == 5
    assert core.on_fetch_response(core.next_fetch(), FetchAnswer(ErrorCode.FENCED_LEADER_EPOCH)).action \
        is FollowerAction.IGNORE


def test_follower_truncates_to_the_diverging_epochs_end():
    # follower wrote epoch 1 from 5 to 8 as a short-lived leader; the new leader's epoch 1 ended at 6
    core = follower(8, [(0, 0), (1, 5)], leader_epoch=2, high_watermark=5)
    step = core.on_fetch_response(core.next_fetch(), FetchAnswer(0, 5, 0, 9, diverging_epoch=EpochEndOffset(1, 6)))
    assert step.action is FollowerAction.TRUNCATE and step.truncate_to == 6
    assert core.log_end_offset == 6 and core.high_watermark == 5


def test_follower_that_never_saw_the_leaders_epoch_truncates_in_rounds():
    # leader: epoch 0 [0,4), epoch 1 [4,8), epoch 3 from 8; follower: epoch 0 [0,6), epoch 2 [6,9)
    leader_core = leader(10, epochs=LeaderEpochCache([(0, 0), (1, 4), (3, 8)]), leader_epoch=4)
    core = follower(9, [(0, 0), (2, 6)], leader_epoch=4)
    truncations = []
    for _ in range(5):
        request = core.next_fetch()
        answer, _ = leader_core.handle_follower_fetch(request, 1)
        step = core.on_fetch_response(request, answer)
        if answer.diverging_epoch is None:
            break
        assert step.action is FollowerAction.TRUNCATE
        truncations.append((answer.diverging_epoch, step.truncate_to))
    assert truncations == [(EpochEndOffset(1, 8), 6), (EpochEndOffset(0, 4), 4)]
    assert answer.read_from == 4 and core.log_end_offset == 4 and core.epochs.latest_epoch == 0


def test_follower_out_of_range_resets_to_the_leaders_log():
    core = follower(8, [(0, 0)], high_watermark=4)
    step = core.on_fetch_response(core.next_fetch(), FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, 5, 0, 6))
    assert step.action is FollowerAction.TRUNCATE and step.truncate_to == 6 and core.log_end_offset == 6 and core.high_watermark == 4
    core = follower(2, [(0, 0)])
    step = core.on_fetch_response(core.next_fetch(), FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, 50, 40, 60))
    assert step.action is FollowerAction.RESET and step.truncate_to == 40
    assert core.log_end_offset == core.log_start_offset == 40 and len(core.epochs) == 0


def test_leader_append_requires_leadership():
    core = follower()
    with pytest.raises(RuntimeError):
        core.on_leader_append(3, now_ms=0)


def test_log_start_offset_moves_the_epoch_cache_and_bounds_fetches():
    core = leader(10, epochs=LeaderEpochCache([(0, 0), (1, 6)]), leader_epoch=2)
    core.advance_log_start_offset(4)
    core.advance_log_start_offset(2)  # never backwards
    assert core.log_start_offset == 4 and core.epochs.earliest_entry.start_offset == 4
    answer, _ = fetch(core, 1, 3, 1, last_epoch=0)
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and answer.log_start_offset == 4


def test_follower_log_start_follows_the_leaders():
    core = follower()
    step = core.on_fetch_response(core.next_fetch(), FetchAnswer(0, 4, 3, 10, read_from=0), [BatchSpan(0, 9, 0)])
    assert step.log_start_offset == 3 and core.log_start_offset == 3
    assert core.epochs.earliest_entry.start_offset == 3
    step = core.on_fetch_response(core.next_fetch(), FetchAnswer(0, 6, 8, 10, read_from=10))
    assert step.log_start_offset == 8 and core.high_watermark == 8, "log start <= HW"
    step = core.on_fetch_response(core.next_fetch(), FetchAnswer(0, 6, 8, 10, read_from=10))
    assert step.log_start_offset is None
    step = core.on_fetch_response(core.next_fetch(), FetchAnswer(0, 12, 11, 12, read_from=10))
    assert step.log_start_offset is None, "beyond our log end: the next fetch resets instead"


def test_unconfirmed_records_below_the_leaders_log_start_do_not_survive_a_truncation():
    """Found by the simulation with DeleteRecords (seed 27268): the leader deleted offset 0, so its
    epoch cache starts at 1; a follower with its own old epoch-0 records got the diverging epoch
    (0, 1) and kept offset 0, a record never committed, which it would serve if elected. Epoch 0
    is older than any epoch the leader holds: the follower is told OFFSET_OUT_OF_RANGE and starts
    over at the leader's log start (seed 458 of the batched simulation: with the diverging epoch,
    a stale fetch could also take such a follower into the ISR before it moved its log start)."""
    leader_core = leader(4, epochs=LeaderEpochCache([(1, 0)]), leader_epoch=1)
    leader_core.advance_log_start_offset(1)
    core = follower(4, [(0, 0)], leader_epoch=1)
    request = core.next_fetch()
    answer, effects = leader_core.handle_follower_fetch(request, 1)
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and answer.log_start_offset == 1
    assert effects.alter_partition is None, "not taken into the ISR"
    step = core.on_fetch_response(request, answer)
    assert step.action is FollowerAction.RESET and step.truncate_to == 1
    assert core.log_start_offset == core.log_end_offset == core.high_watermark == 1


def test_the_high_watermark_does_not_wait_for_a_fenced_broker_to_rejoin():
    """A follower caught up a moment before its broker died: once the controller has removed it
    from the ISR, the HW waits for it to rejoin only while its broker is not fenced (Kafka's
    isReplicaIsrEligible); else acks=all writes would stall for replica.lag.time.max.ms."""
    core = leader(isr=(0, 1, 2))
    fetch(core, 1, 0, 0)
    fetch(core, 2, 0, 0)
    core.on_leader_append(10, now_ms=1)
    fetch(core, 1, 10, 2)
    waiter, error = core.register_waiter(10)
    assert error is None
    # broker 2 dies: the controller fences it and shrinks the ISR; it was caught up at t=0
    effects = core.apply_registration(reg(partition_epoch=2, isr=(0, 1)), now_ms=3)
    assert core.high_watermark == 0 and not effects.released, "still within the lag time: waits for 2"
    effects = core.set_ineligible_replicas([2], now_ms=4)
    assert core.high_watermark == 10 and effects.released == [(waiter, ErrorCode.NONE)]
    assert core.set_ineligible_replicas([2], now_ms=5).high_watermark is None, "no change, no effects"
