import faulthandler
import gc

import pytest

from cluster.cli import DEFAULT_LOCAL_CONFIG as LOCAL_CONFIG
from cluster.config import load_broker_config
from cluster.local import LocalBroker
from tests.kray_process import free_port


@pytest.fixture(scope="package")
def broker(tmp_path_factory):
    """A LocalBroker on an embedded Ray inside the test process, so tests can reach its actors:
    one for the whole directory (a broker and its Ray cost ~9 s to start and stop). Each test
    makes topics and groups of its own names, and leaves every actor it killed restarted."""
    config = load_broker_config(LOCAL_CONFIG, overrides=[f"log.dirs={tmp_path_factory.mktemp('kray')}",
                                           f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
                                           "group.share.heartbeat.interval.ms=1000",
                                           "group.share.min.heartbeat.interval.ms=500"])
    b = LocalBroker(config)
    b.start()
    yield b
    # the tests' Kafka clients (librdkafka handles) are destroyed now, while Ray still runs (a
    # SIGSEGV in this directory's runs was librdkafka's: see test_txn_offsets_restart.committed)
    gc.collect()
    b.stop()
    faulthandler.enable(all_threads=True)  # (again, after Ray's handlers: a crash now says where)
