"""Apache Kafka 4.4.0 itself, beside Kray: one combined broker+controller (KRaft) on 127.0.0.1,
started from the jars that tests/kafka/pom.xml gathers from Maven Central (./dev test installs them
into tests/kafka/lib). Storage is formatted with the same jars (kafka.tools.StorageTool), the
internal topics are set for one node, and everything it made is removed when it stops.

Run by hand:  python -m tests.kafka.broker   (prints its bootstrap address; Ctrl-C stops it)
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIB = HERE / "lib"
KAFKA_VERSION = "4.4.0"
HEAP = "-Xmx1g"                 # what a single-node Kafka wants; the tests' topics are small
START_TIMEOUT_S = 90
# a fair comparison with Kray: one node, internal topics with one replica, the same group delays
SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=0
controller.quorum.voters=0@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={log_dir}
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
"""


def missing() -> str | None:
    """Why Kafka cannot run here (no Java, or the jars not installed), or None."""
    if shutil.which("java") is None:
        return "java not found: the Apache Kafka 4.4 tests need a JDK 17+"
    if not (LIB / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        return f"Apache Kafka {KAFKA_VERSION}'s jars are not in {LIB}: ./dev test installs them (needs mvn)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def java(main_class: str, *args: str, heap: str = "-Xmx256m", log_file: Path | None = None, **popen):
    """The command line of one of Kafka's main classes on the 4.4 classpath."""
    command = ["java", heap, "-XX:+UseG1GC", "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}",
               f"-Dkafka.log.file={log_file or os.devnull}", "-cp", f"{LIB}/*", main_class, *args]
    return command


class KafkaBroker:
    """One Apache Kafka 4.4 node (see the module docstring)."""

    def __init__(self, work_dir: Path | None = None, *, port: int | None = None, extra_properties: str = ""):
        self.owned = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="kafka44-"))
        self.port = port or free_port()
        self.controller_port = free_port()
        self.extra_properties = extra_properties
        self.process: subprocess.Popen | None = None
        self.log_file = self.work_dir / "server.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> str:
        why = missing()
        if why:
            raise RuntimeError(why)
        config = self.work_dir / "server.properties"
        config.write_text(SERVER_PROPERTIES.format(port=self.port, controller_port=self.controller_port,
                                                   log_dir=self.work_dir / "data") + self.extra_properties)
        cluster_id = subprocess.run(java("kafka.tools.StorageTool", "random-uuid"), capture_output=True, text=True,
                                    check=True, timeout=60).stdout.strip()
        formatted = subprocess.run(java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)),
                                   capture_output=True, text=True, timeout=60)
        if formatted.returncode:
            raise RuntimeError(f"kafka-storage format failed: {formatted.stdout}{formatted.stderr}")
        self.format_output = formatted.stdout
        self.process = subprocess.Popen(java("kafka.Kafka", str(config), heap=HEAP, log_file=self.log_file),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        self._await_ready()
        return self.bootstrap

    def _await_ready(self) -> None:
        from confluent_kafka.admin import AdminClient
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Kafka exited ({self.process.returncode}): "
                                   f"{self.process.stderr.read().decode()[-2000:]} {self._log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
                if admin.list_topics(timeout=5).brokers:
                    return
            except Exception:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"Kafka did not answer within {START_TIMEOUT_S} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return self.log_file.read_text()[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self.process = None
        if self.owned:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> "KafkaBroker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    with KafkaBroker() as broker:
        print(broker.bootstrap, flush=True)
        print(broker.format_output.strip(), flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
