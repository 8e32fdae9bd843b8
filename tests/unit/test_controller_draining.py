"""A broker drained and unregistered in the controller's pure core: the balancer's plans (actors/controller/
balancer.py, read from the core as actors/controller/balancing.py reads it) carried out as AlterPartitionReassignments
with replicas catching up (AlterPartition), new partitions kept off a broker being drained (as Kafka's cordoned
brokers, KIP-1066), and UnregisterBroker refused while a replica is left and replayed from the log after."""
from collections import Counter

from actors.config_schema import BROKER_DEFAULTS
from actors.controller import balancer
from actors.controller.balancing import partition_loads
from actors.controller.core import BrokerInfo, ControllerCore
from actors.controller.elections import PREFERRED
from protocol.errors import ErrorCode


def _core(brokers=4):
    core = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    log = []
    for b in range(1, brokers + 1):
        log += core.register_broker(BrokerInfo(b, "127.0.0.1", 9091 + b, None, f"node-{b}")).records
    return core, log


def _catch_up_all(core) -> list:
    """Every adding replica catches up: its leader proposes it into the ISR."""
    records = []
    for topic in core.topics.values():
        for p in topic.partitions:
            for b in list(p.adding):
                if b in p.isr:
                    continue
                leader = core.replication.brokers[p.leader]
                records += core.replication.alter_partition(
                    p.leader, leader.broker_epoch, (topic.topic_id.bytes, p.index), leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch, new_isr=p.isr + [b]).records
    return records


def _balance(core, brokers, draining, log, cap=3, balance=True):
    for _ in range(200):
        loads = partition_loads(core)
        result = balancer.plan(loads, brokers, draining, cap, balance=balance)
        assert sum(1 for p in partition_loads(core) if p.moving) <= cap
        if result.moves:
            topics = {}
            for m in result.moves:
                topics.setdefault(m.topic, []).append((m.partition, list(m.replicas)))
            answers, outcome = core.alter_partition_reassignments(list(topics.items()),
                                                                  allow_replication_factor_change=False)
            assert all(error == 0 for _, parts in answers for _, error, _ in parts), answers
            log += outcome.records
        if result.elections and not any(p.moving for p in loads) and not result.moves:
            topics = {}
            for name, index in result.elections:
                topics.setdefault(name, []).append(index)
            log += core.elect_leaders(PREFERRED, list(topics.items()))[1].records
        for topic in core.topics.values():  # never below the replication factor in the ISR
            for p in topic.partitions:
                assert len(p.isr) >= 2, (topic.name, p)
        log += _catch_up_all(core)
        if result.empty and not any(p.moving for p in partition_loads(core)):
            return
    raise AssertionError("no convergence")


def test_a_fourth_broker_gets_its_share_then_is_drained_and_unregistered():
    core, log = _core(3)
    log += core.create_topic("orders", 12, 2, {}).records
    log += core.register_broker(BrokerInfo(4, "127.0.0.1", 9095, None, "node-4")).records
    _balance(core, [1, 2, 3, 4], set(), log)
    on = {b: sum(b in p.replicas for p in core.topics["orders"].partitions) for b in (1, 2, 3, 4)}
    assert on == {1: 6, 2: 6, 3: 6, 4: 6}
    leaders = {b: sum(p.leader == b for p in core.topics["orders"].partitions) for b in (1, 2, 3, 4)}
    assert leaders == {1: 3, 2: 3, 3: 3, 4: 3}

    log += core.alter_broker_configs("4", {"kray.broker.draining": "true"}).records
    assert core.draining_brokers() == {4}
    assert core.unregister_broker(4).error_code == ErrorCode.INVALID_REQUEST  # still holds replicas
    log += core.create_topic("new", 6, 3, {}).records
    assert all(4 not in p.replicas for p in core.topics["new"].partitions), "no new partition on a draining broker"
    assert core.create_topic("wide", 1, 4, {}).error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    _balance(core, [1, 2, 3, 4], {4}, log)
    assert all(4 not in p.replicas and p.leader != 4 for t in core.topics.values() for p in t.partitions)
    outcome = core.unregister_broker(4)
    assert outcome.error_code == 0
    log += outcome.records
    assert 4 not in core.brokers and 4 not in core.live_brokers()

    replayed = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    for record in log:
        replayed.apply(record)
    assert sorted(replayed.brokers) == [1, 2, 3]
    assert {t: [p.replicas for p in s.partitions] for t, s in replayed.topics.items()} == \
        {t: [p.replicas for p in s.partitions] for t, s in core.topics.items()}


def test_a_drain_without_balancing_moves_only_the_draining_brokers_replicas():
    core, log = _core(4)
    log += core.create_topic("orders", 8, 2, {}).records
    before = {p.index: list(p.replicas) for p in core.topics["orders"].partitions}
    _balance(core, [1, 2, 3, 4], {2}, log, balance=False)
    for p in core.topics["orders"].partitions:
        assert 2 not in p.replicas
        if 2 not in before[p.index]:
            assert p.replicas == before[p.index]


class _Supervision:
    def __init__(self):
        self.spawned, self.followed, self.pushed = [], 0, 0

    def follow_placements(self):
        self.followed += 1

    def push_replication_throttles(self):
        self.pushed += 1

    def note_changes(self):
        pass

    def _spawn(self, coro):
        self.spawned.append(coro)
        coro.close()


class _Leadership:
    status = None


class _Gateway:
    """The leading voter's gateway: AddRaftVoter/RemoveRaftVoter as the balancer asks for them, recorded."""

    def __init__(self):
        self.changes = []
        outer = self

        class _Method:
            def remote(self, op, voter_id, timeout_ms):
                outer.changes.append((op, voter_id))

                async def done():
                    return 0, None
                return done()
        self.change_raft_voters = _Method()


class _Shell:
    """The controller shell as balancing.Balancing uses it: the real core and reconciler, the rest recorded."""

    def __init__(self, core, serving):
        from actors.controller.reconciler import Reconciler
        self.core, self.rec, self.supervision = core, Reconciler(), _Supervision()
        self.rec.serving = set(serving)
        self.records, self.said = [], []
        # a dedicated controller (no combined voters) unless a test says otherwise
        self.voter_id, self.quorum_voters, self.leadership = None, (), _Leadership()

    def _persist(self, outcome):
        self.records += outcome.records

    def _say(self, text):
        self.said.append(text)

    async def reconfigure_replicas(self, name):
        pass


def test_the_shell_step_throttles_joining_replicas_elects_once_idle_and_retires_a_drained_broker():
    from actors.controller.balancing import Balancing
    core, _ = _core(3)
    core.broker_config.update({"kray.balancer.enable": True, "kray.balancer.max.moves.in.flight": 4,
                               "kray.balancer.replication.throttled.rate": 1000000})
    core.create_topic("orders", 8, 2, {})
    core.register_broker(BrokerInfo(4, "127.0.0.1", 9095, None, "node-4"))
    shell = _Shell(core, {1, 2, 3})
    balancing = Balancing(shell)
    result = balancing.step()
    assert result.moves == [] and any("broker 4 is down or starting" in s for s in shell.said), \
        "a broker that does not serve yet holds the balance back"
    shell.rec.serving.add(4)
    before = {p.index: list(p.replicas) for p in core.topics["orders"].partitions}
    result = balancing.step()
    assert 0 < len(result.moves) <= 4 and all(4 in m.replicas for m in result.moves)
    configs = core.topics["orders"].configs
    assert set(configs["follower.replication.throttled.replicas"].split(",")) == {f"{m.partition}:4" for m in result.moves}
    assert set(configs["leader.replication.throttled.replicas"].split(",")) == \
        {f"{m.partition}:{b}" for m in result.moves for b in before[m.partition]}
    assert core.dynamic_broker_configs["4"]["follower.replication.throttled.rate"] == 1000000
    assert "follower.replication.throttled.rate" not in core.dynamic_broker_configs.get("1", {})
    assert any(core.dynamic_broker_configs.get(str(b), {}).get("leader.replication.throttled.rate") == 1000000
               for b in (1, 2, 3))
    assert shell.supervision.followed == 1
    assert not result.elections or any(p.moving for p in partition_loads(core))
    for _ in range(20):
        _catch_up_all(core)
        balancing.step()
    assert not any(p.moving for p in partition_loads(core))
    assert "follower.replication.throttled.replicas" not in core.topics["orders"].configs
    assert "leader.replication.throttled.replicas" not in core.topics["orders"].configs
    assert not any(core.dynamic_broker_configs.values()), "the balancer removes the throttles it set"
    on = Counter(b for p in core.topics["orders"].partitions for b in p.replicas)
    assert on == {1: 4, 2: 4, 3: 4, 4: 4}
    assert {b: sum(p.leader == b for p in core.topics["orders"].partitions) for b in (1, 2, 3, 4)} == \
        {1: 2, 2: 2, 3: 2, 4: 2}

    core.alter_broker_configs("4", {"kray.broker.draining": True})
    for _ in range(20):
        _catch_up_all(core)
        balancing.step()
    assert all(4 not in p.replicas for p in core.topics["orders"].partitions)
    assert [c.__qualname__ for c in shell.supervision.spawned if "retire" in c.__qualname__] == ["Balancing._retire"]


def test_a_drained_voter_gives_its_vote_to_an_observer_before_it_retires():
    """keep_voters (kray.balancer.enable, combined voters 1-4): broker 3 votes and is drained; broker 4 observes. The
    drained broker is not retired while it votes, its vote goes to 4 (remove 3, then add 4), and then it retires."""
    import asyncio
    from actors.controller.balancing import Balancing
    from actors.controller.quorum.output import QuorumStatus, ReplicaStatus
    core, _ = _core(4)
    core.broker_config.update({"kray.balancer.enable": True})
    core.create_topic("orders", 4, 2, {})
    core.alter_broker_configs("3", {"kray.broker.draining": "true"})
    shell = _Shell(core, {1, 2, 3, 4})
    shell.voter_id, shell.quorum_voters = 1, (1, 2, 3, 4)
    gateway = shell.rec.gateways[1] = _Gateway()

    def status(voters, observers):
        return QuorumStatus(1, "leader", 5, 1, 1, 100, 100, tuple(ReplicaStatus(v, 100, 0, 0) for v in voters),
                            tuple(ReplicaStatus(o, 100, 0, 0) for o in observers))
    shell.leadership.status = status((1, 2, 3), (4,))
    balancing = Balancing(shell)
    for _ in range(20):   # broker 3's replicas move off
        _catch_up_all(core)
        balancing.step()
    assert not any(3 in p.replicas for p in core.topics["orders"].partitions)
    assert 3 not in balancing.retiring and any("still votes" in s for s in shell.said), \
        "a drained broker that votes is not retired before its vote is given away"
    asyncio.run(balancing.keep_voters())
    assert gateway.changes == [("remove", 3)]
    shell.leadership.status = status((1, 2), (3, 4))
    asyncio.run(balancing.keep_voters())
    assert gateway.changes == [("remove", 3), ("add", 4)]
    shell.leadership.status = status((1, 2, 4), (3,))
    balancing.step()
    assert 3 in balancing.retiring, "once it no longer votes, the drained broker retires"
