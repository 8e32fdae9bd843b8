"""`kray chaos` redirected into a file says what it does in Kray's words only: no Ray
"[state-dump]" lines, no "(raylet) Raylet is terminated ..." or "... marked dead" messages, no colour
codes (issue 37: a clean chaos run looked like a crash). Ray's messages go to ray-messages.log."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

KRAY = str(Path(sys.executable).parent / "kray")
# seed 32, 16 s, mean gap 3 s, kill and pause: kill broker 2 at 0.2 s, restart at 5.8 s, pause broker 3
# at 9.6 s, resume at 13.8 s (cluster.chaos.plan; tests/unit/test_chaos_plan.py holds the planner)
SCHEDULE = ["--seed", "32", "--duration", "16", "--mean-gap", "3", "--faults", "kill,pause"]
# Kray's own lines; "kray start: " is what the deploy waits for, printed when it waits long enough (a busy machine)
KRAYS_OWN = ("Starting Kray:", "kray start: ", "Kray is ready:", "Logs:", "chaos seed", "+", "[", "The schedule is done",
             "Stopping Kray", "Kray stopped:")


def test_kray_chaos_redirected_prints_no_ray_noise_and_no_colour_codes(tmp_path):
    out_path, data = tmp_path / "chaos.out", tmp_path / "data"
    with open(out_path, "w") as out:
        proc = subprocess.Popen([KRAY, "chaos", "--port", "0", "--data-dir", str(data), *SCHEDULE], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=os.environ | {"PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 300
        while "The schedule is done" not in out_path.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, out_path.read_text()
            time.sleep(1)
        proc.send_signal(signal.SIGINT)  # as Ctrl-C does
        proc.wait(90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = out_path.read_text()
    lines = text.splitlines()
    assert "kill broker 2" in text and "pause broker 3" in text and "broker 2 lost" in text, text
    assert lines[-1].startswith("Kray stopped: every process it started has exited"), text
    assert "\x1b[" not in text, text
    assert not any(word in text for word in ("[state-dump]", "(raylet)", "Raylet is terminated", "marked dead")), text
    assert [line for line in lines if not line.startswith(KRAYS_OWN)] == [], text
    assert "marked dead" in (data / "logs" / "ray-messages.log").read_text()  # where Ray's messages went
