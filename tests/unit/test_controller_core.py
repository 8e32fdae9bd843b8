"""The controller's pure state machine: commands, validation, and replay from its own log."""
from actors.controller.core import BrokerInfo, ControllerCore
from actors.controller.metadata_log import MetadataLog
from actors.config_schema import BROKER_DEFAULTS
from protocol.errors import ErrorCode


def core_with_brokers(n=1):
    core = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    for b in range(n):
        core.register_broker(BrokerInfo(b, "127.0.0.1", 9092 + b, None, f"node-{b}"))
    return core


def test_create_topic_places_replicas_on_distinct_brokers():
    core = core_with_brokers(3)
    outcome = core.create_topic("orders", 6, 3, {})
    assert outcome.error_code == 0
    topic = core.topics["orders"]
    assert len(topic.partitions) == 6
    for p in topic.partitions:
        assert len(set(p.replicas)) == 3 and p.leader == p.replicas[0] and p.isr == p.replicas
    assert len({p.leader for p in topic.partitions}) == 3, "leadership spreads over brokers"


def test_create_topic_validation_errors():
    core = core_with_brokers(1)
    assert core.create_topic("a/b", 1, 1, {}).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert core.create_topic("x" * 250, 1, 1, {}).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert core.create_topic("..", 1, 1, {}).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert core.create_topic("t", 0, 1, {}).error_code == ErrorCode.INVALID_PARTITIONS
    assert core.create_topic("t", 1, 2, {}).error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert core.create_topic("t", 1, 1, {"retention.ms": "soon"}).error_code == ErrorCode.INVALID_CONFIG
    assert core.create_topic("t", 1, 1, {"no.such.config": "1"}).error_code == ErrorCode.INVALID_CONFIG
    assert core.create_topic("t", 1, 1, {}).error_code == 0
    assert core.create_topic("t", 1, 1, {}).error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert core.create_topic("my.topic", 1, 1, {}).error_code == 0
    assert core.create_topic("my_topic", 1, 1, {}).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert core.create_topic("v", 1, 1, {}, validate_only=True).error_code == 0
    assert "v" not in core.topics


def test_a_retried_creation_succeeds_where_another_request_finds_the_topic_exists(tmp_path):
    """A CreateTopics whose answer was lost (a timeout, a controller failover after the commit) is
    retried with the same creation id: it answers success, also on a controller that took over and
    replayed the log; another request for the same name answers TOPIC_ALREADY_EXISTS."""
    core = core_with_brokers(1)
    created = core.create_topic("t", 2, 1, {}, creation_id="request-1")
    assert created.error_code == 0
    log = MetadataLog(tmp_path / "m.log")
    log.append([{"type": "broker", "broker_id": 0, "host": "127.0.0.1", "port": 9092, "rack": None,
                 "node_id": "node-0"}] + created.records)
    log.close()
    replayed = core_with_brokers(0)
    for r in MetadataLog(tmp_path / "m.log").replay():
        replayed.apply(r)
    replayed.finish_replay()
    for controller in (core, replayed):
        retry = controller.create_topic("t", 2, 1, {}, creation_id="request-1")
        assert (retry.error_code, retry.records) == (0, [])
        assert controller.create_topic("t", 2, 1, {}, creation_id="request-2").error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        assert controller.create_topic("t", 2, 1, {}).error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert replayed.topics["t"].topic_id == core.topics["t"].topic_id


def test_defaults_come_from_broker_config():
    core = core_with_brokers(1)
    core.broker_config["num.partitions"] = 4
    core.create_topic("d", -1, -1, {"retention.ms": "1000"})
    topic = core.topics["d"]
    assert len(topic.partitions) == 4
    effective = core.effective_configs(topic)
    assert effective["retention.ms"] == 1000
    assert effective["segment.bytes"] == BROKER_DEFAULTS["log.segment.bytes"]


def test_replay_rebuilds_the_same_state(tmp_path):
    core = core_with_brokers(2)
    log = MetadataLog(tmp_path / "m.log")
    records = []
    for outcome in (core.create_topic("a", 3, 2, {"retention.ms": "5"}), core.create_partitions("a", 5),
                    core.create_topic("b", 1, 1, {}), core.delete_topic("b"),
                    core.alter_topic_configs("a", {"retention.bytes": "100"}, incremental=True)):
        assert outcome.error_code == 0
        records += outcome.records
    pid1, outcome = core.allocate_producer_id()
    records += outcome.records
    pid2, outcome = core.allocate_producer_id()
    assert outcome.records == [] and pid2 == pid1 + 1
    broker_records = [{"type": "broker", "broker_id": b.broker_id, "host": b.host, "port": b.port, "rack": None,
                       "node_id": b.node_id} for b in core.brokers.values()]
    log.append(broker_records + records)
    log.close()

    replayed = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    for r in MetadataLog(tmp_path / "m.log").replay():
        replayed.apply(r)
    replayed.finish_replay()
    assert set(replayed.topics) == {"a"}
    a, b = replayed.topics["a"], core.topics["a"]
    assert (a.topic_id, a.partitions, a.configs) == (b.topic_id, b.partitions, b.configs)
    assert a.configs == {"retention.ms": 5, "retention.bytes": 100}
    pid3, _ = replayed.allocate_producer_id()
    assert pid3 > pid2, "producer ids are never handed out twice across a restart"


def test_metadata_log_truncates_a_torn_tail(tmp_path):
    path = tmp_path / "m.log"
    log = MetadataLog(path)
    log.append([{"type": "x", "n": 1}, {"type": "x", "n": 2}])
    log.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x30garbage")
    log = MetadataLog(path)
    assert [r["n"] for r in log.replay()] == [1, 2]
    log.append([{"type": "x", "n": 3}])
    log.close()
    assert [r["n"] for r in MetadataLog(path).replay()] == [1, 2, 3]

