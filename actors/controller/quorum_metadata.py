"""The controller's metadata log, kept by the metadata quorum: its records go to
`__cluster_metadata-0`, replicated by the voters that run in the voting brokers' gateways
(actors/controller/quorum_shell).

Each voting broker's node runs a controller, which reads and proposes through that broker's
voter alone (`voter_id`):
- `open()` waits until that voter leads with its whole log committed (a standby's wait for its
  turn) and reads every record, in the epoch it leads (`epoch`);
- `append(records)` hands records over in order and returns at once (the controller's decisions
  stay synchronous steps of its event loop); `appended` counts the calls;
- `durable(upto)` waits until the first `upto` appends are committed (a majority of voters has
  them). The controller lets nothing out (an answer, a replica's new state) before the records it
  rests on are committed: a decision a deposed quorum leader's log loses was never seen.

One sender proposes the records, in order, through the voter's gateway (a Ray call, like any
control call), in the epoch the metadata was read in. A proposal refused (the voter no longer
leads, or leads another epoch) or one that may have been appended but did not commit (the call
failed or timed out with its fate unknown) leaves the controller's state ahead of the log: the
controller stops (`on_failure`), Ray starts it again, and it reads the log afresh — KRaft's active
controller does the same when it loses leadership with uncommitted records.

(metadata_log.py reads the file an older Kray kept its metadata in, imported once.)
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import msgpack
import ray

from cluster import composition

log = logging.getLogger("kray.controller")
CALL_TIMEOUT_S = 10.0           # a proposal's commit, or a read, through the voter's gateway
LEADER_POLL_S = 0.2             # waiting for the voter to lead
LOOKUP_TIMEOUT_S = 5.0          # finding the voter's gateway in Ray's GCS
PROPOSAL_RECORDS_MAX = 10_000   # the quorum core's batch_max_records


def encode(record: dict[str, Any]) -> bytes:
    return msgpack.packb(record, use_bin_type=True)


def decode(payload: bytes) -> dict[str, Any]:
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


class QuorumMetadataLog:
    def __init__(self, voters: tuple[int, ...], voter_id: int, on_failure: Callable[[str], None]):
        self.voters = voters
        self.voter_id = voter_id
        self.on_failure = on_failure
        self.appended = 0
        self.committed = 0
        self._pending: list[tuple[int, list[bytes]]] = []   # (append count after it, payloads)
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._voter_gateway = None
        # the quorum epoch the metadata was read in: proposals are refused in any other (a voter
        # deposed and elected again has the other leaders' records this controller never read)
        self.epoch: int | None = None
        self._sender: asyncio.Task | None = None
        self.failed: str | None = None

    # ---- reading -------------------------------------------------------------------------------------
    async def open(self) -> list[dict[str, Any]]:
        while True:
            if await self._leads(settled=True):
                try:
                    epoch, settled, batches = await asyncio.wait_for(
                        self._voter_gateway.read_metadata.remote(0), CALL_TIMEOUT_S)
                    if settled:  # (else deposed, or a new epoch not yet committed, between the two calls)
                        self.epoch = epoch
                        records = [decode(p) for _, payloads in batches for p in payloads]
                        log.info("read %d metadata records from the quorum (epoch %d)", len(records), epoch)
                        return records
                except Exception as e:
                    log.info("reading the metadata from broker %d's voter failed: %s", self.voter_id, e)
            await asyncio.sleep(LEADER_POLL_S)

    async def _leads(self, *, settled: bool) -> bool:
        """Whether the voter says it leads (settled: with its whole log committed)."""
        answer = await self._ask_status()
        return answer is not None and answer[0].role == "leader" and (answer[1] or not settled)

    async def _ask_status(self):
        gateway = await self._gateway()
        if gateway is None:
            return None
        try:
            return await asyncio.wait_for(gateway.quorum_status.remote(), CALL_TIMEOUT_S / 2)
        except ray.exceptions.RayError:
            self._voter_gateway = None              # restarted, or gone: looked up again
        except asyncio.TimeoutError:                # busy (or cut off): the same handle is asked again
            pass
        return None

    async def own_status(self):
        """(QuorumStatus, settled) of this controller's voter, None while its gateway is not found."""
        gateway = await self._gateway()
        return None if gateway is None else await gateway.quorum_status.remote()

    async def _gateway(self):
        """The voter's gateway, looked up in Ray's GCS off the event loop (bounded)."""
        if self._voter_gateway is None:
            try:
                self._voter_gateway = await asyncio.wait_for(asyncio.to_thread(
                    ray.get_actor, composition.gateway_name(self.voter_id), composition.NAMESPACE),
                    LOOKUP_TIMEOUT_S)
            except (ValueError, asyncio.TimeoutError):
                return None
        return self._voter_gateway

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
            gateway = await self._gateway()
            if gateway is None:
                raise RuntimeError(f"the voter of broker {self.voter_id} is not found")
            # a failure or a timeout here leaves the proposal's fate unknown: raised
            outcome, detail = await asyncio.wait_for(
                gateway.propose_metadata.remote(payloads[start:start + PROPOSAL_RECORDS_MAX], self.epoch),
                CALL_TIMEOUT_S)
            if outcome == "not_leader":
                raise RuntimeError(f"the voter of broker {self.voter_id} no longer leads (leader: {detail})")
            if outcome != "committed":
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
