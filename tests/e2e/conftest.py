import pytest

from tests.kray_process import KrayProcess


@pytest.fixture(scope="session")
def kray(tmp_path_factory):
    """One real `kray start` for the whole e2e session; yields its bootstrap address."""
    server = KrayProcess(tmp_path_factory.mktemp("kray-data"))
    bootstrap = server.start()
    yield bootstrap
    server.stop()
