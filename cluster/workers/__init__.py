"""Ray worker pools for share groups: a handler run by Ray actors that share-consume a group,
scaling between min and max workers on the group's lag (see pool.py)."""
from cluster.workers.policy import Decision, Observation, PolicyConfig, ScalingPolicy

__all__ = ["ShareWorkerPool", "PolicyConfig", "ScalingPolicy", "Observation", "Decision"]


def __getattr__(name):  # the pool imports Ray: only when asked for
    if name == "ShareWorkerPool":
        from cluster.workers.pool import ShareWorkerPool
        return ShareWorkerPool
    raise AttributeError(name)
