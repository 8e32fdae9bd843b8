"""Starting something once (a front end, a listener, a connection) for every caller that asks,
and starting it again for the next caller once an attempt has failed."""
from __future__ import annotations

import asyncio


def succeeded(started: asyncio.Future | None) -> bool:
    """Done, and not with an error."""
    return started is not None and started.done() and not started.cancelled() and started.exception() is None


def start_unless_started(started: asyncio.Future | None, start) -> asyncio.Future:
    """`started` while it runs or has succeeded; else a new attempt of `start()` (an attempt may
    fail: a port still held, the controller away)."""
    if started is None or (started.done() and not succeeded(started)):
        return asyncio.ensure_future(start())
    return started
