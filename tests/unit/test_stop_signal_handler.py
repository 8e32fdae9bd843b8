"""`kray start`'s stop-signal handler (cluster/stop_signals.py) in a child forked from its process."""
import logging
import os
import signal
import sys
import time

import pytest

from cluster.stop_signals import SIGNALS, Interrupted, StopSignals


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


@pytest.fixture
def handlers_restored():
    """The test installs Kray's handlers in pytest's process: put back what was there."""
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    hook = sys.unraisablehook
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)
    sys.unraisablehook = hook
    signal.set_wakeup_fd(-1)


def _a_frame_inside_logging():
    """A frame of logging's own code (its filters' loop), as the handler sees one when the signal
    lands in logging's at-fork lock bookkeeping."""
    frames = []

    class Remember(logging.Filter):
        def filter(self, record):
            frames.append(sys._getframe(1))
            return True

    logger = logging.getLogger("kray.test.stop_signals")
    remember = Remember()
    logger.addFilter(remember)
    try:
        logger.filter(logging.makeLogRecord({}))
    finally:
        logger.removeFilter(remember)
    assert frames[0].f_code.co_filename == logging.__file__
    return frames[0]


def _interrupted_within(seconds: float) -> bool:
    try:
        time.sleep(seconds)
    except Interrupted:
        return True
    return False


@pytest.mark.parametrize("watcher", [True, False])
def test_a_signal_that_lands_in_loggings_lock_bookkeeping_interrupts_a_moment_later(watcher, handlers_restored):
    """Start-up is interrupted by a Ctrl-C even when it lands in logging's at-fork hooks (raising
    there would leave logging's lock held and be dropped by Python): not there, but right after."""
    given_up = []
    stops = StopSignals(give_up=given_up.append if watcher else None)
    stops.install()
    stops._received(signal.SIGINT, _a_frame_inside_logging())  # (does not raise)
    assert stops.requested.is_set()
    assert _interrupted_within(2.0)
    assert not _interrupted_within(0.3), "delivered again more than once"
    assert given_up == [], "the signal delivered again counted as a second Ctrl-C"


def test_a_signal_whose_exception_python_drops_interrupts_again_and_prints_nothing(capfd, handlers_restored):
    """An Interrupted raised where Python reports and drops exceptions (an at-fork hook, a __del__:
    "Exception ignored in ...", seen on kray start's console in CI, and the stop was lost until its
    deadline) reaches the main thread again, and nothing is printed."""
    given_up = []
    stops = StopSignals(give_up=given_up.append)
    stops.install()

    class Dropped:
        def __del__(self):
            stops._received(signal.SIGINT, sys._getframe())

    Dropped()  # (its __del__ runs here; the Interrupted it raises is dropped)
    assert _interrupted_within(2.0)
    assert "Exception ignored" not in capfd.readouterr().err
    assert given_up == []
