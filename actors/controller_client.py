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
answer as Kafka's do on a retry (a CreateTopics carries a creation id its retries are recognized by;
AlterPartition carries a proposal id the controller decides once).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from actors import names

log = logging.getLogger("kray.controller_client")

CONTROLLER_SOCKET_TIMEOUT_MS_DEFAULT = 30000  # controller.socket.timeout.ms
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_S_MAX = 2.0
METADATA_POLL_SLACK_S = 5.0  # a long poll's answer may come this long after its wait, else it is asked again
# creating an internal topic starts its 50 partitions: on a loaded machine that took up to ~90 s
ENSURE_INTERNAL_TOPIC_TIMEOUT_S = 90.0
ALTER_PARTITION_TIMEOUT_S = 5.0  # an unanswered AlterPartition is resent (same proposal id) after this


class NotController(RuntimeError):
    """Raised by a standby controller (combined voters): its broker's voter does not lead
    the metadata quorum, so another controller is the active one (or none is, during an election)."""


class NoActiveController(RuntimeError):
    """No controller of the voters said it is active: an election, or a controller starting."""


SUSPECT_S = 10.0  # a controller that did not answer in time is asked after the others for this long
PROBE_AFTER_S = 1.0  # a call to the active controller unanswered this long: is another one active?
PROBE_TIMEOUT_S = 1.0
# a call still unanswered is probed again: soon while its controller does not say it is active (cut
# off: an election may name another one any moment), rarely while it does (a long poll)
PROBE_AGAIN_S_LONG = 5.0
RESOLVE_AGAIN_S = 5.0
RESOLVE_TIMEOUT_S = 5.0
GREET_TIMEOUT_S = 2.0     # the first call to a controller just looked up (see _get_and_greet)
RETRIED = (asyncio.TimeoutError, ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError, NoActiveController)


_known_controllers: dict[tuple[str, int], Any] = {}  # (Ray cluster's GCS address, voter) -> handle, in this process
_known_active: dict[tuple[str, tuple[int, ...]], int] = {}  # (Ray cluster's GCS address, voters) -> the active one


def _cluster_key() -> str:
    if not ray.is_initialized():  # (ray.get_runtime_context() would start a Ray of its own)
        return ""
    return ray.get_runtime_context().gcs_address or ""


class _ProcessHandles:
    """The controllers' handles this process knows, shared by every ActiveController in it (a
    shard's hundreds of replicas resolve each controller once), per Ray cluster."""

    def __init__(self):
        self.cluster = _cluster_key()

    def get(self, voter: int):
        return _known_controllers.get((self.cluster, voter))

    def __setitem__(self, voter: int, handle) -> None:
        _known_controllers[(self.cluster, voter)] = handle

    def __contains__(self, voter: int) -> bool:
        return (self.cluster, voter) in _known_controllers

    def pop(self, voter: int, default=None):
        return _known_controllers.pop((self.cluster, voter), default)

    def count(self, voters) -> int:
        return sum(v in self for v in voters)


class ActiveController:
    """A handle to whichever controller is active, for `call` and the helpers below
    (`getattr(handle, method).remote(*args)` is awaitable): with the metadata quorum each voting
    broker's node runs a controller (`controller-<id>`) and the one whose voter leads is active.
    A call goes to the last active one; a standby's NotController, or a dead controller, sends it
    to the others in turn; none active raises NoActiveController, which `call` retries. Picklable:
    replicas and gateways get one in their spec, and resolve the controllers by name themselves,
    off their event loop, once per process."""

    def __init__(self, voters: tuple[int, ...], handles: dict[int, Any] | None = None):
        self.voters = tuple(voters)
        self._handles = _ProcessHandles()  # voter -> its controller's handle, as known in this process
        for voter, handle in (handles or {}).items():
            self._handles[voter] = handle
        self._suspect: dict[int, float] = {}  # voter -> until when it is asked last (a call to it timed out)
        self._resolve_after = 0.0

    @property
    def _active(self) -> int | None:
        """The voter whose controller answered last as the active one, in this process (the
        replicas of a shard share it: none of them asks a cut-off controller first once one knows)."""
        return _known_active.get((self._handles.cluster, self.voters))

    @_active.setter
    def _active(self, voter: int | None) -> None:
        if voter is None:
            _known_active.pop((self._handles.cluster, self.voters), None)
        else:
            _known_active[(self._handles.cluster, self.voters)] = voter

    def __getstate__(self):
        # no actor handle travels: Ray deserializes one on the receiving actor's event loop, and
        # in a process that has not loaded that actor's class yet it asks Ray's GCS for it there;
        # with the Ray head cut off that froze a shard (every replica it hosts) for the whole cut.
        # The receiver looks the controllers up by name, in a thread, while the GCS answers.
        return {"voters": self.voters}

    def __setstate__(self, state):
        self.__init__(state["voters"])

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return _ActiveMethod(self, method)

    def _handle(self, voter: int):
        return self._handles.get(voter)

    async def _resolve(self) -> None:
        """Handles to every voter's controller, asked of Ray's GCS (off the event loop, bounded; at
        most every RESOLVE_AGAIN_S unless none is known): resolved while the GCS is reachable, they
        keep working when it is not (a cut-off Ray head), so a call can move to a standby that
        became active meanwhile. A call waits for the lookups only while no handle is known: else it
        goes on with the known ones, the others looked up beside it."""
        known = self._handles.count(self.voters)
        if known == len(self.voters) or (known and time.monotonic() < self._resolve_after):
            return
        self._resolve_after = time.monotonic() + RESOLVE_AGAIN_S
        lookups = asyncio.ensure_future(self._look_up_missing())
        if not known:
            await lookups

    async def _look_up_missing(self) -> None:
        for voter in self.voters:
            if voter in self._handles:
                continue
            try:
                self._handles[voter] = await asyncio.wait_for(
                    asyncio.shield(_lookup(self._handles.cluster, voter)), RESOLVE_TIMEOUT_S)
            except Exception as e:  # not there (ValueError), the GCS unreachable (timeout), ...
                log.info("the controller of voter %d could not be looked up (%s)", voter, type(e).__name__)
                continue

    async def _call(self, method: str, args: tuple) -> Any:
        await self._resolve()
        tried: set[int] = set()
        while True:
            voter = self._next(tried)
            if voter is None:
                self._active = None
                raise NoActiveController(f"no active controller among the voters {list(self.voters)} (an election?)")
            tried.add(voter)
            handle = self._handle(voter)
            if handle is None:
                continue
            call = asyncio.ensure_future(_answer(getattr(handle, method).remote(*args)))
            try:
                other = await self._wait_or_find_active(call, voter)
                if other is not None:
                    call.cancel()
                    self._suspect[voter] = time.monotonic() + SUSPECT_S
                    self._active = other
                    tried.discard(other)
                    continue
                result = call.result()
            except NotController:
                continue
            except ray.exceptions.RayError as e:
                if isinstance(e, ray.exceptions.RayTaskError):
                    raise                           # the controller's own answer (an error of the command)
                # gone, or never to run again (its node is gone: ActorUnschedulableError): a
                # controller started again on a node that returned has a new handle. Unreachable
                # for now (ActorUnavailableError: restarting, cut off) keeps its handle, which works
                # again later without Ray's GCS (that a cut may have taken away with the Ray head)
                if not isinstance(e, ray.exceptions.ActorUnavailableError):
                    self._handles.pop(voter, None)
                self._suspect[voter] = time.monotonic() + SUSPECT_S
                continue
            except asyncio.CancelledError:   # the caller's timeout: cut off? ask the others first next time
                call.cancel()
                self._suspect[voter] = time.monotonic() + SUSPECT_S
                if self._active == voter:
                    self._active = None
                raise
            self._active = voter
            return result

    def _next(self, tried: set[int]) -> int | None:
        """The controller to ask next: the last active one, then the others; those that did not
        answer in time lately last."""
        now = time.monotonic()
        order = ([self._active] if self._active is not None else []) + [v for v in self.voters if v != self._active]
        order = [v for v in order if v not in tried]
        order.sort(key=lambda v: self._suspect.get(v, 0) > now)   # (stable: the active one first)
        return order[0] if order else None

    async def _wait_or_find_active(self, call: asyncio.Future, voter: int) -> int | None:
        """None once `call` (to `voter`'s controller) is answered; another voter, as soon as its
        controller says it is active while the call waits. A slow call is a long poll, or a
        controller that is gone (its node dead: a call to it waits for a restart that can't happen)
        or cut off, its voter deposed by an election that may end any moment: the others are asked
        again until the call is answered, soon while its own controller does not say it is active."""
        wait_s = PROBE_AFTER_S
        while True:
            done, _ = await asyncio.wait({call}, timeout=wait_s)
            if done:
                return None
            other, still_active = await self._find_active(voter)
            if call.done():
                return None
            if other is not None:
                return other
            wait_s = PROBE_AGAIN_S_LONG if still_active else PROBE_AFTER_S

    async def _find_active(self, waiting_on: int) -> tuple[int | None, bool]:
        """(another voter whose controller says it is active, or None; whether `waiting_on`'s says
        so too), all asked at once, each for at most PROBE_TIMEOUT_S."""
        async def active(voter: int) -> bool:
            handle = self._handle(voter)
            if handle is None:
                return False
            try:
                return bool(await asyncio.wait_for(_answer(handle.is_active.remote()), PROBE_TIMEOUT_S))
            except Exception:
                return False
        answers = dict(zip(self.voters, await asyncio.gather(*(active(v) for v in self.voters))))
        other = next((v for v in self.voters if v != waiting_on and answers[v]), None)
        return other, answers.get(waiting_on, False)


_lookups: dict[tuple[int, str, int], asyncio.Future] = {}  # (event loop, cluster, voter) -> its lookup


def _lookup(cluster: str, voter: int) -> asyncio.Future:
    """`ray.get_actor` of a voter's controller in a thread, one at a time per voter in this process
    (the replicas of a shard that start together share it)."""
    key = (id(asyncio.get_running_loop()), cluster, voter)
    lookup = _lookups.get(key)
    if lookup is None or lookup.done():
        lookup = _lookups[key] = asyncio.ensure_future(asyncio.to_thread(
            _get_and_greet, names.controller_name(voter), names.NAMESPACE))
        lookup.add_done_callback(lambda f: f.cancelled() or f.exception())  # (a caller may have timed out)
    return lookup


def _get_and_greet(name: str, namespace: str):
    """The controller's handle, and one call to it (bounded, its answer ignored): Ray learns where
    an actor runs from its GCS at a process's first call to it, so this process then reaches the
    controller without the GCS, as when the Ray head is cut off and a standby becomes active (a
    share-partition leader whose first call to it came during such a cut waited out the cut)."""
    handle = ray.get_actor(name, namespace)
    try:
        ray.get(handle.is_active.remote(), timeout=GREET_TIMEOUT_S)
    except Exception:  # not answering now (cut off, restarting): the handle is kept all the same
        pass
    return handle


async def _answer(ref):
    return await ref


class _ActiveMethod:
    def __init__(self, controller: ActiveController, method: str):
        self.controller, self.method = controller, method

    def remote(self, *args):
        return self.controller._call(self.method, args)


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
