"""`kray start`'s stop-signal handler (cluster/stop_signals.py) in a child forked from its process."""
import os
import signal
import time

from cluster.stop_signals import SIGNALS, StopSignals


def test_a_forked_child_that_inherited_the_handler_dies_of_the_signal_quietly():
    """A Ctrl-C reaches the whole process group, also a child that `kray start` forked and that still
    has Kray's handler: the child ends as the signal ends a process without one, printing nothing,
    and `kray start` itself is not asked to stop by it. (It raised Interrupted in the child, and
    threading's after-fork hook printed that traceback on kray start's console: seen in CI.)"""
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    stops = StopSignals()
    try:
        stops.install()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its output goes to the pipe
            try:
                os.dup2(write_end, 1)
                os.dup2(write_end, 2)
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
            finally:
                os._exit(0)  # reached only if the signal did not end the child
        os.close(write_end)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read_end, "rb") as out:
            printed = out.read()
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGINT, status
        assert printed == b""
        assert not stops.requested.is_set()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
