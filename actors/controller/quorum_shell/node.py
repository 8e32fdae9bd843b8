"""QuorumNode: one voter's shell around RaftCore — the clock, the disk, and the peers.

Every step is synchronous from the core's call to the end of persisting its Output (no `await` in
between: asyncio interleaves at every await, and a vote must be on disk before anything else can
read the core's state). Then, in the Output contract's order (output.py): the step's messages go
out, committed batches are applied (handed to `on_commit`), proposals' futures are settled.

Messages: a request the core sends (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch) becomes a task
awaiting `transport.request(dst, msg)` — the transport (transport.py: a pipelined connection per
peer voter over its inter-broker listener, every request with a timeout) returns the core's
response message, or None when the request failed or timed out; the core retries on its own
timers. A response the core sends answers a request that came in through `handle_request` (the
gateway's route): it settles that request's future, which the handler awaits and writes back.

The timer: `run()` sleeps until the core's `next_tick_ms` (or until a message arrives), then ticks.

A failure to persist (the disk full or failing) or a protocol violation the core refuses
(QuorumStateError) stops the node for good: the core already believes its state is durable, so it
must not answer anything more; `run()` raises it, and the gateway that runs the voter exits so that
Ray starts it again from what is on disk (as Kafka halts on a metadata log failure).

It keeps the controller's metadata log (actors/controller/quorum_metadata.py).
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Awaitable, Callable, Protocol

from actors.controller.quorum import (
    Accepted, BeginQuorumEpochRequest, Batch, EndQuorumEpochRequest, FetchRequest, Message, NotLeader, Output,
    QuorumConfig, QuorumStatus, RaftCore, VoteRequest,
)
from protocol.errors import ErrorCode

from .store import QuorumStore

log = logging.getLogger("kray.quorum")

REQUESTS = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest)
INBOUND_PENDING_MAX = 64     # requests from one peer waiting for the core's answer at once
VOTER_CHANGE_RETRY_S = 0.1   # a voter change that cannot start yet (REQUEST_TIMED_OUT) is asked again


class QuorumStorageError(RuntimeError):
    """The voter's state or log could not be written: the node stops (it must not answer)."""


class Transport(Protocol):
    async def request(self, dst: int, message: Message) -> Message | None: ...


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class QuorumNode:
    def __init__(self, node_id: int, config: QuorumConfig, log_dir: str, transport: Transport, *,
                 on_commit: Callable[[Batch], Any] | None = None, clock_ms: Callable[[], int] = monotonic_ms,
                 rng: random.Random | None = None):
        self.node_id = node_id
        self.transport = transport
        self.on_commit = on_commit
        self.clock_ms = clock_ms
        self.store = QuorumStore(log_dir, config.voters)
        self.core = RaftCore(node_id, config, now_ms=clock_ms(), rng=rng or random.Random(),
                             election=self.store.election, log=list(self.store.batches))
        self.committed_offset = 0                      # next offset to apply
        self._inbound: dict[tuple[int, type], list[asyncio.Future]] = {}
        self._proposals: dict[int, tuple[Accepted, asyncio.Future]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self._stopped = False
        self.failed: BaseException | None = None       # why the node stopped for good (run() raises it)
        self._role = None                              # (role, epoch, leader) last said

    # ---- the loop ------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Tick until stopped; raises what stopped the node for good (QuorumStorageError, QuorumStateError)."""
        while not self._stopped:
            try:
                self._carry(self.core.tick(self.clock_ms()))
            except Exception as e:
                self._fail(e)
                break
            delay_ms = max(0, self.core.next_tick_ms() - self.clock_ms())
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=delay_ms / 1000)
            except asyncio.TimeoutError:
                pass
        if self.failed is not None:
            raise self.failed

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        for task in list(self._tasks):
            task.cancel()
        for futures in self._inbound.values():
            for future in futures:
                if not future.done():
                    future.cancel()
        self._abandon_proposals("the node stopped")
        close = getattr(self.transport, "close", None)
        if close is not None:
            close()
        self.store.close()

    # ---- inputs --------------------------------------------------------------------------------------
    async def handle_request(self, message: Message) -> Message | None:
        """A request from a peer (the gateway's route): step the core, await its answer; None when
        the node stopped, too many of that peer's requests wait, or a newer fetch replaced it."""
        if self._stopped:
            return None
        key = (message.src, type(message))
        waiting = self._inbound.setdefault(key, [])
        if isinstance(message, FetchRequest):
            # the core holds one fetch per replica and drops the older one unanswered when a newer
            # one comes (its sender gave up on it): its handler gets None, so that the core's next
            # answer to that peer goes to the fetch it answers, not to a connection long closed
            for older in waiting:
                if not older.done():
                    older.set_result(None)
            waiting.clear()
        if len(waiting) >= INBOUND_PENDING_MAX:
            return None
        future = asyncio.get_running_loop().create_future()
        waiting.append(future)
        try:
            self._step(lambda now: self.core.handle(message, now))
            return await future
        finally:
            if future in waiting:
                waiting.remove(future)

    def deliver(self, message: Message) -> None:
        """A response to a request this node sent."""
        if not self._stopped:
            try:
                self._step(lambda now: self.core.handle(message, now))
            except Exception:   # the node stopped for good (self.failed): run() raises it
                pass

    async def propose(self, records: list) -> Accepted | NotLeader:
        """Append records as one batch if this node leads; returns once they commit (Accepted) or
        raises LookupError if the leader was deposed before they did (another batch took the offset).
        A stopped node appends nothing (NotLeader, leader unknown)."""
        if self._stopped:
            return NotLeader(None, self.core.epoch)
        result, out = self.core.propose(records, self.clock_ms())
        if isinstance(result, NotLeader):
            return result
        future = asyncio.get_running_loop().create_future()
        self._proposals[result.base_offset] = (result, future)
        try:
            self._carry(out)
        except Exception as e:
            self._fail(e)
            raise
        return await future

    async def change_voters(self, op: str, voter_id: int, timeout_ms: int) -> tuple[ErrorCode, str | None]:
        """KIP-853's AddVoter ("add") or RemoveVoter ("remove") on this node, if it leads: asked again
        while it cannot start yet (another change uncommitted, no entry of the leader's epoch
        committed, the new voter still catching up), then awaited until its VotersRecord commits,
        all within timeout_ms; (ErrorCode.NONE, None) once committed, else Kafka's error and why."""
        deadline_ms = self.clock_ms() + timeout_ms
        while True:
            if self._stopped:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER, "this node's voter stopped"
            call = self.core.add_voter if op == "add" else self.core.remove_voter
            result, out = call(voter_id, self.clock_ms())
            if isinstance(result, Accepted):
                break
            self._step(lambda now, out=out: out)
            if result.error != ErrorCode.REQUEST_TIMED_OUT or self.clock_ms() >= deadline_ms:
                return result.error, result.reason
            await asyncio.sleep(VOTER_CHANGE_RETRY_S)
        future = asyncio.get_running_loop().create_future()
        self._proposals[result.base_offset] = (result, future)
        self._step(lambda now: out)
        log.info("node %d: %s voter %d appended at offset %d (epoch %d)", self.node_id, op, voter_id,
                 result.base_offset, result.epoch)
        try:
            await asyncio.wait_for(asyncio.shield(future), max(0.0, (deadline_ms - self.clock_ms()) / 1000))
        except asyncio.TimeoutError:
            return (ErrorCode.REQUEST_TIMED_OUT, f"the voter change at offset {result.base_offset} did not commit "
                    f"within {timeout_ms} ms (it still may): see kray metadata-quorum describe --status")
        except LookupError as e:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, f"the leader lost its epoch before the change committed: {e}"
        return ErrorCode.NONE, None

    def status(self) -> QuorumStatus:
        return self.core.status()

    def committed_batches(self, from_offset: int) -> list[Batch]:
        """The committed batches from `from_offset` (a batch boundary) on, control batches included."""
        return self.core.log.batches_between(from_offset, self.committed_offset)

    def settled(self) -> bool:
        """This node leads and everything in its log is committed (its epoch's LeaderChange too): its
        committed batches are the whole log a new reader must replay."""
        return self.core.status().role == "leader" and self.committed_offset == self.core.log.end_offset

    # ---- carrying out an Output ----------------------------------------------------------------------
    def _step(self, step: Callable[[int], Output]) -> None:
        try:
            self._carry(step(self.clock_ms()))
        except Exception as e:
            self._fail(e)
            raise
        finally:
            self._wake.set()

    def _say_role(self) -> None:
        """Each change of role or epoch, in the log (as Kafka's "Transitioning to ..." lines)."""
        now = (self.core.role, self.core.epoch, self.core.leader_id)
        if now != self._role:
            if self._role is not None:
                log.info("broker %d: voter %s in epoch %d (leader %s; was %s in epoch %d)", self.node_id,
                         now[0].value, now[1], now[2], self._role[0].value, self._role[1])
            self._role = now

    def _fail(self, error: BaseException) -> None:
        """Stop for good: nothing more is answered, sent or applied; run() raises `error`."""
        if self.failed is None:
            self.failed = error
        self._stopped = True
        for futures in self._inbound.values():
            for future in futures:
                if not future.done():
                    future.set_result(None)
        self._abandon_proposals(f"the node failed: {error}")
        self._wake.set()

    def _abandon_proposals(self, why: str) -> None:
        """Proposals still waiting will never hear whether they commit: their fate is unknown."""
        for accepted, future in self._proposals.values():
            if not future.done():
                future.set_exception(LookupError(f"proposal at {accepted.base_offset}: {why}, its fate unknown"))
        self._proposals.clear()

    def _carry(self, out: Output) -> None:
        self._say_role()
        try:
            self.store.persist(out)                     # 1-3: state, truncation, append, durable
        except OSError as e:
            raise QuorumStorageError(f"node {self.node_id}: the quorum's state or log could not be written "
                                     f"({e}); it stops, as nothing it decided may leave it unwritten") from e
        for dst, message in out.messages:               # 4: only then anything leaves
            if isinstance(message, REQUESTS):
                self._spawn(self._send(dst, message))
            else:
                self._answer(dst, message)
        for batch in out.committed:                     # 5: apply
            self.committed_offset = batch.next_offset
            self._settle(batch)
            if self.on_commit is not None and not batch.control:
                self.on_commit(batch)

    def _answer(self, dst: int, message: Message) -> None:
        request_type = {"VoteResponse": VoteRequest, "BeginQuorumEpochResponse": BeginQuorumEpochRequest,
                        "EndQuorumEpochResponse": EndQuorumEpochRequest,
                        "FetchResponse": FetchRequest}[type(message).__name__]
        for future in self._inbound.get((dst, request_type), ()):
            if not future.done():
                future.set_result(message)
                return

    def _settle(self, batch: Batch) -> None:
        for base in [b for b in self._proposals if b < batch.next_offset]:
            accepted, future = self._proposals.pop(base)
            if future.done():
                continue
            if base == batch.base_offset and batch.epoch == accepted.epoch:
                future.set_result(accepted)
            else:       # another leader's batch took the offset: the proposal never committed
                future.set_exception(LookupError(f"proposal at {base} (epoch {accepted.epoch}) lost"))

    async def _send(self, dst: int, message: Message) -> None:
        response = await self.transport.request(dst, message)
        if response is not None:
            self.deliver(response)

    def _spawn(self, coro: Awaitable) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
