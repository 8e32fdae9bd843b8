"""Replication throttles: the follower side's quota (actors/partition/replication_quota.py), which replicas a
topic's throttled-replicas list names, and the dynamic broker configs that carry the rates."""
from actors.config_schema import BROKER_DEFAULTS, effective_dynamic_broker_config, replica_listed
from actors.controller.core import ControllerCore
from actors.partition.replication_quota import UNLIMITED, ReplicationQuota
from protocol.errors import ErrorCode


def test_the_quota_keeps_the_average_rate_and_lets_one_fetch_overshoot():
    q = ReplicationQuota(1000)
    assert not q.exceeded(0.0)
    q.record(3000, 0.0)  # one fetch took 3 s worth
    assert q.exceeded(1.0) and q.ready_at(1.0) == 3.0
    assert not q.exceeded(3.0)
    q.set_rate(UNLIMITED)
    q.record(10**9, 3.0)
    assert not q.limited and not q.exceeded(3.0)


def test_throttled_replica_lists():
    assert replica_listed("0:1,1:2", 1, 2) and not replica_listed("0:1,1:2", 1, 1)
    assert replica_listed("*", 7, 9) and not replica_listed("", 0, 0)


def test_dynamic_broker_configs_per_broker_and_cluster_default():
    core = ControllerCore(dict(BROKER_DEFAULTS), "c")
    key = "follower.replication.throttled.rate"
    assert core.alter_broker_configs("1", {key: "5000"}).records
    assert core.alter_broker_configs("", {key: "7000"}).records
    dynamic = core.dynamic_broker_configs
    assert effective_dynamic_broker_config(key, 1, core.broker_config, dynamic) == 5000
    assert effective_dynamic_broker_config(key, 2, core.broker_config, dynamic) == 7000
    assert core.alter_broker_configs("1", {key: None}).records
    assert effective_dynamic_broker_config(key, 1, core.broker_config, dynamic) == 7000
    assert core.alter_broker_configs("3", {key: None}).records == [], "deleting what is not set changes nothing"
    refused = core.alter_broker_configs("1", {"log.retention.ms": "5"})
    assert refused.error_code == ErrorCode.INVALID_CONFIG and "dynamically" in refused.message
    assert core.alter_broker_configs("1", {key: "-1"}).error_code == ErrorCode.INVALID_CONFIG
    assert core.alter_broker_configs("x", {key: "1"}).error_code == ErrorCode.INVALID_REQUEST


def test_a_fetcher_leaves_throttled_followers_out_while_the_quota_is_exceeded():
    from actors.partition.fetcher import FETCHER_DEFAULTS, ReplicaFetcher

    class Follower:
        def __init__(self, key, throttled):
            self.key, self.throttled, self.broker_epoch = key, throttled, 1

        def next_fetch(self):
            return object()
    quota = ReplicationQuota(100)
    fetcher = ReplicaFetcher(("127.0.0.1", 1), 3, dict(FETCHER_DEFAULTS), quota=quota)
    moving, staying = Follower(("t", 0), True), Follower(("t", 1), False)
    fetcher.followers = {moving.key: moving, staying.key: staying}
    assert {f.key for f, _ in fetcher._due(0.0)} == {("t", 0), ("t", 1)}
    quota.record(500, 0.0)
    assert {f.key for f, _ in fetcher._due(1.0)} == {("t", 1)}, "the throttled one waits, the other fetches on"
    assert {f.key for f, _ in fetcher._due(5.0)} == {("t", 0), ("t", 1)}

