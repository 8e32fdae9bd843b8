"""Deliberately broken rules, to show that the simulation can fail (and keep showing it in CI)."""
from __future__ import annotations

import contextlib
from typing import Iterator

from actors.controller import elections
from actors.partition import replication
from actors.partition.replication import FetchAnswer
from protocol.errors import ErrorCode
from tests.sim import world


def _elect_outside_isr(original):
    def change(self, key, p, *, isr, live):
        # the bug: any live replica may lead, in sync or not
        if not (p.leader in isr and p.leader in live):
            leader = next((r for r in p.replicas if r in live), elections.NO_LEADER)
            if leader != p.leader:
                return self._record(key, p, leader=leader, isr=isr, leader_epoch=p.leader_epoch + 1)
        return original(self, key, p, isr=isr, live=live)
    return elections.ReplicationControl, "_change", change


def _hw_ignores_followers(original):
    def increment(self, now_ms):
        # the bug: the high watermark follows the leader's own log end, like a single replica
        if self.log_end_offset > self.high_watermark:
            self.high_watermark = self.log_end_offset
            return True
        return False
    return replication.ReplicaCore, "_maybe_increment_high_watermark", increment


def _no_divergence_check(original):
    def handle_follower_fetch(self, request, now_ms):
        # the bug: the leader trusts the follower's fetch offset without checking its last fetched
        # epoch (no diverging epoch answer, so no truncation: Kafka before KIP-101)
        return original(self, replication.FetchRequest(request.replica_id, request.current_leader_epoch,
                                                       request.fetch_offset, replication.UNDEFINED_EPOCH), now_ms)
    return replication.ReplicaCore, "handle_follower_fetch", handle_follower_fetch


def _shrink_isr_without_controller(original):
    def tick(self, now_ms):
        # the bug: the leader drops lagging followers from its ISR on its own (no AlterPartition)
        lag = self.config.replica_lag_time_max_ms
        out = {r for r in self.isr if r != self.broker_id and r in self.followers
               and not self.followers[r].is_caught_up(self.log_end_offset, now_ms, lag)}
        if out:
            self.isr = self.isr - out
            self._pending = None
            return self._after_change(now_ms)
        return original(self, now_ms)
    return replication.ReplicaCore, "tick", tick


def _forget_pending_on_any_error(original):
    def on_alter_partition_response(self, request, response, now_ms):
        # the bug: any AlterPartition error drops the pending ISR change, though a retried or
        # duplicated request that was applied answers INVALID_UPDATE_VERSION (seed 5137 found it)
        if (response.error_code and self.role is replication.Role.LEADER and self._pending is not None
                and self._pending.request == request):
            self._pending = None
            return self._after_change(now_ms)
        return original(self, request, response, now_ms)
    return replication.ReplicaCore, "on_alter_partition_response", on_alter_partition_response


def _controller_forgets_answers(original):
    def alter_partition(self, broker_id, broker_epoch, key, *, leader_epoch, partition_epoch, new_isr,
                        proposal_id=-1):
        # the bug: the controller decides every copy of a proposal afresh, so a late copy of a
        # refused expansion can be applied after the leader gave up on it (seed 8741 found it)
        return original(self, broker_id, broker_epoch, key, leader_epoch=leader_epoch,
                        partition_epoch=partition_epoch, new_isr=new_isr)
    return elections.ReplicationControl, "alter_partition", alter_partition


def _answers_by_partition_index(original):
    def match_answers(self, wanted, answers):
        # the bug: the follower's fetcher keys the answers of a batched fetch by partition index
        # alone, forgetting the topic, so orders-0 may be handed the answer meant for events-0
        by_index = {key[1]: (answer, entries) for key, answer, entries in answers}
        return [(key, request, *by_index.get(key[1], (FetchAnswer(ErrorCode.UNKNOWN_SERVER_ERROR), [])))
                for key, request in wanted]
    return world.Simulation, "_match_answers", match_answers


BREAKS = {
    "answers_by_partition_index": (world.Simulation, "_match_answers", _answers_by_partition_index),
    "controller_forgets_answers": (elections.ReplicationControl, "alter_partition", _controller_forgets_answers),
    "forget_pending_isr_change_on_any_error": (replication.ReplicaCore, "on_alter_partition_response",
                                               _forget_pending_on_any_error),
    "elect_outside_isr": (elections.ReplicationControl, "_change", _elect_outside_isr),
    "hw_ignores_followers": (replication.ReplicaCore, "_maybe_increment_high_watermark", _hw_ignores_followers),
    "no_divergence_check": (replication.ReplicaCore, "handle_follower_fetch", _no_divergence_check),
    "shrink_isr_without_controller": (replication.ReplicaCore, "tick", _shrink_isr_without_controller),
}


@contextlib.contextmanager
def broken(rule: str | None) -> Iterator[None]:
    """Patch one rule for the duration of the block (None: nothing is broken)."""
    if rule is None:
        yield
        return
    cls, name, make = BREAKS[rule]
    original = getattr(cls, name)
    _, _, replacement = make(original)
    setattr(cls, name, replacement)
    try:
        yield
    finally:
        setattr(cls, name, original)
