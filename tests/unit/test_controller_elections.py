"""ReplicationControl: broker liveness, fencing, elections and AlterPartition, with a manual clock."""
from actors.controller.elections import NO_LEADER, ReplicationControl
from actors.controller.metadata_log import MetadataLog
from protocol.errors import ErrorCode

KEY = ("t", 0)
SESSION_MS = 9000


def cluster(n=3, *, unclean=False, replicas=(0, 1, 2)):
    c = ReplicationControl(broker_session_timeout_ms=SESSION_MS, unclean_leader_election_enable=unclean)
    epochs = {}
    for b in range(n):
        epochs[b] = c.register_broker(b, now_ms=0).broker_epoch
        c.heartbeat(b, epochs[b], now_ms=0)
    c.create_partition(KEY, replicas)
    return c, epochs


def state(c):
    p = c.partitions[KEY]
    return p.leader, p.leader_epoch, p.partition_epoch, list(p.isr)


def test_registration_starts_fenced_and_a_heartbeat_unfences():
    c = ReplicationControl(broker_session_timeout_ms=SESSION_MS)
    decision = c.register_broker(4, now_ms=0)
    assert decision.records == [{"type": "broker_registration", "broker_id": 4, "broker_epoch": 1}]
    assert not c.is_live(4)
    assert c.heartbeat(4, 99, now_ms=1).error_code == ErrorCode.STALE_BROKER_EPOCH
    records = c.heartbeat(4, 1, now_ms=1).records
    assert records == [{"type": "unfence_broker", "broker_id": 4, "broker_epoch": 1}] and c.is_live(4)
    assert c.heartbeat(4, 1, now_ms=2).records == []
    assert c.register_broker(4, now_ms=3).broker_epoch == 2, "a new incarnation, a new epoch"


def test_new_partition_is_led_by_its_first_live_replica():
    c, _ = cluster()
    assert state(c) == (0, 0, 0, [0, 1, 2])
    assert c.create_partition(KEY, [0, 1]).error_code == ErrorCode.INVALID_REQUEST
    assert c.create_partition(("t", 1), [1, 1]).error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_missed_heartbeats_fence_the_leader_and_elect_from_the_isr():
    c, epochs = cluster()
    c.heartbeat(1, epochs[1], now_ms=5000)
    c.heartbeat(2, epochs[2], now_ms=5000)
    assert c.tick(now_ms=SESSION_MS).records == []
    records = c.tick(now_ms=SESSION_MS + 1).records
    assert [r["type"] for r in records] == ["fence_broker", "partition_change"]
    assert state(c) == (1, 1, 1, [1, 2]), "leader epoch and partition epoch bumped"
    assert not c.is_live(0)


def test_fencing_a_follower_shrinks_the_isr_without_a_new_leader_epoch():
    c, _ = cluster()
    records = c.broker_died(2).records
    assert records[-1]["leader"] == 0 and records[-1]["isr"] == [0, 1]
    assert state(c) == (0, 0, 1, [0, 1])
    assert c.broker_died(2).records == [], "already fenced"


def test_the_last_isr_member_stays_and_leads_again_when_it_returns():
    c, epochs = cluster()
    c.broker_died(1)
    c.broker_died(2)
    assert state(c) == (0, 0, 2, [0])
    c.broker_died(0)
    assert state(c) == (NO_LEADER, 1, 3, [0]), "no clean leader; the ISR keeps its last member"
    # an out-of-sync replica returning does not lead (unclean election is off)
    c.heartbeat(1, epochs[1], now_ms=1)
    assert state(c)[0] == NO_LEADER
    records = c.heartbeat(0, epochs[0], now_ms=2).records
    assert records[-1]["type"] == "partition_change"
    assert state(c) == (0, 2, 4, [0])


def test_unclean_election_when_enabled_picks_a_live_replica():
    c, epochs = cluster(unclean=True)
    c.broker_died(1)
    c.broker_died(2)
    c.broker_died(0)
    assert state(c)[0] == NO_LEADER
    c.heartbeat(2, epochs[2], now_ms=1)
    assert state(c) == (2, 2, 4, [2]), "unclean: the live replica becomes the whole ISR"
    per_topic = ReplicationControl(unclean_leader_election_enable=lambda key: key == ("u", 0))
    assert per_topic._unclean(("u", 0)) and not per_topic._unclean(KEY)


def test_re_registration_fences_the_old_incarnation():
    c, _ = cluster()
    decision = c.register_broker(0, now_ms=10)
    types = [r["type"] for r in decision.records]
    assert types == ["fence_broker", "partition_change", "broker_registration"]
    assert state(c)[0] == 1 and not c.is_live(0)


def test_alter_partition_checks_epochs_like_kafka():
    c, epochs = cluster()
    ok = dict(leader_epoch=0, partition_epoch=0, new_isr=[0, 1])
    assert c.alter_partition(0, 77, KEY, **ok).error_code == ErrorCode.STALE_BROKER_EPOCH
    assert c.alter_partition(0, epochs[0], ("t", 9), **ok).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.alter_partition(1, epochs[1], KEY, **ok).error_code == ErrorCode.INVALID_REQUEST, "not the leader"
    assert c.alter_partition(0, epochs[0], KEY, leader_epoch=1, partition_epoch=0,
                             new_isr=[0]).error_code == ErrorCode.NOT_CONTROLLER
    assert c.alter_partition(0, epochs[0], KEY, leader_epoch=0, partition_epoch=0,
                             new_isr=[1, 2]).error_code == ErrorCode.INVALID_REQUEST, "ISR without its leader"
    assert c.alter_partition(0, epochs[0], KEY, leader_epoch=0, partition_epoch=0,
                             new_isr=[0, 5]).error_code == ErrorCode.INVALID_REQUEST, "not a replica"
    decision = c.alter_partition(0, epochs[0], KEY, **ok)
    assert decision.error_code == 0 and decision.partition["isr"] == [0, 1] and decision.partition["partition_epoch"] == 1
    assert c.alter_partition(0, epochs[0], KEY, **ok).error_code == ErrorCode.INVALID_UPDATE_VERSION, "a duplicate"
    c.broker_died(2)
    assert c.alter_partition(0, epochs[0], KEY, leader_epoch=0, partition_epoch=1,
                             new_isr=[0, 1, 2]).error_code == ErrorCode.INELIGIBLE_REPLICA
    c.broker_died(0)
    assert c.alter_partition(0, epochs[0], KEY, leader_epoch=0, partition_epoch=1,
                             new_isr=[0]).error_code == ErrorCode.FENCED_LEADER_EPOCH, "a deposed leader"
    same = c.alter_partition(1, epochs[1], KEY, leader_epoch=1, partition_epoch=2, new_isr=[1])
    assert same.error_code == 0 and same.records == [] and same.partition["isr"] == [1]


def test_preferred_leader_returns_once_back_in_the_isr():
    c, epochs = cluster()
    c.broker_died(0)
    assert state(c) == (1, 1, 1, [1, 2])
    assert c.balance_leaders().records == [], "the preferred replica is not back"
    epochs[0] = c.register_broker(0, now_ms=1).broker_epoch
    c.heartbeat(0, epochs[0], now_ms=1)
    assert c.balance_leaders().records == [], "live, but not in the ISR yet"
    c.alter_partition(1, epochs[1], KEY, leader_epoch=1, partition_epoch=1, new_isr=[1, 2, 0])
    assert state(c) == (1, 1, 2, [0, 1, 2]), "ISR kept in assignment order"
    records = c.balance_leaders().records
    assert len(records) == 1 and state(c) == (0, 2, 3, [0, 1, 2])


def test_replay_through_the_metadata_log_rebuilds_the_same_state(tmp_path):
    log = MetadataLog(tmp_path / "m.log")
    c2 = ReplicationControl()
    # replay everything a fresh controller needs: redo the same commands, logging their records
    c = ReplicationControl(broker_session_timeout_ms=SESSION_MS)
    for b in range(3):
        d = c.register_broker(b, 0)
        log.append(d.records)
        log.append(c.heartbeat(b, d.broker_epoch, 0).records)
    log.append(c.create_partition(KEY, [0, 1, 2]).records)
    log.append(c.broker_died(0).records)
    log.append(c.tick(SESSION_MS * 2).records)
    for record in log.replay():
        c2.apply(record)
    c2.finish_replay(now_ms=100)
    assert state(c2) == state(c) and KEY in c2.partitions
    assert {b: (x.broker_epoch, x.fenced) for b, x in c2.brokers.items()} == \
        {b: (x.broker_epoch, x.fenced) for b, x in c.brokers.items()}
    assert c2.next_broker_epoch == c.next_broker_epoch
    log.close()


def test_controller_core_shares_its_partitions_and_replays_replication_records(tmp_path):
    from actors.controller.core import BrokerInfo, ControllerCore
    from actors.config_schema import BROKER_DEFAULTS

    core = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    log = MetadataLog(tmp_path / "m.log")
    for b in range(3):
        registered = core.register_broker(BrokerInfo(b, "127.0.0.1", 9092 + b, None, f"node-{b}"))
        assert core.replication.is_live(b) and registered.broker_epoch == b + 1
        log.append(registered.records)
    log.append(core.create_topic("orders", 2, 3, {}).records)
    topic = core.topics["orders"]
    key = (topic.topic_id.bytes, 0)
    assert core.replication.partitions[key] is topic.partitions[0]
    leader = topic.partitions[0].leader
    version = core.metadata_version
    records = core.replication.broker_died(leader).records
    log.append(core.replication_outcome(records).records)
    p = topic.partitions[0]
    assert p.leader != leader and leader not in p.isr and p.leader_epoch == 1 and p.partition_epoch == 1
    assert core.metadata_version > version, "replication records move the metadata version"
    replayed = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    for record in log.replay():
        replayed.apply(record)
    q = replayed.topics["orders"].partitions[0]
    assert (q.leader, q.leader_epoch, q.partition_epoch, q.isr) == (p.leader, p.leader_epoch, p.partition_epoch, p.isr)
    assert replayed.replication.partitions[key] is q and not replayed.replication.is_live(leader)
    # AlterPartition on the ControllerCore's own partition objects
    new_leader = p.leader
    epoch = core.replication.brokers[new_leader].broker_epoch
    decision = core.replication.alter_partition(new_leader, epoch, key, leader_epoch=1, partition_epoch=1,
                                                new_isr=[new_leader])
    assert decision.error_code == 0 and decision.partition["isr"] == [new_leader] and p.isr == [new_leader]
    log.append(core.delete_topic("orders").records)
    assert key not in core.replication.partitions
    log.close()


def test_each_alter_partition_proposal_is_decided_once():
    """A copy of a refused proposal that arrives after its broker became eligible must not be
    applied (found by the simulation, seed 8741): duplicates get the first answer again."""
    c, epochs = cluster()
    c.broker_died(2)
    ask = dict(leader_epoch=0, partition_epoch=1, new_isr=[0, 1, 2])
    first = c.alter_partition(0, epochs[0], KEY, proposal_id=7, **ask)
    assert first.error_code == ErrorCode.INELIGIBLE_REPLICA
    epochs[2] = c.register_broker(2, now_ms=1).broker_epoch
    c.heartbeat(2, epochs[2], now_ms=1)
    late_copy = c.alter_partition(0, epochs[0], KEY, proposal_id=7, **ask)
    assert late_copy.error_code == ErrorCode.INELIGIBLE_REPLICA and late_copy.records == []
    assert state(c)[3] == [0, 1]
    applied = c.alter_partition(0, epochs[0], KEY, proposal_id=8, **ask)
    assert applied.error_code == 0 and state(c)[3] == [0, 1, 2]
    again = c.alter_partition(0, epochs[0], KEY, proposal_id=8, **ask)
    assert again.error_code == 0 and again.records == [] and again.partition == applied.partition
    assert c.alter_partition(0, epochs[0], KEY, proposal_id=6, **ask).error_code == ErrorCode.INVALID_UPDATE_VERSION
    # without proposal ids (old callers) the epoch checks alone apply
    assert c.alter_partition(0, epochs[0], KEY, **ask).error_code == ErrorCode.INVALID_UPDATE_VERSION


def test_fencing_a_broker_touches_every_partition_it_is_in():
    c, epochs = cluster()
    c.create_partition(("t", 1), [1, 2, 0])
    c.create_partition(("t", 2), [2, 0, 1])
    c.create_partition(("u", 0), [0, 2])
    assert [c.partitions[k].leader for k in (KEY, ("t", 1), ("t", 2), ("u", 0))] == [0, 1, 2, 0]
    records = c.broker_died(0).records
    changed = {r["partition"]: (r["leader"], r["leader_epoch"], r["isr"]) for r in records[1:]}
    assert changed == {KEY: (1, 1, [1, 2]), ("t", 1): (1, 0, [1, 2]), ("t", 2): (2, 0, [2, 1]),
                       ("u", 0): (2, 1, [2])}
    assert sorted(c.partitions_led_by(2)) == [("t", 2), ("u", 0)]
    # the broker returns, rejoins the ISRs (through each leader's AlterPartition), and the
    # preferred leaders move back
    epochs[0] = c.register_broker(0, now_ms=1).broker_epoch
    c.heartbeat(0, epochs[0], now_ms=1)
    for key in (KEY, ("u", 0)):
        p = c.partitions[key]
        c.alter_partition(p.leader, epochs[p.leader], key, leader_epoch=p.leader_epoch,
                          partition_epoch=p.partition_epoch, new_isr=[*p.isr, 0])
    moved = c.balance_leaders().records
    assert {r["partition"] for r in moved} == {KEY, ("u", 0)}
    assert c.partitions[KEY].leader == 0 and c.partitions[("u", 0)].leader == 0
    assert c.partitions[("t", 2)].leader == 2
