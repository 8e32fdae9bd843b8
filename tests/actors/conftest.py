import faulthandler
import gc

import pytest

from cluster.cli import DEFAULT_LOCAL_CONFIG as LOCAL_CONFIG
from cluster.config import load_broker_config
from cluster.local import LocalBroker
from tests.kray_process import free_port


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A LocalBroker on an embedded Ray inside the test process, so tests can reach its actors."""
    config = load_broker_config(LOCAL_CONFIG, overrides=[f"log.dirs={tmp_path_factory.mktemp('kray')}",
                                           f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
                                           "group.share.heartbeat.interval.ms=1000",
                                           "group.share.min.heartbeat.interval.ms=500"])
    b = LocalBroker(config)
    b.start()
    yield b
    # the module's Kafka clients (librdkafka handles) are destroyed now, while Ray still runs: two
    # clean-clone CI runs died of SIGSEGV as the transaction modules' Ray shut down, with no trace
    gc.collect()
    b.stop()
    faulthandler.enable(all_threads=True)  # (again, after Ray's handlers: a crash now says where)
