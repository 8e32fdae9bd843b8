"""Calls to the controller actor with a timeout and retries.

A Ray actor call has no timeout of its own: across a network cut it waits until TCP gives up on
the connection, which after a heal can be many seconds (a retransmission backing off) or, with no
traffic, never. Kafka's brokers bound every request to their controller
(`controller.socket.timeout.ms`, 30 s) and retry; Kray's actors do the same through `call`: each
attempt waits at most `timeout_s`, and an attempt that timed out or found the controller
unavailable (restarting, unreachable) is tried again with backoff until `retry_for_s` has passed
since the first. Callers pick timeouts by what they wait for: a heartbeat no longer than a broker
session, a metadata long poll its own wait plus a little, an admin command
controller.socket.timeout.ms.

A retried command may have landed before its timeout: the controller's commands are idempotent or
answer as Kafka's do on a retry (a topic created twice answers TOPIC_ALREADY_EXISTS; AlterPartition
carries a proposal id the controller decides once).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

CONTROLLER_SOCKET_TIMEOUT_MS_DEFAULT = 30000  # controller.socket.timeout.ms
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_S_MAX = 2.0
METADATA_POLL_SLACK_S = 5.0  # a long poll's answer may come this long after its wait, else it is asked again
# creating an internal topic starts its 50 partitions: on a loaded machine that took up to ~90 s
ENSURE_INTERNAL_TOPIC_TIMEOUT_S = 90.0
ALTER_PARTITION_TIMEOUT_S = 5.0  # an unanswered AlterPartition is resent (same proposal id) after this
RETRIED = (asyncio.TimeoutError, ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError)


class ControllerUnreachable(TimeoutError):
    """No answer from the controller in time (after retries): it is away or cut off."""


def socket_timeout_s(config: dict) -> float:
    """controller.socket.timeout.ms, in seconds."""
    return int(config.get("controller.socket.timeout.ms", CONTROLLER_SOCKET_TIMEOUT_MS_DEFAULT)) / 1000


async def wait_for_metadata(handle, known_version: int, poll_s: float, *, retry_for_s: float = 0.0):
    """The controller's metadata long poll: answered at a change or after `poll_s`, else given up
    METADATA_POLL_SLACK_S later (its connection may have broken under it)."""
    return await call(handle, "wait_for_metadata", known_version, poll_s, timeout_s=poll_s + METADATA_POLL_SLACK_S,
                      retry_for_s=retry_for_s)


async def ensure_internal_topic(handle, name: str, *, retry_for_s: float = 0.0):
    return await call(handle, "ensure_internal_topic", name, timeout_s=ENSURE_INTERNAL_TOPIC_TIMEOUT_S,
                      retry_for_s=retry_for_s)


async def call(handle, method: str, *args, timeout_s: float, retry_for_s: float = 0.0) -> Any:
    """`handle.method.remote(*args)`, each attempt bounded by `timeout_s`, retried (timeouts and an
    unavailable controller) while less than `retry_for_s` has passed. Raises ControllerUnreachable
    when the last attempt timed out, the Ray error when the controller stayed unavailable."""
    deadline = time.monotonic() + retry_for_s
    delay_s = RETRY_BACKOFF_S
    while True:
        try:
            return await asyncio.wait_for(_remote(handle, method, args), timeout_s)
        except RETRIED as e:
            if time.monotonic() + delay_s > deadline:
                if isinstance(e, asyncio.TimeoutError):
                    raise ControllerUnreachable(
                        f"the controller did not answer {method} within {timeout_s:g} s "
                        f"(controller.socket.timeout.ms for commands); is its node reachable?") from None
                raise
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, RETRY_BACKOFF_S_MAX)


async def _remote(handle, method: str, args: tuple) -> Any:
    return await getattr(handle, method).remote(*args)
