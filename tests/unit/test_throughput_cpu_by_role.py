"""benchmarks/throughput.cpu_by_role: CPU spent between two snapshots of a process tree, per role."""
from benchmarks.throughput import cpu_by_role


def test_spent_cpu_is_summed_per_role_and_a_reused_pid_counts_from_zero():
    before = {1: (100, 5.0), 2: (100, 1.0), 3: (100, 9.0)}
    after = {1: (100, 6.5), 2: (100, 1.25), 3: (200, 0.5), 4: (300, 0.75)}  # pid 3 reused, pid 4 new
    roles = {1: "GatewayActor", 2: "ShardActor", 3: "ShardActor", 4: "other"}
    assert cpu_by_role(before, after, roles.get) == {"GatewayActor": 1.5, "ShardActor": 0.75, "other": 0.75}
