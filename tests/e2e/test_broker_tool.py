"""`kray broker --kill/--restart N` acts on one broker of a running `kray start --nodes 3` from
another terminal (issue 37: only LocalCluster.kill_node from Python could)."""
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.kray_process import NodesProcess, wait_for

KRAY = str(Path(sys.executable).parent / "kray")


def brokers(bootstrap: str) -> set[int]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


def test_kray_broker_kills_and_restarts_one_broker_of_kray_start_nodes(tmp_path):
    data = tmp_path / "data"
    server = NodesProcess(data)
    output = server.output
    try:
        bootstrap = server.start()
        assert wait_for(lambda: brokers(bootstrap) == {1, 2, 3}, 60)

        kill = subprocess.run([KRAY, "broker", "--data-dir", str(data), "--kill", "2"], capture_output=True, text=True,
                              timeout=120)
        assert (kill.returncode, kill.stdout.strip()) == (0, "kray broker: ok: broker 2 killed"), kill
        assert wait_for(lambda: brokers(bootstrap) == {1, 3}, 60), "broker 2 still in the metadata"
        again = subprocess.run([KRAY, "broker", "--data-dir", str(data), "--kill", "2"], capture_output=True,
                               text=True, timeout=120)
        assert again.returncode == 1 and "broker 2 has no running node" in again.stderr, again

        restart = subprocess.run([KRAY, "broker", "--data-dir", str(data), "--restart", "2"], capture_output=True,
                                 text=True, timeout=240)
        assert (restart.returncode, restart.stdout.strip()) == (0, "kray broker: ok: broker 2 serves again"), restart
        assert wait_for(lambda: brokers(bootstrap) == {1, 2, 3}, 60)
    finally:
        server.stop()
    assert any("Kray stopped: every process it started has exited" in line for line in output), "\n".join(output)
    # Kray says it in its words (broker 2 lost ... back); Ray's own messages ("(raylet) The node ... has been
    # marked dead", in colour even when redirected) stay in the log directory
    assert any("broker 2 lost" in line for line in output), "\n".join(output)
    assert not any("(raylet)" in line or "\x1b[" in line for line in output), "\n".join(output)
    nowhere = subprocess.run([KRAY, "broker", "--data-dir", str(data), "--kill", "1"], capture_output=True, text=True,
                             timeout=30)
    assert nowhere.returncode == 1 and "no kray start --nodes runs with data in" in nowhere.stderr
