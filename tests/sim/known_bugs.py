"""Bugs of the cores that the simulation found and that are not fixed yet, replayed step by step
on the cores alone (no scheduler), so that what goes wrong is plain. test_simulation.py checks that
they still happen: when one is fixed, its test fails; delete it here and its seed from
KNOWN_CORE_BUGS there.
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
       knows), which is not below the fetch offset: no diverging epoch, the fetch is accepted at
       offset 1 and broker 2 is proposed for the ISR. Its answer (log start 1, which would delete
       w6) is lost when broker 0 fails.
    5. Broker 2 is elected (epoch 2, ISR [2, 1]) with w6 at offset 0 and log start 0. Broker 1
       fetches, is told to truncate to 0 (w16 is gone), copies w6, and the high watermark
       reaches 1.

    Returns what broker 2 then serves: a record that was never committed is committed and
    readable at offset 0, an offset the partition had deleted (its log start went back)."""
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
        return answer, effects

    fetch(b1, b0)
    fetch(b1, b0)
    committed_at_0 = logs[0][0] if b0.high_watermark >= 1 else None
    b0.advance_log_start_offset(1)                              # step 3
    epochs = LeaderEpochCache()                                 # step 4
    epochs.assign(0, 0)
    b2 = ReplicaCore(2, log_end_offset=1, epochs=epochs, config=config)
    b2.apply_registration(epoch1, 0)
    answer, effects = fetch(b2, b0, deliver=False)
    proposed = effects.alter_partition.new_isr if effects.alter_partition is not None else None
    epoch2 = PartitionRegistration(2, 2, 3, replicas, (2, 1))   # step 5
    b2.apply_registration(epoch2, 0)
    b1.apply_registration(epoch2, 0)
    for _ in range(3):
        fetch(b1, b2)
    return {"committed_at_0": committed_at_0, "deleted_below": 1, "diverging_epoch": answer.diverging_epoch,
            "proposed_isr": proposed, "new_leader_hw": b2.high_watermark,
            "new_leader_log_start": b2.log_start_offset, "served_at_0": logs[2][0]}
