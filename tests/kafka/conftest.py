"""One Apache Kafka 4.4 and one Kray (`kray start`) side by side on 127.0.0.1, for this directory's tests: ended
after its last one, so they do not idle beside the rest of the suite on the same worker.
Without Java or Kafka's jars every test here is skipped, saying why."""
import pytest

from tests.kafka.broker import KafkaBroker, missing
from tests.kray_process import KrayProcess


@pytest.fixture(scope="package")
def kafka44():
    why = missing()
    if why:
        pytest.skip(why)
    broker = KafkaBroker()
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="package")
def kray_beside(tmp_path_factory):
    server = KrayProcess(tmp_path_factory.mktemp("kray-beside-kafka"))
    bootstrap = server.start()
    yield bootstrap
    server.stop()


@pytest.fixture(scope="package")
def both(kafka44, kray_beside):
    """{"kafka": bootstrap, "kray": bootstrap}, the same topics made on each (tests.kafka.corpus.prepare)."""
    from tests.kafka.corpus import prepare
    brokers = {"kafka": kafka44.bootstrap, "kray": kray_beside}
    for bootstrap in brokers.values():
        prepare(bootstrap)
    return brokers
