"""The quorum's durable half on one node: the quorum-state file and the quorum log, written in the
order of the Output contract (actors/controller/quorum/output.py): state, truncation, append —
each durable (fsync) before the next, and all before the shell sends the step's messages.

Files, in the node's `log.dirs`, under `__cluster_metadata-0/` as Kafka lays them out:
- `quorum-state`: JSON, Kafka's QuorumStateData as Kafka writes it: v0 (leaderId, leaderEpoch,
  votedId, currentVoters: the static set) while the log holds no VotersRecord (Kafka's
  kraft.version 0), v1 (currentVoters gone, votedDirectoryId) once it holds one; replaced atomically (write a temporary file, fsync, rename, fsync the directory): a crash leaves
  the old state or the new one, never half of one.
- `00000000000000000000.log`: RecordBatch v2 after RecordBatch v2 (wire.encode_batches: the same
  bytes Fetch carries; each batch has its own length and CRC-32C). Recovery reads batches until
  the first torn or corrupt one, or one that breaks the log's shape, and cuts the file there, as
  Kafka's log recovery does for its active segment. Snapshots (and so more segments) come later.

The voter set is the log's (KIP-853): its last VotersRecord, committed or not. Before the log
holds one, it is the bootstrap set: `controller.quorum.voters` as this node first started with it,
recorded in `quorum-state`'s `currentVoters` (v0). A restart with another `controller.quorum.voters` is refused (`VotersChanged`) while
the log holds no VotersRecord, never silently followed; once it holds one the log decides, and the
config names only where to look for the quorum. Changing voters is AddRaftVoter/RemoveRaftVoter's
job (`kray metadata-quorum add-controller/remove-controller`), not a config edit's.

`crash_after` (tests only) stops a write after the named step, as a crash there would.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from protocol import record_batch as rb

from actors.controller.quorum import Batch, ElectionState, LogError, Output, QuorumLog

from . import wire

PARTITION_DIR = f"{wire.METADATA_TOPIC}-{wire.METADATA_PARTITION}"
STATE_FILE = "quorum-state"
LOG_FILE = "00000000000000000000.log"
STATE_DATA_VERSION = 0          # Kafka's QuorumStateData v0: currentVoters, a static voter set
DYNAMIC_STATE_DATA_VERSION = 1  # v1 (KIP-853): the voters are the log's, no currentVoters
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"   # Kafka's Uuid.ZERO_UUID, as its JSON writes it
NO_ID = -1


class VotersChanged(RuntimeError):
    """controller.quorum.voters differs from the voters this node recorded at its first start."""


class Crash(RuntimeError):
    """Raised by a store told to stop after a step (tests of the persistence order)."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class QuorumStore:
    def __init__(self, log_dir: str | os.PathLike, voters: tuple[int, ...], *, crash_after: str | None = None):
        self.dir = Path(log_dir) / PARTITION_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.voters = tuple(sorted(voters))
        self.crash_after = crash_after
        self._fd = os.open(self.dir / LOG_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        self.batches, self._positions = self._recover_log()
        self.election = self._load_state()

    # ---- quorum-state ------------------------------------------------------------------------------
    def _load_state(self) -> ElectionState:
        path = self.dir / STATE_FILE
        if not path.exists():
            self._write_state(ElectionState())       # records the bootstrap voter set at first start
            return ElectionState()
        data = json.loads(path.read_text())
        listed = data.get("currentVoters")
        recorded = tuple(sorted(v["voterId"] for v in listed)) if listed is not None else self.voters
        if recorded != self.voters:
            in_log = QuorumLog(self.batches).latest_voters()
            if in_log is None:
                raise VotersChanged(f"controller.quorum.voters {list(self.voters)} but {path} records "
                                    f"{list(recorded)}: change voters with `kray metadata-quorum add-controller/"
                                    f"remove-controller` (AddRaftVoter/RemoveRaftVoter), not the config")
            self.voters = recorded   # the log decides the voters; keep the bootstrap set recorded
        leader = data.get("leaderId", NO_ID)
        voted = data.get("votedId", NO_ID)
        return ElectionState(epoch=data.get("leaderEpoch", 0), leader_id=None if leader == NO_ID else leader,
                             voted_id=None if voted == NO_ID else voted)

    def _write_state(self, state: ElectionState) -> None:
        data = {"leaderId": NO_ID if state.leader_id is None else state.leader_id, "leaderEpoch": state.epoch,
                "votedId": NO_ID if state.voted_id is None else state.voted_id, "appliedOffset": 0}
        if QuorumLog(self.batches).latest_voters() is None:
            data.update(currentVoters=[{"voterId": v} for v in self.voters], data_version=STATE_DATA_VERSION)
        else:
            data.update(votedDirectoryId=ZERO_UUID, data_version=DYNAMIC_STATE_DATA_VERSION)
        tmp = self.dir / (STATE_FILE + ".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(data))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / STATE_FILE)
        _fsync_dir(self.dir)

    # ---- the log ---------------------------------------------------------------------------------------
    def _recover_log(self) -> tuple[list[Batch], list[int]]:
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        shape = QuorumLog()
        batches: list[Batch] = []
        positions: list[int] = []
        pos = 0
        while pos < len(data):
            try:
                header = rb.parse_header(data, pos)
                end = pos + header.size_bytes
                if end > len(data):
                    break
                (batch,) = wire.decode_batches(data[pos:end])
                shape.append(batch)
            except (rb.CorruptRecord, wire.BadQuorumMessage, LogError, ValueError):
                break
            batches.append(batch)
            positions.append(pos)
            pos = end
        if pos != len(data):
            os.ftruncate(self._fd, pos)
            os.fsync(self._fd)
        return batches, positions

    @property
    def log_end_bytes(self) -> int:
        return os.fstat(self._fd).st_size

    def _truncate(self, offset: int) -> None:
        keep = 0
        while keep < len(self.batches) and self.batches[keep].base_offset < offset:
            keep += 1
        if keep and self.batches[keep - 1].next_offset > offset:
            raise LogError(f"truncation to {offset} falls inside a batch")
        cut = self._positions[keep] if keep < len(self._positions) else self.log_end_bytes
        del self.batches[keep:], self._positions[keep:]
        os.ftruncate(self._fd, cut)
        os.fsync(self._fd)

    def _append(self, batches) -> None:
        pos = self.log_end_bytes
        out = bytearray()
        for batch in batches:
            self._positions.append(pos + len(out))
            out += wire.encode_batches([batch])
            self.batches.append(batch)
        os.pwrite(self._fd, bytes(out), pos)
        os.fsync(self._fd)

    # ---- the contract ------------------------------------------------------------------------------
    def persist(self, out: Output) -> None:
        """Steps 1-3 of the Output contract, each durable before the next. The caller sends
        out.messages only after this returns."""
        if out.persist_state is not None:
            self._write_state(out.persist_state)
            self.election = out.persist_state
            self._maybe_crash("state")
        if out.truncate_to is not None:
            self._truncate(out.truncate_to)
            self._maybe_crash("truncate")
        if out.append:
            self._append(out.append)
            self._maybe_crash("append")

    def _maybe_crash(self, step: str) -> None:
        if self.crash_after == step:
            raise Crash(step)

    def close(self) -> None:
        os.close(self._fd)
