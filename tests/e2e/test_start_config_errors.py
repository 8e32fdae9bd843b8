"""`kray start` refuses a bad config file before it starts anything, naming the file, the format
it read it as, and the key: not "Kray is ready" and then closed connections (issue 37)."""
import subprocess
import sys
import time
from pathlib import Path

KRAY = str(Path(sys.executable).parent / "kray")


def test_a_mistyped_value_stops_kray_start_before_it_starts(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text('[broker]\n"num.partitions" = "three"\n')
    started = time.monotonic()
    run = subprocess.run([KRAY, "start", "--config", str(config), "--port", "0", "--data-dir", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == f"kray start: {config} (read as TOML): num.partitions must be an integer, not 'three'"
    assert "Starting Kray" not in run.stdout and "Traceback" not in run.stderr
    assert time.monotonic() - started < 20, "refused before Ray starts"


def test_a_kafka_properties_file_with_a_typo_is_refused_with_a_suggestion(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("num.partitions=3\nlog.retention.hour=24\n")
    run = subprocess.run([KRAY, "start", "--config", str(config), "--port", "0", "--data-dir", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 2
    assert run.stderr.strip() == (f"kray start: {config} (read as Kafka properties): unknown broker config "
                                  f"log.retention.hour (did you mean log.retention.hours or log.retention.ms or "
                                  f"log.retention.minutes?)")
