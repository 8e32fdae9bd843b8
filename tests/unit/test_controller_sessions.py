"""The controller's session tick and takeover arithmetic, pure (actors/controller/reconciler.py
SessionTicks and expired_sessions, actors/controller/leadership.py predecessor_credit_ms and
silent_predecessor)."""
from actors.controller.elections import ReplicationControl
from actors.controller.leadership import LEASE_SKEW_MS, predecessor_credit_ms, silent_predecessor
from actors.controller.quorum.output import QuorumStatus, ReplicaStatus
from actors.controller.reconciler import SessionTicks, expired_sessions


def test_a_late_tick_is_the_controllers_stall_not_the_brokers_silence():
    ticks = SessionTicks(now_ms=0, now_s=0.0, tick_ms=250, stall_grace_ms=1000, rebalance_interval_s=None)
    assert ticks.stalled_ms(250) == 0
    assert ticks.stalled_ms(250 + 250 + 1001) == 1001  # due at 500, came 1,001 ms later
    assert ticks.stalled_ms(1501 + 250) == 0


def test_leaders_are_rebalanced_every_interval_and_never_when_disabled():
    ticks = SessionTicks(0, 0.0, 250, 1000, rebalance_interval_s=300)
    assert [ticks.rebalance_due(t) for t in (10.0, 299.9, 300.0, 310.0, 600.0)] == [False, False, True, False, True]
    never = SessionTicks(0, 0.0, 250, 1000, rebalance_interval_s=None)
    assert not never.rebalance_due(10_000.0)


def test_expired_sessions_are_the_unfenced_brokers_silent_for_longer_than_the_session():
    replication = ReplicationControl(broker_session_timeout_ms=9000)
    for b in (0, 1, 2):
        epoch = replication.register_broker(b, 0).broker_epoch
        replication.heartbeat(b, epoch, 0)
    replication.heartbeat(1, replication.brokers[1].broker_epoch, 5000)
    replication.broker_died(2)
    assert expired_sessions(replication, 9001) == [(0, 9001)]


def test_the_predecessor_keeps_at_least_the_grace_of_its_session():
    assert predecessor_credit_ms(silent_ms=200, session_timeout_ms=9000, grace_ms=4000) == 0
    assert predecessor_credit_ms(silent_ms=3000, session_timeout_ms=9000, grace_ms=4000) == 3000 - LEASE_SKEW_MS
    assert predecessor_credit_ms(silent_ms=60_000, session_timeout_ms=9000, grace_ms=4000) == 5000


def _leader_status(node_id, voters, heard):
    return QuorumStatus(node_id, "leader", 7, node_id, node_id, 10, 10,
                        voters=tuple(ReplicaStatus(v, 10, 0, 0) for v in voters), leader_heard=heard)


def test_a_predecessor_that_went_silent_keeps_counting_its_session_but_one_that_removed_itself_does_not():
    # voter 1 led, then went silent (cut off): still a voter, its session continues from then
    assert silent_predecessor(_leader_status(2, (1, 2, 3), (1, 5000)), own_id=2) == (1, 5000)
    # voter 1 led and removed itself (RemoveRaftVoter committed with a majority, then it resigned):
    # a planned handover, its broker is as alive as any other
    assert silent_predecessor(_leader_status(2, (2, 3), (1, 5000)), own_id=2) is None
    # nobody led before this voter, or it led itself
    assert silent_predecessor(_leader_status(2, (1, 2, 3), None), own_id=2) is None
    assert silent_predecessor(_leader_status(2, (1, 2, 3), (2, 5000)), own_id=2) is None
