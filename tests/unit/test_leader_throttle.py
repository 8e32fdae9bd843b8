"""The leader's side of the replication throttle (actors/gateway/leader_throttle.py): which follower fetches
it applies to, as Kafka's shouldLeaderThrottle decides, and the rate it keeps."""
import uuid

from actors.controller.core import PartitionState, TopicState
from actors.gateway.leader_throttle import LeaderThrottle


def _topic(listed: str, isr=(1, 2)) -> TopicState:
    return TopicState(name="t", topic_id=uuid.uuid4(), configs={"leader.replication.throttled.replicas": listed},
                      partitions=[PartitionState(index=0, replicas=[1, 2, 3], leader=1, isr=list(isr)),
                                  PartitionState(index=1, replicas=[2, 1], leader=2, isr=[2, 1])])


def test_it_applies_to_listed_leader_replicas_and_followers_outside_the_isr_only():
    throttle = LeaderThrottle()
    throttle.configure(1, {}, {"1": {"leader.replication.throttled.rate": 1000}})
    assert throttle.applies(_topic("0:1"), 0, 1, replica_id=3)        # a new replica catching up
    assert not throttle.applies(_topic("0:1"), 0, 1, replica_id=2)    # in the ISR: never throttled
    assert not throttle.applies(_topic("0:2"), 0, 1, replica_id=3)    # another broker's replica listed
    assert throttle.applies(_topic("*"), 0, 1, replica_id=3)
    assert not throttle.applies(_topic(""), 0, 1, replica_id=3)


def test_without_a_rate_nothing_is_throttled():
    throttle = LeaderThrottle()
    throttle.configure(1, {}, {})   # Kafka's default, Long.MAX_VALUE
    assert not throttle.applies(_topic("*"), 0, 1, replica_id=3)
    throttle.configure(1, {}, {"": {"leader.replication.throttled.rate": 500}})  # the cluster default applies
    assert throttle.applies(_topic("*"), 0, 1, replica_id=3)
    throttle.configure(1, {}, {"": {"leader.replication.throttled.rate": 500},
                               "1": {"leader.replication.throttled.rate": 9223372036854775807}})
    assert not throttle.applies(_topic("*"), 0, 1, replica_id=3)      # its own value wins over the default


def test_the_rate_is_kept_on_average():
    throttle = LeaderThrottle()
    throttle.configure(1, {}, {"1": {"leader.replication.throttled.rate": 1000}})
    assert not throttle.exceeded(10.0)
    throttle.record(3000, 10.0)           # one answer may overshoot by its size ...
    assert throttle.exceeded(10.5)
    assert abs(throttle.wait_s(10.5) - 2.5) < 1e-9   # ... then nothing until the rate has paid it off
    assert not throttle.exceeded(13.0)
    throttle.configure(1, {}, {"1": {"leader.replication.throttled.rate": 1000}})  # the same rate: debt kept
    throttle.record(2000, 13.0)
    throttle.configure(1, {}, {"1": {"leader.replication.throttled.rate": 1000}})
    assert throttle.exceeded(14.0)
