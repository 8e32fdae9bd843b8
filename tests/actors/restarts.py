"""Kill an actor and wait until its old process is really gone, or Ray has really restarted it.

`ray.kill` only asks: it returns before the process dies. A test that probes the broker right
after the call may still talk to the old process and then lose a request in flight when the kill
lands. Waiting for the old process to stop answering, or for a new process id, makes "after the
kill" and "after the restart" mean what they say.
"""
import os
import time

import ray

from actors.shard.hosted import HostedReplica

RESTART_WAIT_S = 60


def process_id(actor, timeout_s: float) -> int:
    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=timeout_s)


def kill_and_await_restart(actor) -> None:
    """Kill an actor and return once Ray runs it in a new process."""
    _kill_and_await(actor, restarted=True)


def kill_and_await_death(actor) -> None:
    """Kill an actor and return once its old process no longer answers (Ray is restarting it, or
    already has): a probe sent after this cannot be served by the process that was killed."""
    _kill_and_await(actor, restarted=False)


def _kill_and_await(actor, restarted: bool) -> None:
    before = process_id(actor, RESTART_WAIT_S)
    ray.kill(actor, no_restart=False)
    deadline = time.monotonic() + RESTART_WAIT_S
    while time.monotonic() < deadline:
        try:
            if process_id(actor, 5) != before:
                return
        except ray.exceptions.GetTimeoutError:
            pass  # (a busy process: ask again)
        except Exception:  # unavailable while Ray restarts it: the old process is gone
            if not restarted:
                return
        time.sleep(0.1)
    raise AssertionError(f"actor not {'restarted' if restarted else 'gone from its old process'} "
                         f"within {RESTART_WAIT_S} s")


def leader_replica(controller, topic: str, partition: int = 0):
    """The HostedReplica of a partition's leader replica, as the controller holds it."""
    image = ray.get(controller.wait_for_metadata.remote(-1, 0))
    return image.partition_replicas[(image.topics[topic].topic_id, partition)]


def host_of(replica):
    """The shard a replica lives in: what a test kills (with every replica it hosts)."""
    return replica.shard


def inspect_replica(replica: HostedReplica, fn):
    """`fn(replica object)` run inside the shard that hosts it."""
    key = replica.key
    return ray.get(replica.shard.__ray_call__.remote(lambda shard: fn(shard.replicas[key])))
