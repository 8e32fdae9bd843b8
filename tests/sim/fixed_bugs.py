"""Bugs of the cores that the simulation found, replayed step by step on the cores alone (no
scheduler), so that what went wrong, and what the fix does instead, is plain. test_simulation.py
checks the fixed behaviour, and keeps the seeds that found them (FIXED_CORE_BUGS).
"""
from __future__ import annotations

from actors.partition.epoch_cache import LeaderEpochCache
from actors.partition.replication import (
    BatchSpan, FollowerAction, PartitionRegistration, ReplicaCore, ReplicationConfig,
)


def divergent_follower_below_log_start() -> dict:
    """Seed 458 (step 403), reduced. Replicas (2, 0, 1), min.insync.replicas 2.

    1. Epoch 0: broker 2 leads and appends w6 at offset 0 (acks=1); it crashes before anyone
       fetches it.
    2. Epoch 1: broker 0 leads, broker 1 follows; w16 is appended at offset 0 and committed
       (acks=all acknowledged).
    3. DeleteRecords on broker 0: log start 1; its epoch cache, truncated from the start, is
       [(epoch 1, start 1)].
    4. Broker 2 restarts with w6 and follows broker 0: fetch offset 1, last fetched epoch 0. The
       leader's cache says epoch 0 ends at 1 (= its log start, the start of the first epoch it
       knows), which is not below the fetch offset: no diverging epoch. The bug: the fetch was
       accepted at offset 1 and broker 2 proposed for the ISR; its answer (log start 1, which
       would have deleted w6) was lost when broker 0 failed; broker 2 was elected with w6 at
       offset 0 and log start 0, and served w6, never committed, at an offset the partition had
       deleted. The fix: epoch 0 is older than any epoch the leader holds, so it answers
       OFFSET_OUT_OF_RANGE and proposes nothing; the follower starts over at the log start.

    Returns the leader's answer to broker 2, the ISR it proposed (None), and broker 2's log after
    it applied the answer."""
    config = ReplicationConfig(replica_lag_time_max_ms=250, min_insync_replicas=2)
    replicas = (2, 0, 1)
    logs = {0: [], 1: [], 2: [(0, "w6")]}                       # step 1
    b0, b1 = ReplicaCore(0, config=config), ReplicaCore(1, config=config)
    epoch1 = PartitionRegistration(0, 1, 1, replicas, (0, 1))  # step 2
    b0.apply_registration(epoch1, 0)
    b1.apply_registration(epoch1, 0)
    logs[0].append((1, "w16"))
    b0.on_leader_append(1, 0)

    def fetch(follower: ReplicaCore, leader: ReplicaCore, deliver: bool = True):
        request = follower.next_fetch()
        answer, effects = leader.handle_follower_fetch(request, 0)
        llog, flog = logs[leader.broker_id], logs[follower.broker_id]
        entries = ([(o, *llog[o]) for o in range(answer.read_from, len(llog))]
                   if answer.read_from is not None else [])
        if deliver:
            step = follower.on_fetch_response(request, answer, [BatchSpan(o, o, e) for o, e, _ in entries])
            if step.action is FollowerAction.TRUNCATE:
                del flog[step.truncate_to:]
            elif step.action is FollowerAction.APPEND:
                flog.extend((e, w) for _, e, w in entries)
            elif step.action is FollowerAction.RESET:  # everything below the leader's log start goes
                flog.clear()
        return answer, effects

    fetch(b1, b0)
    fetch(b1, b0)
    committed_at_0 = logs[0][0] if b0.high_watermark >= 1 else None
    b0.advance_log_start_offset(1)                              # step 3
    epochs = LeaderEpochCache()                                 # step 4
    epochs.assign(0, 0)
    b2 = ReplicaCore(2, log_end_offset=1, epochs=epochs, config=config)
    b2.apply_registration(epoch1, 0)
    answer, effects = fetch(b2, b0)
    proposed = effects.alter_partition.new_isr if effects.alter_partition is not None else None
    return {"committed_at_0": committed_at_0, "answer_error": answer.error_code, "proposed_isr": proposed,
            "follower_log_start": b2.log_start_offset, "follower_log": logs[2]}
