"""The controller's metadata log, kept by the metadata quorum: its records go to
`__cluster_metadata-0`, replicated by the voters (actors/controller/quorum_shell/settings.py: one
dedicated voter inside the controller itself, or combined voters in the voting brokers' gateways).

Three calls:
- `append(records)` hands records over in order and returns at once (the controller's decisions
  stay synchronous steps of its event loop); `appended` counts the calls;
- `durable(upto)` waits until the first `upto` appends are committed (a majority of voters has
  them). The controller lets nothing out (an answer, a replica's new state) before the records it
  rests on are committed: a decision a deposed quorum leader's log loses was never seen.
- `open()` waits for a quorum leader whose whole log is committed and reads every record.

With `only` (the controller of one voting broker, ControllerActor's voter mode, or the dedicated
controller with its `local` voter) it reads and proposes through that voter alone: `open()` waits
until that voter leads (the standby's wait for its turn), and a not_leader answer is a failure, not
a redirect.

One sender proposes the records, in order, through the leader (a voter's gateway, by a Ray call
like any control call; or the local voter). "not_leader" (nothing appended): the same records go to
the leader named. A proposal that may have been appended but did not commit (its leader lost its
epoch, or the call failed or timed out with its fate unknown) leaves the controller's state ahead of
the log: the controller stops (`on_failure`), Ray starts it again, and it reads the log afresh —
KRaft's active controller does the same when it loses leadership with uncommitted records.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import msgpack
import ray

from actors import names

log = logging.getLogger("kray.controller")
CALL_TIMEOUT_S = 10.0           # a proposal's commit, or a read, through a voter's gateway
LEADER_POLL_S = 0.2             # looking for the quorum's leader
OPEN_TIMEOUT_S = 300.0
PROPOSAL_RECORDS_MAX = 10_000   # the quorum core's batch_max_records


def encode(record: dict[str, Any]) -> bytes:
    return msgpack.packb(record, use_bin_type=True)


def decode(payload: bytes) -> dict[str, Any]:
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


class QuorumUnavailable(RuntimeError):
    """No quorum leader with a committed log was found in time."""


class QuorumMetadataLog:
    def __init__(self, voters: tuple[int, ...], on_failure: Callable[[str], None], only: int | None = None,
                 local=None):
        self.voters = voters
        # the dedicated controller's own voter (quorum_shell/voter.py LocalVoter), called in-process
        self.local = local
        self.on_failure = on_failure
        # the controller of one voting broker reads and writes through that broker's voter only: it
        # is active while that voter leads, and stops when it does not (not_leader is a failure)
        self.only = only
        self.appended = 0
        self.committed = 0
        self._pending: list[tuple[int, list[bytes]]] = []   # (append count after it, payloads)
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._gateways: dict[int, Any] = {}
        self._leader: int | None = None
        # the quorum epoch the metadata was read in: proposals are refused in any other (a voter
        # deposed and elected again has the other leaders' records this controller never read)
        self.epoch: int | None = None
        self._sender: asyncio.Task | None = None
        self.failed: str | None = None

    # ---- reading -------------------------------------------------------------------------------------
    async def open(self, timeout_s: float = OPEN_TIMEOUT_S) -> list[dict[str, Any]]:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            leader = await self._find_leader(settled=True)
            if leader is not None:
                try:
                    epoch, settled, batches = await asyncio.wait_for(
                        self._ask(self._gateway(leader), "read_metadata", 0), CALL_TIMEOUT_S)
                    if not settled:  # deposed (or a new epoch not yet committed) between the two calls
                        await asyncio.sleep(LEADER_POLL_S)
                        continue
                    self.epoch = epoch
                    records = [decode(p) for _, payloads in batches for p in payloads]
                    log.info("read %d metadata records from the quorum (leader: broker %d)", len(records), leader)
                    return records
                except Exception as e:
                    log.info("reading the metadata from broker %d failed: %s", leader, e)
            if self.only is None and asyncio.get_running_loop().time() > deadline:
                raise QuorumUnavailable(f"no leader of the metadata quorum (voters {list(self.voters)}) within "
                                        f"{timeout_s:.0f} s: are a majority of the voting brokers up?")
            await asyncio.sleep(LEADER_POLL_S)

    async def _find_leader(self, *, settled: bool = False) -> int | None:
        """A voter that says it leads (settled: with its whole log committed), else None."""
        candidates = ([self._leader] if self._leader is not None else []) + list(self.voters)
        for voter in [self.only] if self.only is not None else candidates:
            gateway = self._gateway(voter)
            if gateway is None:
                continue
            try:
                answer = await asyncio.wait_for(self._ask(gateway, "quorum_status"), CALL_TIMEOUT_S / 2)
            except ray.exceptions.RayError:
                self._gateways.pop(voter, None)     # restarted, or gone: looked up again
                continue
            except asyncio.TimeoutError:            # busy (or cut off): the same handle is asked again
                continue
            if answer is None:
                continue
            status, is_settled = answer
            if status.role == "leader" and (is_settled or not settled):
                self._leader = voter
                return voter
        return None

    async def own_status(self):
        """(QuorumStatus, settled) of this controller's own voter, None without one."""
        gateway = self._gateway(self.only)
        return None if gateway is None else await self._ask(gateway, "quorum_status")

    @staticmethod
    async def _ask(gateway, method: str, *args):
        """A voter's answer: over Ray from its gateway, or in-process from the local voter."""
        call = getattr(gateway, method)
        return await (call.remote(*args) if hasattr(call, "remote") else call(*args))

    def _gateway(self, broker_id: int):
        if self.local is not None:
            return self.local if broker_id == self.only else None
        if broker_id not in self._gateways:
            try:
                self._gateways[broker_id] = ray.get_actor(names.gateway_name(broker_id),
                                                          namespace=names.NAMESPACE)
            except ValueError:
                return None
        return self._gateways[broker_id]

    # ---- writing -------------------------------------------------------------------------------------
    def append(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        self.appended += 1
        self._pending.append((self.appended, [encode(r) for r in records]))
        if self._sender is None:
            self._sender = asyncio.ensure_future(self._send())
        self._wake.set()

    async def durable(self, upto: int) -> None:
        while self.committed < upto:
            if self.failed is not None:
                raise RuntimeError(f"the metadata quorum lost the controller's records: {self.failed}")
            self._progress.clear()
            await self._progress.wait()

    async def _send(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                count, payloads = self._take()
                try:
                    await self._propose(payloads)
                except Exception as e:
                    self._fail(f"{type(e).__name__}: {e}")
                    return
                self.committed = count
                self._progress.set()

    def _take(self) -> tuple[int, list[bytes]]:
        """The pending appends that fit one proposal (at least one whole append)."""
        count, payloads = self._pending.pop(0)
        payloads = list(payloads)
        while self._pending and len(payloads) + len(self._pending[0][1]) <= PROPOSAL_RECORDS_MAX:
            count, more = self._pending.pop(0)
            payloads += more
        return count, payloads

    async def _propose(self, payloads: list[bytes]) -> None:
        for start in range(0, len(payloads), PROPOSAL_RECORDS_MAX):
            chunk = payloads[start:start + PROPOSAL_RECORDS_MAX]
            while True:
                leader = self._leader if self._leader is not None else await self._find_leader()
                gateway = self._gateway(leader) if leader is not None else None
                if gateway is None and self.only is not None:
                    raise RuntimeError(f"the voter of broker {self.only} does not lead")
                if gateway is None:
                    self._leader = None
                    await asyncio.sleep(LEADER_POLL_S)     # an election: nothing was appended anywhere
                    continue
                # a failure or a timeout here leaves the proposal's fate unknown: raised
                outcome, detail = await asyncio.wait_for(
                    self._ask(gateway, "propose_metadata", chunk, self.epoch), CALL_TIMEOUT_S)
                if outcome == "committed":
                    break
                if outcome == "not_leader" and self.only is not None:
                    raise RuntimeError(f"the voter of broker {self.only} no longer leads (leader: {detail})")
                if outcome == "not_leader":
                    self._leader = detail if detail in self.voters else None
                    if self._leader is None:
                        await asyncio.sleep(LEADER_POLL_S)
                    continue
                raise RuntimeError(f"proposal lost: {detail}")

    def _fail(self, why: str) -> None:
        self.failed = why
        self._progress.set()
        log.error("the controller's metadata records may not have committed (%s): it starts again and reads "
                  "the metadata from the quorum", why)
        self.on_failure(why)

    def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
