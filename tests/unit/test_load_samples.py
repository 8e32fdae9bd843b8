"""The balancer's load samples (actors/controller/load_samples.py) and how the controller's balancer shell
collects them (actors/controller/balancing.py): partitions' sizes from their leaders' brokers, produce rates
from the sizes' growth, and the plan weighing by them."""
import asyncio
from types import SimpleNamespace

from actors.config_schema import BROKER_DEFAULTS
from actors.controller import balancer
from actors.controller.balancing import Balancing, partition_loads
from actors.controller.core import BrokerInfo, ControllerCore
from actors.controller.load_samples import LoadSamples


def test_sizes_and_rates_from_growth():
    s = LoadSamples(interval_s=10)
    assert s.due(0.0)
    s.record({("t", 0): 1000, ("t", 1): 0}, now_s=100.0)
    assert s.of(("t", 0)) == (1000.0, None)  # one sample: a size, no rate yet
    assert not s.due(105.0) and s.due(110.0)
    s.record({("t", 0): 3000, ("t", 1): 0}, now_s=110.0)
    assert s.of(("t", 0)) == (3000.0, 200.0)  # 2000 bytes in 10 s
    assert s.of(("t", 1)) == (0.0, 0.0)
    s.record({("t", 0): 3000}, now_s=120.0)
    assert s.of(("t", 0)) == (3000.0, 100.0)  # smoothed: half way to this interval's 0 bytes/s


def test_a_shrink_gives_no_rate_and_a_partition_missing_from_a_sample_keeps_its_values():
    s = LoadSamples(interval_s=10)
    s.record({("t", 0): 5000, ("t", 1): 10}, now_s=0.0)
    s.record({("t", 0): 6000, ("t", 1): 10}, now_s=10.0)
    s.record({("t", 0): 100}, now_s=20.0)  # retention deleted segments: the size shrank; t-1's leader moves
    assert s.of(("t", 0)) == (100.0, 100.0)  # the rate of before, unchanged
    assert s.of(("t", 1)) == (10.0, 0.0)  # (a value that came and went would move replicas back and forth)
    s.record({("t", 0): 100, ("t", 1): 30}, now_s=40.0)
    size, rate = s.of(("t", 1))  # 20 bytes in the 30 s since it was last measured (2/3 B/s), half way from 0
    assert size == 30.0 and abs(rate - 1 / 3) < 1e-9
    s.forget_except({("t", 1)})
    assert s.of(("t", 0)) == (None, None)
    assert s.of(("t", 2)) == (None, None)  # never measured


def test_rounded_weights_make_no_moves_as_partitions_grow_alike():
    """A placement balanced by weight stays put while every partition grows at the same pace (the weights are
    relative to the means), and small differences between partitions do not set off copying."""
    parts = [balancer.PartitionLoad("t", i, (1 + i % 3,), 1 + i % 3, (1 + i % 3,), size_bytes=1000.0 * (1 + i % 2))
             for i in range(6)]
    assert balancer.plan(parts, {1, 2, 3}).empty
    grown = [balancer.PartitionLoad(p.topic, p.partition, p.replicas, p.leader, p.isr,
                                    size_bytes=p.size_bytes * 7 + 3 * p.partition, produce_bytes_per_s=500.0 + p.partition)
             for p in parts]
    assert balancer.plan(grown, {1, 2, 3}).empty


class _Gateway:
    def __init__(self, sizes=None, fails=False):
        self.sizes, self.fails = sizes or {}, fails
        self.led_partition_sizes = SimpleNamespace(remote=self._remote)

    async def _answer(self):
        if self.fails:
            raise ConnectionError("the broker's gateway is gone")
        return self.sizes

    def _remote(self):
        return self._answer()


def test_the_shell_asks_the_serving_brokers_and_the_plan_weighs_by_what_they_said():
    core = ControllerCore(dict(BROKER_DEFAULTS) | {"kray.balancer.enable": True,
                                                   "kray.balancer.load.weights.enable": True}, "cluster-1")
    for b in (1, 2, 3):
        core.register_broker(BrokerInfo(b, "127.0.0.1", 9091 + b, None, f"node-{b}"))
    core.create_topic("t", 6, 1, {})
    leaders = {p.index: p.leader for p in core.topics["t"].partitions}
    heavy = {i for i in leaders if leaders[i] == 1}  # broker 1's partitions are 100x the others
    gateways = {b: _Gateway({("t", i): (100_000 if i in heavy else 1_000) for i in leaders if leaders[i] == b})
                for b in (1, 2)}
    gateways[3] = _Gateway(fails=True)  # broker 3 does not answer: its partitions stay unknown (never measured)
    gateways[4] = _Gateway({("t", 99): 5})  # not serving: not asked
    shell = SimpleNamespace(core=core, rec=SimpleNamespace(gateways=gateways, serving={1, 2, 3}))
    balancing = Balancing(shell)
    asyncio.run(balancing.sample())
    loads = {(p.topic, p.partition): p for p in partition_loads(core, balancing.samples)}
    for i, b in leaders.items():
        size = loads[("t", i)].size_bytes
        assert size == (None if b == 3 else 100_000 if i in heavy else 1_000), (i, b, size)
    assert ("t", 99) not in {k for k in loads}
    w = balancer.weights(list(loads.values()))
    assert all(w[("t", i)] > w[("t", j)] for i in heavy for j in leaders if leaders[j] == 2)
