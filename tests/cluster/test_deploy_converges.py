"""A deploy converges after an election during start-up (issue 36, item 6): `kray start --address`
on three loaded hosts once never became ready: its metadata-quorum leader's controller stalled,
started again to read the metadata, and the deploy then waited 107 s for "0 of 3 brokers" to serve.
The brokers did serve: their gateways had finished starting with the controller before it
restarted, and the new incarnation, which adopts them, never counted them as serving.

Here on a 3-broker LocalCluster with combined voters (controller.quorum.voters=1,2,3): the active
controller is killed after the deploy (Ray starts it again; it reads the metadata and adopts the
running gateways), and the deploy asked again, as `kray start` asks the next active controller
after an election, answers with every broker at once."""
import time

import pytest
import ray

from cluster import local
from cluster.local import LocalCluster

QUORUM = {"controller.quorum.voters": "1,2,3", "offsets.topic.num.partitions": 3,
          "share.coordinator.state.topic.num.partitions": 3}
ANSWER_WITHIN_S = 60


def test_a_deploy_asked_again_after_the_active_controller_restarted_answers(tmp_path, monkeypatch):
    if ray.is_initialized():
        ray.shutdown()
    lines = []
    with LocalCluster(nodes=3, data_dir=tmp_path, overrides=QUORUM) as cluster:
        before = {b.broker_id: (b.host, b.port) for b in cluster._brokers}
        ray.kill(cluster.controller, no_restart=False)  # its process ends; Ray starts it again
        monkeypatch.setattr(local, "RAY_STARTUP_TIMEOUT_S", ANSWER_WITHIN_S)
        cluster.progress = lines.append
        t0 = time.monotonic()
        brokers = cluster._deploy_brokers(3)
        took_s = time.monotonic() - t0
        assert {b.broker_id: (b.host, b.port) for b in brokers} == before
        print(f"\nthe deploy answered {took_s:.1f} s after the active controller was killed; said: {lines}")
        assert took_s < ANSWER_WITHIN_S
