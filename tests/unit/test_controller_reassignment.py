"""Partition reassignment (AlterPartitionReassignments / ListPartitionReassignments) and ElectLeaders in the
controller's pure core, as Kafka 4.4's ReplicationControlManager and PartitionChangeBuilder decide them."""
from actors.controller.core import BrokerInfo, ControllerCore
from actors.controller.elections import PREFERRED, UNCLEAN
from actors.controller.metadata_log import MetadataLog
from actors.config_schema import BROKER_DEFAULTS
from protocol.errors import ErrorCode


def core_with(n=4, topic=("t", [[0, 1, 2]])):
    core = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    for b in range(n):
        core.register_broker(BrokerInfo(b, "127.0.0.1", 9092 + b, None, f"node-{b}"))
    name, placement = topic
    assert core.create_topic(name, -1, -1, {}, assignments=dict(enumerate(placement))).error_code == 0
    return core


def part(core, name="t", index=0):
    return core.topics[name].partitions[index]


def key(core, name="t", index=0):
    return core.topics[name].topic_id.bytes, index


def reassign(core, target, name="t", index=0, **kw):
    results, outcome = core.alter_partition_reassignments([(name, [(index, target)])], **kw)
    return results[0][1][0][1:], outcome


def catch_up(core, broker_id, name="t", index=0):
    """The partition's leader proposes `broker_id` into its ISR (AlterPartition), as a follower that caught up."""
    p = part(core, name, index)
    leader = core.replication.brokers[p.leader]
    return core.replication.alter_partition(p.leader, leader.broker_epoch, key(core, name, index),
                                            leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                                            new_isr=p.isr + [broker_id])


def test_a_move_adds_replicas_then_completes_once_they_are_in_the_isr():
    core = core_with()
    (error, message), outcome = reassign(core, [3, 1, 2])
    assert (error, message) == (0, None)
    p = part(core)
    assert (p.replicas, p.adding, p.removing, p.isr, p.leader) == ([3, 1, 2, 0], [3], [0], [0, 1, 2], 0)
    assert outcome.records and outcome.records[0]["adding"] == [3] and outcome.records[0]["removing"] == [0]
    assert core.list_partition_reassignments(None) == [("t", [(0, [3, 1, 2, 0], [3], [0])])]
    assert core.take_placement_changes() == [core.topics["t"]], "the shell starts the adding replica"
    epoch = p.leader_epoch
    decision = catch_up(core, 3)
    # complete: replicas = target, the removed replica out of the ISR, leadership off it to the
    # target's first replica (in the ISR, unfenced), a new leader epoch
    assert decision.error_code == ErrorCode.NEW_LEADER_ELECTED
    assert (p.replicas, p.adding, p.removing, p.isr, p.leader) == ([3, 1, 2], [], [], [3, 1, 2], 3)
    assert p.leader_epoch == epoch + 1
    assert core.list_partition_reassignments(None) == []
    assert core.take_placement_changes() == [core.topics["t"]], "the shell stops the removed replica"


def test_the_leader_stays_when_it_is_kept_and_the_epoch_moves_when_replicas_leave():
    core = core_with()
    reassign(core, [0, 1, 3])
    p = part(core)
    epoch = p.leader_epoch
    catch_up(core, 3)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ([0, 1, 3], [0, 1, 3], 0, epoch + 1)


def test_a_reordering_completes_at_once_and_a_same_target_changes_nothing():
    core = core_with()
    (error, _), outcome = reassign(core, [2, 1, 0])
    p = part(core)
    assert error == 0 and (p.replicas, p.adding, p.removing, p.leader) == ([2, 1, 0], [], [], 0)
    assert core.list_partition_reassignments(None) == []
    (error, _), outcome = reassign(core, [2, 1, 0])
    assert error == 0 and outcome.records == []


def test_a_shrink_completes_at_once_when_the_remaining_replicas_are_in_sync():
    core = core_with()
    (error, _), _ = reassign(core, [1])
    p = part(core)
    assert error == 0 and (p.replicas, p.isr, p.leader) == ([1], [1], 1)


def test_cancel_goes_back_to_the_original_replicas():
    core = core_with()
    reassign(core, [3, 1, 2])
    (error, message), outcome = reassign(core, None)
    p = part(core)
    assert (error, message) == (0, None)
    # Kafka's PartitionReassignmentRevert: the replicas less the adding ones, in their order during the
    # move (the target's first, then the removing ones), so the preferred replica may change
    assert (p.replicas, p.adding, p.removing, p.isr, p.leader) == ([1, 2, 0], [], [], [0, 1, 2], 0)
    assert core.take_placement_changes() == [core.topics["t"]], "the shell stops the replica that was being added"
    assert reassign(core, None)[0] == (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")


def test_a_cancel_that_needs_an_unclean_election_is_refused_unless_the_topic_allows_it():
    core = core_with(topic=("t", [[0]]))
    reassign(core, [1])
    p = part(core)
    assert (p.replicas, p.isr) == ([1, 0], [0])
    catch_up(core, 1)
    assert (p.replicas, p.isr, p.leader) == ([1], [1], 1)
    # a new move from [1] to [2]; the only ISR member 1 is fenced meanwhile, so 2 can never catch up
    reassign(core, [2])
    core.replication.broker_died(1)
    assert (p.replicas, p.isr, p.leader) == ([2, 1], [1], -1)
    # reverting would leave an ISR of adding replicas only: Kafka refuses without unclean election
    p.isr = [2]  # (as if 2 had joined, then everything else left: only an adding replica in sync)
    (error, message), _ = reassign(core, None)
    assert error == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "unclean leader election" in message
    core.alter_topic_configs("t", {"unclean.leader.election.enable": "true"}, incremental=True)
    (error, _), _ = reassign(core, None)
    assert error == 0 and (p.replicas, p.isr) == ([1], [1])


def test_bad_targets_answer_as_kafka():
    core = core_with()
    assert reassign(core, [3], name="nope")[0] == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                   "Unable to find a topic named nope.")
    assert reassign(core, [3], index=7)[0] == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:7.")
    assert reassign(core, [])[0] == (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                     "The manual partition assignment includes an empty replica list.")
    assert reassign(core, [1, 9])[0] == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment "
                                         "includes broker 9, but no such broker is registered.")
    assert reassign(core, [1, 3, 1])[0] == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition "
                                            "assignment includes the broker 1 more than once.")
    error, _ = reassign(core, [1, 2], allow_replication_factor_change=False)[0]
    assert error == ErrorCode.INVALID_REPLICATION_FACTOR
    assert reassign(core, [3, 2, 1], allow_replication_factor_change=False)[0] == (0, None)
    assert part(core).replicas == [3, 2, 1, 0]


def test_a_new_target_during_a_move_starts_from_the_current_replicas():
    core = core_with(5)
    reassign(core, [3, 1, 2])
    reassign(core, [4, 1, 2])
    p = part(core)
    assert (p.replicas, p.adding, p.removing) == ([4, 1, 2, 0, 3], [4], [0, 3])
    catch_up(core, 4)
    assert (p.replicas, p.isr, p.leader) == ([4, 1, 2], [4, 1, 2], 4)


def test_fencing_a_removing_replica_can_complete_the_move():
    core = core_with()
    reassign(core, [1, 2, 3])
    catch_up(core, 3)
    p = part(core)
    assert (p.replicas, p.leader) == ([1, 2, 3], 1)
    core2 = core_with()
    reassign(core2, [1, 2])
    p2 = part(core2)
    assert (p2.replicas, p2.isr, p2.leader) == ([1, 2], [1, 2], 1), "nothing to add: completes at once"


def test_a_reassignment_survives_replay(tmp_path):
    """A controller that takes over reads the move from the metadata log and completes it."""
    core = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    log = MetadataLog(tmp_path / "m.log")
    for b in range(4):
        log.append(core.register_broker(BrokerInfo(b, "127.0.0.1", 9092 + b, None, f"node-{b}")).records)
    log.append(core.create_topic("t", -1, -1, {}, assignments={0: [0, 1, 2]}).records)
    log.append(reassign(core, [3, 1, 2])[1].records)
    log.close()
    replay = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    for record in MetadataLog(tmp_path / "m.log").replay():
        replay.apply(record)
    replay.finish_replay()
    p = part(replay)
    assert (p.replicas, p.adding, p.removing) == ([3, 1, 2, 0], [3], [0])
    assert replay.list_partition_reassignments(None) == [("t", [(0, [3, 1, 2, 0], [3], [0])])]
    catch_up(replay, 3)
    assert (p.replicas, p.leader) == ([3, 1, 2], 3)


def test_list_names_only_partitions_being_moved():
    core = core_with(topic=("t", [[0, 1], [1, 2]]))
    reassign(core, [2, 3], index=1)
    assert core.list_partition_reassignments([("t", [0, 1, 5]), ("nope", [0])]) == [
        ("t", [(1, [2, 3, 1], [3], [1])])]
    assert core.list_partition_reassignments([("t", [0])]) == []


def test_preferred_election():
    core = core_with()
    p = part(core)
    results, outcome = core.elect_leaders(PREFERRED, [("t", [0])])
    assert results == [("t", [(0, ErrorCode.ELECTION_NOT_NEEDED, None)])] and outcome.records == []
    core.replication.broker_died(0)
    assert p.leader == 1
    results, _ = core.elect_leaders(PREFERRED, [("t", [0])])
    assert results == [("t", [(0, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None)])], "0 is fenced and out of the ISR"
    b0 = core.replication.register_broker(0, 0).broker_epoch
    core.replication.heartbeat(0, b0, 0)
    catch_up(core, 0)
    assert (p.leader, p.isr) == (1, [0, 1, 2])
    epoch = p.leader_epoch
    results, outcome = core.elect_leaders(PREFERRED, None)
    assert results == [("t", [(0, 0, None)])] and (p.leader, p.leader_epoch) == (0, epoch + 1)
    results, _ = core.elect_leaders(PREFERRED, None)
    assert results == [("t", [])], "all partitions: those needing no election are left out"
    results, _ = core.elect_leaders(PREFERRED, [("nope", [0]), ("t", [3])])
    assert results == [("nope", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope")]),
                       ("t", [(3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-3")])]


def test_unclean_election():
    core = core_with(topic=("t", [[0, 1]]))
    p = part(core)
    assert core.elect_leaders(UNCLEAN, [("t", [0])])[0] == [("t", [(0, ErrorCode.ELECTION_NOT_NEEDED, None)])]
    core.replication.broker_died(1)
    core.replication.broker_died(0)
    assert (p.leader, p.isr) == (-1, [0])
    assert core.elect_leaders(UNCLEAN, [("t", [0])])[0] == [("t", [(0, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                                                   None)])]
    b1 = core.replication.register_broker(1, 0).broker_epoch
    core.replication.heartbeat(1, b1, 0)
    assert p.leader == -1, "1 is not in the ISR: no clean leader"
    results, outcome = core.elect_leaders(UNCLEAN, [("t", [0])])
    assert results == [("t", [(0, 0, None)])] and (p.leader, p.isr) == (1, [1]) and outcome.records


def test_the_reconciler_starts_the_adding_replicas_and_stops_the_removed_ones():
    """What the supervision does with a placement change (Supervision.follow_placements), stepped by hand:
    the reconciler's `missing` starts the replica a move adds, `unwanted` stops the one it removed once it
    completed (and the one it added, after a cancel)."""
    from actors.controller.reconciler import Reconciler, StopReplica, desired_replicas, placed_replicas
    core = core_with()
    rec = Reconciler()
    registered = {0, 1, 2, 3}
    topic = core.topics["t"]

    def follow() -> tuple[list, list]:
        started, stopped = [], []
        for t in core.take_placement_changes():
            _, starts = rec.missing(desired_replicas(core, registered, [t]))
            for s in starts:
                rec.replica_started(s.key, f"replica-{s.key[2]}", (s.key[2], 0))
                started.append(s.key[2])
            stopped += [s.key[2] for s in rec.unwanted(placed_replicas(core, [t]), {t.topic_id})
                        if isinstance(s, StopReplica)]
        return started, stopped

    core.take_placement_changes()
    _, starts = rec.missing(desired_replicas(core, registered, [topic]))
    for s in starts:
        rec.replica_started(s.key, f"replica-{s.key[2]}", (s.key[2], 0))
    reassign(core, [3, 1, 2])
    assert follow() == ([3], []), "the adding replica starts; nothing stops while the move runs"
    catch_up(core, 3)
    assert follow() == ([], [0]), "the move completed: the removed replica stops"
    reassign(core, [0, 1, 2])
    assert follow() == ([0], [])
    reassign(core, None)
    assert follow() == ([], [0]), "cancelled: the replica that was being added stops"
    assert sorted(k[2] for k in rec.replicas) == [1, 2, 3]
