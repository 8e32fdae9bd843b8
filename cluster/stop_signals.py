"""Ctrl-C (SIGINT) and SIGTERM stop `kray start` at any moment.

While Kray starts (or stops), a signal interrupts what the main thread is doing (it raises
`Interrupted` there, as Python's own Ctrl-C raises KeyboardInterrupt), so start-up does not run on
to "ready"; once Kray serves, the first signal only sets `requested`, which the serving loop
watches, and Kray stops gracefully; a signal during that stop cuts it short. SIGINT is handled
even when the process was started with it ignored (a shell's background job), since a Ctrl-C
reaches the whole process group. Ray's driver would install its own SIGTERM handler
(sys.exit) in ray.init: `install` keeps Kray's.

Python runs signal handlers on the main thread only, between bytecodes: a main thread blocked in
Ray's C++ (a call to a GCS that the same signal, sent to the process group, has just ended) would
not see one for a minute. So a watcher thread learns of every signal at once (signal.set_wakeup_fd)
and, when the main thread has not finished within `deadline_s` of the first signal, or at the
second signal, calls `give_up` (which ends every process and exits).

Raising at an arbitrary bytecode has two places where it must not happen: inside logging's lock
bookkeeping (logging's at-fork hooks: the module's lock would stay held) and in code whose
exceptions Python reports and drops (an at-fork hook, a __del__: "Exception ignored in ..."; the
stop was then lost until the deadline ended every process, seen in CI). In the first the handler
does not raise; from the second the exception reaches `sys.unraisablehook`; both times the signal
is delivered to the main thread again a moment later (`signal.pthread_kill`), quietly.
"""
from __future__ import annotations

import logging
import os
import select
import signal
import sys
import threading
import time
from typing import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)
REPEAT_WITHIN_S = 1.0  # a second signal this soon after the first is the same stop asked twice
REDELIVER_AFTER_S = 0.05  # a signal that could not interrupt where it landed is delivered again this much later
REDELIVER = 0  # the byte on the watcher's pipe that asks it to deliver the first signal again


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived while the main thread started or stopped Kray. (A KeyboardInterrupt:
    Ray's blocking calls turn the one raised in their signal check into a plain KeyboardInterrupt,
    so catch that.)"""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    def __init__(self, deadline_s: float = 20.0, give_up: Callable[[str], None] | None = None,
                 starting_deadline_s: float = 8.0):
        self.requested = threading.Event()
        self.signum: int | None = None  # the first one received
        self.interrupting = True  # raise Interrupted (starting, stopping) or only set `requested` (serving)
        self.deadline_s = deadline_s  # from a signal while Kray serves: a graceful stop's time
        self.starting_deadline_s = starting_deadline_s  # from one during start-up: nothing serves yet
        self.started = False
        self.give_up = give_up  # called from the watcher thread with the reason; should not return
        self._watching = False
        self._first_at: float | None = None  # when the first signal was handled
        self._pid: int | None = None  # the process that installed the handlers
        self._wake: int | None = None  # the watcher's pipe (signal.set_wakeup_fd writes each signal to it)
        self._redelivering = False  # the next handled signal is one delivered again: not a repeat
        self._echoes = 0  # signals delivered again whose wakeup byte the watcher is to skip
        self._echo_lock = threading.Lock()

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def install(self) -> None:
        self._pid = os.getpid()
        for sig in SIGNALS:
            signal.signal(sig, self._received)
        if self.give_up is not None and not self._watching:
            self._watching = True
            read_end, write_end = os.pipe()
            os.set_blocking(write_end, False)
            signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
            self._wake = write_end
            threading.Thread(target=self._watch, args=(read_end,), name="kray-stop-watcher", daemon=True).start()
        previous_hook = sys.unraisablehook

        def unraisable(report) -> None:
            if isinstance(report.exc_value, Interrupted) and os.getpid() == self._pid:
                self._deliver_again()  # (raised where Python drops exceptions: an at-fork hook, a __del__)
                return
            previous_hook(report)

        sys.unraisablehook = unraisable
        keep_ray_off_sigterm()

    def _deliver_again(self) -> None:
        """The first signal, to the main thread again in a moment (by the watcher, or a thread)."""
        if self._wake is not None:
            try:
                os.write(self._wake, bytes([REDELIVER]))
                return
            except OSError:
                pass
        threading.Thread(target=self._redeliver, name="kray-stop-again", daemon=True).start()

    def _redeliver(self) -> None:
        time.sleep(REDELIVER_AFTER_S)
        if self._wake is not None:  # (the signal's wakeup byte reaches the watcher: it is to skip it)
            with self._echo_lock:
                self._echoes += 1
        self._redelivering = True
        # (a real signal, to the main thread: it also ends a sleep or a select there, as the first one would)
        signal.pthread_kill(threading.main_thread().ident, self.signum or signal.SIGINT)

    def _watch(self, read_end: int) -> None:
        received, deadline, first_at = 0, None, None
        while True:
            wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
            if select.select([read_end], [], [], wait_s)[0]:
                read = os.read(read_end, 64)
                if REDELIVER in read:
                    self._redeliver()
                signums = []
                for s in read:
                    if s in SIGNALS:
                        with self._echo_lock:
                            if self._echoes > 0:  # one delivered again: the same stop
                                self._echoes -= 1
                                continue
                        signums.append(s)
                if not signums:
                    continue
                if first_at is not None and time.monotonic() - first_at < REPEAT_WITHIN_S:
                    continue  # the same request delivered twice (to the process and to its group)
                received += 1
                if self.signum is None:
                    self.signum = signums[0]
                if deadline is None:
                    first_at = time.monotonic()
                    allowed_s = self.deadline_s if self.started else self.starting_deadline_s
                    deadline = time.monotonic() + allowed_s
                if received >= 2:
                    self.give_up(f"{signal.Signals(signums[-1]).name} again: ending every process now")
                    return
            elif deadline is not None and time.monotonic() >= deadline:
                self.give_up(f"Kray did not stop within {allowed_s:g} s of {self.name}: "
                             f"ending every process now")
                return

    def _received(self, signum, frame) -> None:
        if os.getpid() != self._pid:
            # a child forked from `kray start` (os.fork, before it execs or sets handlers of its own)
            # inherited this handler, and a Ctrl-C to the process group reached it: it ends as the
            # signal ends a process without a handler. (Raising Interrupted there printed a
            # traceback from threading's after-fork hook on the console: seen in a CI run.)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        again, self._redelivering = self._redelivering, False
        now = time.monotonic()
        if not again and self._first_at is not None and now - self._first_at < REPEAT_WITHIN_S:
            return  # the same stop asked twice
        if self.signum is None:
            self.signum = signum
        if self._first_at is None:
            self._first_at = now
        self.requested.set()
        if self.interrupting:
            if _keeps_a_lock_if_interrupted(frame):
                self._deliver_again()
                return
            raise Interrupted(signum)

    def serving(self) -> None:
        """From now on a signal asks for a graceful stop."""
        self.started = True
        self.interrupting = False
        if self.requested.is_set():
            self.interrupting = True
            raise Interrupted(self.signum)

    def stopping(self) -> None:
        """From now on a signal cuts the stop short."""
        self.interrupting = True


def _keeps_a_lock_if_interrupted(frame) -> bool:
    """The main thread is in logging's lock bookkeeping (its at-fork hooks acquire and release the
    module's lock) or in an at-fork hook: an exception there leaves a lock held, or is dropped."""
    if frame is None:
        return False
    code = frame.f_code
    return code.co_filename == logging.__file__ or code.co_name.startswith(("_after_fork", "_at_fork",
                                                                            "_after_at_fork"))


def keep_ray_off_sigterm() -> None:
    """ray.init and ray.cluster_utils install a SIGTERM handler of their own (sys.exit) through
    ray._private.utils.set_sigterm_handler; in `kray start` that would replace Kray's."""
    try:
        import ray._private.utils as ray_utils
    except ImportError:
        return
    ray_utils.set_sigterm_handler = lambda handler: None
