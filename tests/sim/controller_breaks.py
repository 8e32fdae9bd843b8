"""Deliberately broken rules of the controller's reconciler, to show that the controller
simulation (tests/sim/controller_world.py) catches each, and to keep showing it in CI."""
from __future__ import annotations

import contextlib
from typing import Iterator

from actors.controller.reconciler import Reconciler


def _route_after_shard_death(original):
    def shard_died(self, shard, now):
        # the bug: a dead shard's replicas are hosted again, but the image keeps routing to their
        # leaders until they confirm again (Ray restarted the shard empty: nothing is there)
        leading = {key: r.leading for key, r in self.replicas.items() if r.shard == shard}
        original(self, shard, now)
        for key, epoch in leading.items():
            self.replicas[key].leading = epoch
    return shard_died


def _rehosted_replica_counts_as_told(original):
    def hosted(self, action, address, now):
        # the bug: a replica hosted again (Ray restarted its shard empty) counts as told the state
        # it was told before the restart, so it never learns its partition's state again
        r = self.replicas.get(action.key)
        original(self, action, address, now)
        if r is not None and r.hosted:
            r.told = getattr(r, "told_before", None)
    return hosted


def _remember_told(original):
    def down(self, key, r, now):
        r.told_before = r.told if r.told is not None else getattr(r, "told_before", None)
        original(self, key, r, now)
    return down


def _no_retell_after_a_failed_tell(original):
    def tell_failed(self, action, now):
        # the bug: a Tell that timed out (its broker cut off) counts as delivered
        return None
    return tell_failed


def _node_loss_keeps_replicas(original):
    def node_lost(self, node_id, replaced_by=None):
        # the bug: a lost node's shards are killed, but its replicas' handles are kept
        replicas = dict(self.replicas)
        actions = original(self, node_id, replaced_by)
        self.replicas.update(replicas)
        return actions
    return node_lost


# rule -> the Reconciler methods it patches, each with the function that makes the broken one
BREAKS = {
    "route_after_shard_death": (("shard_died", _route_after_shard_death),),
    "rehosted_replica_counts_as_told": (("hosted", _rehosted_replica_counts_as_told), ("_down", _remember_told)),
    "no_retell_after_a_failed_tell": (("tell_failed", _no_retell_after_a_failed_tell),),
    "node_loss_keeps_replicas": (("node_lost", _node_loss_keeps_replicas),),
}


@contextlib.contextmanager
def broken(rule: str | None) -> Iterator[None]:
    """Patch one rule of the Reconciler for the duration of the block (None: nothing is broken)."""
    if rule is None:
        yield
        return
    originals = {name: getattr(Reconciler, name) for name, _ in BREAKS[rule]}
    for name, make in BREAKS[rule]:
        setattr(Reconciler, name, make(originals[name]))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(Reconciler, name, original)
