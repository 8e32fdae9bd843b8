"""Kray's own Kafka clients against Apache Kafka 4.4: the README says the Ray worker pool
(cluster.workers) speaks only the Kafka protocol and so works against Kafka too; this measures it by
running the worker pool's own e2e test against a Kafka 4.4 broker configured as that test's Kray is."""
import sys

import pytest
import ray

from cluster.ray_node_start import start_ray_node
from tests.e2e import test_share_worker_pool as pools
from tests.kafka.broker import KafkaBroker, missing

# the worker-pool test's broker settings, in Kafka's names (its Kray broker has the same)
SHARE_SETTINGS = f"""\
group.share.heartbeat.interval.ms=1000
group.share.min.heartbeat.interval.ms=500
group.share.record.lock.duration.ms={pools.LOCK_MS}
group.share.min.record.lock.duration.ms=1000
group.share.delivery.count.limit={pools.DELIVERY_LIMIT}
"""

pytestmark = pytest.mark.reference_full  # pytest -m reference_full tests/kafka


@pytest.fixture(scope="module")
def kafka_for_pools():
    why = missing()
    if why:
        pytest.skip(why)
    owns_ray = not ray.is_initialized()
    if owns_ray:
        # (a start that misses Ray's 30 s on a busy machine is tried again, as kray start does)
        start_ray_node(lambda: ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False))
    ray.cloudpickle.register_pickle_by_value(sys.modules[pools.__name__])
    broker = KafkaBroker(extra_properties=SHARE_SETTINGS)
    try:
        yield broker.start()
    finally:
        broker.stop()
        if owns_ray:
            ray.shutdown()


def test_the_worker_pool_acknowledges_on_kafka_as_on_kray(kafka_for_pools):
    pools.test_each_record_is_acknowledged_as_its_handler_ended(kafka_for_pools)
