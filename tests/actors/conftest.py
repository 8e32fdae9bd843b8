import faulthandler
import gc

import pytest

from cluster.cli import DEFAULT_LOCAL_CONFIG as LOCAL_CONFIG
from cluster.config import load_broker_config
from cluster.local import LocalBroker
from tests.kray_process import free_port


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A LocalBroker on an embedded Ray inside the test process, so tests can reach its actors.
    One per module: one for the whole directory (tried) saved ~80 s, but in one clean-clone run of
    four a partition of test_partition_restart's killed shard stayed unknown to a consumer for
    30 s on a broker that hosted the earlier modules' replicas too (not looked into yet)."""
    config = load_broker_config(LOCAL_CONFIG, overrides=[f"log.dirs={tmp_path_factory.mktemp('kray')}",
                                           f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
                                           "group.share.heartbeat.interval.ms=1000",
                                           "group.share.min.heartbeat.interval.ms=500"])
    b = LocalBroker(config)
    b.start()
    yield b
    # the module's Kafka clients (librdkafka handles) are destroyed now, while Ray still runs (a
    # SIGSEGV in this directory's runs was librdkafka's: see test_txn_offsets_restart.committed)
    gc.collect()
    b.stop()
    faulthandler.enable(all_threads=True)  # (again, after Ray's handlers: a crash now says where)
