"""A real Ray start that misses Ray's 30 s raylet registration window (as on an overloaded machine) comes up on
the next attempt, with nothing of the failed one left running (cluster/ray_node_start.py)."""
import re
import time

import ray

from cluster.local import _init_ray
from cluster.process_tree import command_line, descendants
from cluster.ray_node_start import start_ray_node


def test_a_ray_start_that_missed_rays_window_comes_up_on_the_next_attempt(monkeypatch):
    import ray._private.node as ray_node
    import ray._private.services as services

    if ray.is_initialized():
        ray.shutdown()
    real_get_node, skew_s, attempts, said = services.get_node, [0.0], [], []

    class RaysClock:
        """Ray's node module's clock, which jumps 31 s while the first attempt waits for its raylet."""
        def __getattr__(self, name):
            return getattr(time, name)

        def monotonic(self):
            return time.monotonic() + skew_s[0]

    def get_node(*args, **kwargs):
        if len(attempts) == 1:
            skew_s[0] += 31.0
            raise RuntimeError("node info not available yet")  # (what Ray's loop sees before registration)
        return real_get_node(*args, **kwargs)

    def start():
        attempts.append(time.monotonic())
        _init_ray("local")

    monkeypatch.setattr(ray_node, "time", RaysClock())
    monkeypatch.setattr(services, "get_node", get_node)
    try:
        start_ray_node(start, said.append)
        assert len(attempts) == 2 and len(said) == 1 and "attempt 2 of 3" in said[0]
        ended = int(re.search(r"ended its (\d+) processes", said[0]).group(1))
        assert ended >= 2, said  # at least the first attempt's GCS and raylet
        assert [n["Alive"] for n in ray.nodes()] == [True]
        assert ray.get(ray.remote(lambda: "served").options(num_cpus=0).remote(), timeout=60) == "served"
        gcs = [p for p in descendants() if "gcs_server" in command_line(p)]
        assert len(gcs) == 1, f"the failed attempt's GCS is still running: {gcs}"
    finally:
        ray.shutdown()
    assert not [p for p in descendants() if "gcs_server" in command_line(p) or "raylet" in command_line(p)]
