"""Which topic a share group's dead letters go to (KIP-1191), as the dead-letter writer decides it
from the controller's metadata: an enabled topic is used, a topic without
errors.deadletterqueue.group.enable is not, and a missing one is created only where the broker's
errors.deadletterqueue.auto.create.topics.enable says so. A fake controller, no Ray."""
import asyncio
from types import SimpleNamespace

from actors.share_partition.dead_letter_writer import DeadLetterWriter, DlqTarget
from actors.config_schema import BROKER_DEFAULTS


class Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        async def answer():
            return self.fn(*args)
        return answer()


class FakeController:
    """Holds topics by name; create_topic adds one with the configs it is given."""

    def __init__(self, topics):
        self.topics, self.created = dict(topics), []
        self.image = Method(lambda: SimpleNamespace(topics=dict(self.topics), brokers={
            1: SimpleNamespace(host="10.0.0.1", port=9092)}))
        self.create_topic = Method(self._create)

    def _create(self, name, partitions, replicas, configs):
        self.created.append((name, partitions, replicas, configs))
        self.topics[name] = topic(configs={k: v == "true" for k, v in configs.items()}, partitions=partitions)
        return 0, None, {}


def topic(configs, partitions=1):
    return SimpleNamespace(configs=configs, partitions=[SimpleNamespace(leader=1) for _ in range(partitions)])


def target(topics, name, **broker):
    controller = FakeController(topics)
    writer = DeadLetterWriter(SimpleNamespace(topic="orders", partition=0), dict(BROKER_DEFAULTS) | broker, controller)
    return asyncio.run(writer._target(name)), controller


def test_an_enabled_topic_is_used_at_its_leaders_addresses():
    found, _ = target({"dlq.a": topic({"errors.deadletterqueue.group.enable": True}, 2)}, "dlq.a")
    assert found == DlqTarget("dlq.a", (("10.0.0.1", 9092), ("10.0.0.1", 9092)))


def test_a_topic_without_group_enable_is_not_used():
    found, _ = target({"dlq.a": topic({})}, "dlq.a")
    assert isinstance(found, str) and "errors.deadletterqueue.group.enable" in found


def test_a_missing_topic_is_not_created_by_default():
    found, controller = target({}, "dlq.a")
    assert isinstance(found, str) and "does not exist" in found and controller.created == []


def test_a_missing_topic_is_created_enabled_when_the_broker_says_so():
    found, controller = target({}, "dlq.a", **{"errors.deadletterqueue.auto.create.topics.enable": True,
                                                "num.partitions": 2})
    assert controller.created == [("dlq.a", 2, 1, {"errors.deadletterqueue.group.enable": "true"})]
    assert isinstance(found, DlqTarget) and len(found.leaders) == 2
