"""Streams groups (KIP-1071) beside Apache Kafka 4.4: a Kafka Streams 4.4 application with group.protocol=streams
(tests/kafka/streams/WordCount.java: word count with a state store and a repartition topic; two instances, then
the second alone after the first leaves) runs on Kafka 4.4 and on Kray, and a user sees the same: the same counts,
the same internal topics created by the broker (partitions, cleanup.policy), the same topology and tasks in
Admin.describeStreamsGroups, the same interactive-query metadata (which application.server holds which
partitions), at least once and exactly once. About 15 s per broker and guarantee; in ./dev test (not
reference_full). The low-level answers (validation errors, statuses, fencing, StreamsGroupDescribe) are compared
below with raw StreamsGroupHeartbeat requests."""
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from cluster.admin import KafkaConnection
from protocol import messages as m
from tests.kafka.broker import HERE, LIB
from tests.kafka.test_clients import run_java

H = m.StreamsGroupHeartbeatRequest


@pytest.fixture(scope="module")
def streams_classes(tmp_path_factory):
    if shutil.which("javac") is None:
        pytest.skip("javac not found: the Kafka Streams application needs a JDK 17+")
    if not list(LIB.glob("kafka-streams-*.jar")):
        pytest.skip("kafka-streams is not in tests/kafka/lib: run ./dev test (install_kafka) to fetch it")
    out = tmp_path_factory.mktemp("kafka-streams-java")
    compiled = subprocess.run(["javac", "-cp", f"{LIB}/*", "-d", str(out), str(HERE / "streams" / "WordCount.java")],
                              capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    return out


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_word_count_streams_application_runs_as_on_kafka(both, streams_classes, guarantee):
    """exactly_once_v2: the application's producers are transactional (transaction version 2 on both brokers),
    the group's offsets committed inside the transactions, the counts read back read_committed."""
    results = {}
    for side, bootstrap in both.items():
        app = f"wc-{uuid.uuid4().hex[:6]}"
        results[side] = run_java(streams_classes, "WordCount", bootstrap, app, "300", guarantee, timeout_s=240)
    for side, r in results.items():
        assert r["counts"] == r["expected"], (side, r)
        # after the first instance left, the second counted on from the state it restored from the changelog
        assert r["counts_after_leave_match"], (side, r)
        assert isinstance(r["group"], dict), (side, r["group"])
        for instance in ("0", "1"):
            assert f"{instance}:RUNNING" in r["states"], (side, r["states"])
    kafka, kray = results["kafka"], results["kray"]
    assert kray["counts"] == kafka["counts"]
    assert kray["internal_topics"] == kafka["internal_topics"] == {
        "by-word-repartition": {"partitions": 3, "cleanup.policy": "delete"},
        "word-counts-changelog": {"partitions": 3, "cleanup.policy": "compact"}}
    # the subtopologies name the application's topics: compare them without the random application id
    assert ([s.replace(_app(kray), "APP") for s in kray["group"]["subtopologies"]]
            == [s.replace(_app(kafka), "APP") for s in kafka["group"]["subtopologies"]])
    assert kray["group"]["active_tasks"] == kafka["group"]["active_tasks"] == ["0_0", "0_1", "0_2",
                                                                               "1_0", "1_1", "1_2"]
    assert kray["group"]["members"] == kafka["group"]["members"] == 1   # the second instance, holding every task
    # interactive queries: both instances known by their application.server, every input partition placed
    assert kray["iq"] == kafka["iq"] == {"hosts": 2, "apple_has_host": True, "active_partitions": [
        "by-word-repartition-0", "by-word-repartition-1", "by-word-repartition-2", "lines-0", "lines-1", "lines-2"]}


def _app(result) -> str:
    first = result["group"]["subtopologies"][0]
    return first.split("source=[")[1].split("-lines]")[0]


def _topology(source: str, prefix: str) -> H.Topology:
    return H.Topology(epoch=0, subtopologies=[
        H.Subtopology(subtopology_id="0", source_topics=[source], source_topic_regex=[], state_changelog_topics=[],
                      repartition_sink_topics=[f"{prefix}-rep"], repartition_source_topics=[], copartition_groups=[]),
        H.Subtopology(subtopology_id="1", source_topics=[], source_topic_regex=[], repartition_sink_topics=[],
                      state_changelog_topics=[H.TopicInfo(name=f"{prefix}-store-changelog", partitions=0,
                                                          replication_factor=0, topic_configs=[
                                                              H.KeyValue(key="cleanup.policy", value="compact")])],
                      repartition_source_topics=[H.TopicInfo(name=f"{prefix}-rep", partitions=0, replication_factor=0,
                                                             topic_configs=[])],
                      copartition_groups=[])])


def _heartbeats(bootstrap: str) -> list:
    """A scripted conversation of one member: invalid requests, a join (the internal topics are missing, then
    created by the broker), a fenced epoch, a leave; what each answer says, without ids."""
    source = f"sg-src-{uuid.uuid4().hex[:6]}"
    group, prefix = f"sg-{uuid.uuid4().hex[:6]}", f"sgp-{uuid.uuid4().hex[:6]}"
    out = []
    with KafkaConnection(bootstrap, client_id="streams-probe") as conn:
        conn._call(m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
            name=source, num_partitions=2, replication_factor=1, assignments=[], configs=[])], timeout_ms=30000,
            validate_only=False), 19, 7)
        time.sleep(1.0)   # Kafka's group coordinator learns of a new topic from the metadata log a little later

        def hb(record=True, **kw):
            fields = dict(group_id=group, member_id="m1", member_epoch=0, endpoint_information_epoch=0,
                          rebalance_timeout_ms=30000, process_id="p1", active_tasks=[], standby_tasks=[],
                          warmup_tasks=[], topology=_topology(source, prefix))
            r = conn._call(H(**{**fields, **kw}), 88, 0)
            if record:
                out.append((r.error_code, r.error_message if r.error_code else None,
                            sorted(s.status_code for s in r.status), r.heartbeat_interval_ms,
                            r.task_offset_interval_ms))
            return r
        hb(group_id="")
        hb(member_id="")
        hb(topology=None)
        hb(rebalance_timeout_ms=-1)
        hb(active_tasks=[H.TaskIds(subtopology_id="0", partitions=[0])])
        first = hb()
        hb(member_epoch=first.member_epoch, topology=None, active_tasks=[], standby_tasks=None, warmup_tasks=None)
        steady = dict(topology=None, active_tasks=None, standby_tasks=None, warmup_tasks=None)
        deadline = time.monotonic() + 20
        r = first
        # (the answers while the broker creates the internal topics are not compared: how many say MISSING_INTERNAL_
        # TOPICS, and whether the assignment delay has passed by the end, depend on each broker's timing)
        while any(s.status_code in (1, 3) for s in r.status) and time.monotonic() < deadline:
            time.sleep(0.5)
            r = hb(record=False, member_epoch=r.member_epoch, **steady)
        out.append(("internal topics created", not any(s.status_code == 3 for s in r.status)))

        def describe():
            return conn._call(m.StreamsGroupDescribeRequest(group_ids=[group], include_authorized_operations=False,
                                                            include_topology_description=False), 89, 1).groups[0]
        d = describe()
        # (the first assignment waits for group.streams.initial.rebalance.delay.ms; on a busy machine one broker may
        # still be inside it: heartbeat on until the assignment is done, and compare the group then)
        while d.group_state in ("Assigning", "Reconciling") and time.monotonic() < deadline + 20:
            time.sleep(0.5)
            r = hb(record=False, member_epoch=r.member_epoch, **steady)
            d = describe()

        def named(name):
            return name.replace(prefix, "PREFIX").replace(source, "SOURCE")
        out.append(("described", d.error_code, d.group_state, d.assignor_name, d.topology_description_status,
                    d.topology_description is None, d.topology.epoch,
                    [(s.subtopology_id, [named(n) for n in s.source_topics], [named(n) for n in s.repartition_sink_topics],
                      [(named(i.name), i.partitions, i.replication_factor, [(kv.key, kv.value) for kv in i.topic_configs])
                       for i in s.state_changelog_topics + s.repartition_source_topics])
                     for s in d.topology.subtopologies],
                    [(x.client_id, x.client_host, x.process_id, x.topology_epoch, x.instance_id, x.rack_id,
                      x.user_endpoint, x.client_tags, x.task_offsets, x.task_end_offsets, x.is_classic,
                      x.member_epoch == d.assignment_epoch) for x in d.members]))
        hb(member_epoch=r.member_epoch + 5, **steady)
        left = hb(member_epoch=-1, **steady)
        out.append(("left with", left.member_epoch))
    return out


def test_streams_group_heartbeat_answers_as_kafka(both):
    answers = {side: _heartbeats(bootstrap) for side, bootstrap in both.items()}
    kafka, kray = answers["kafka"], answers["kray"]
    # the epochs a fence names differ with the group's history: compare the error codes only there
    fenced = [i for i, a in enumerate(kafka) if a[0] == 110]
    for i in fenced:
        kafka[i] = kafka[i][:1] + kafka[i][2:]
        kray[i] = kray[i][:1] + kray[i][2:]
    # how many heartbeats it takes until the broker has created the internal topics differs: compare the first
    # answer and the outcome
    def squeeze(rows):
        out = []
        for row in rows:
            if not out or row != out[-1]:
                out.append(row)
        return out
    assert squeeze(kray) == squeeze(kafka), (kray, kafka)


def _bad_config_statuses(bootstrap: str) -> list:
    """A topology whose changelog topic carries an invalid config: the broker cannot create it. What the statuses
    of the member's heartbeats say over a few seconds: (status code, detail names the topic, detail text)."""
    source = f"sg-src-{uuid.uuid4().hex[:6]}"
    group, prefix = f"sg-{uuid.uuid4().hex[:6]}", f"sgb-{uuid.uuid4().hex[:6]}"
    topo = _topology(source, prefix)
    topo.subtopologies[1].state_changelog_topics[0].topic_configs = [H.KeyValue(key="cleanup.policy", value="bogus")]
    seen = []
    with KafkaConnection(bootstrap, client_id="streams-probe") as conn:
        conn._call(m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
            name=source, num_partitions=1, replication_factor=1, assignments=[], configs=[])], timeout_ms=30000,
            validate_only=False), 19, 7)
        time.sleep(1.0)
        r = conn._call(H(group_id=group, member_id="m1", member_epoch=0, endpoint_information_epoch=0,
                         rebalance_timeout_ms=30000, process_id="p1", active_tasks=[], standby_tasks=[],
                         warmup_tasks=[], topology=topo), 88, 0)
        for _ in range(8):
            time.sleep(0.5)
            r = conn._call(H(group_id=group, member_id="m1", member_epoch=r.member_epoch,
                             endpoint_information_epoch=0), 88, 0)
            seen += [(s.status_code, f"{prefix}-store-changelog" in s.status_detail, s.status_detail)
                     for s in r.status if s.status_code == 3]
        conn._call(H(group_id=group, member_id="m1", member_epoch=-1, endpoint_information_epoch=0), 88, 0)
    return seen


def test_an_internal_topic_the_broker_cannot_create_is_named_in_the_status(both):
    seen = {side: _bad_config_statuses(bootstrap) for side, bootstrap in both.items()}
    for side, statuses in seen.items():
        assert statuses and all(code == 3 for code, _, _ in statuses), (side, statuses)
    # after the first attempt, both say why: "Internal topics are missing: X; Creation failed: X (reason)."
    for side, statuses in seen.items():
        assert any(names and "; Creation failed: " in detail and "cleanup.policy" in detail
                   for _, names, detail in statuses), (side, statuses)


def _group_with_tasks(bootstrap: str) -> tuple[str, str, str]:
    """A streams group of one member (raw heartbeats) that holds every task of a two-subtopology topology over a
    2-partition source topic, its internal topics created by the broker. (group, source topic, prefix)"""
    source = f"sg-src-{uuid.uuid4().hex[:6]}"
    group, prefix = f"sgt-{uuid.uuid4().hex[:6]}", f"sgp-{uuid.uuid4().hex[:6]}"
    with KafkaConnection(bootstrap, client_id="streams-probe") as conn:
        conn._call(m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
            name=source, num_partitions=2, replication_factor=1, assignments=[], configs=[])], timeout_ms=30000,
            validate_only=False), 19, 7)
        time.sleep(1.0)
        r = conn._call(H(group_id=group, member_id="m1", member_epoch=0, endpoint_information_epoch=0,
                         rebalance_timeout_ms=30000, process_id="p1", active_tasks=[], standby_tasks=[],
                         warmup_tasks=[], topology=_topology(source, prefix)), 88, 0)
        owned = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            time.sleep(0.5)
            r = conn._call(H(group_id=group, member_id="m1", member_epoch=r.member_epoch,
                             endpoint_information_epoch=0, active_tasks=owned, standby_tasks=[], warmup_tasks=[]),
                           88, 0)
            if r.active_tasks is not None:
                owned = [H.TaskIds(subtopology_id=t.subtopology_id, partitions=t.partitions) for t in r.active_tasks]
            if sum(len(t.partitions) for t in owned) == 4 and not r.status:
                break
    return group, source, prefix


def _masked(text: str, names: dict[str, str]) -> str:
    import re
    for real, alias in names.items():
        text = text.replace(real, alias)
    text = re.sub(r"127\.0\.0\.1:\d+ \(\d+\)", "<coordinator>", text)
    return re.sub(r"[ \t]+", " ", text).strip()


@pytest.mark.reference_full
def test_kafkas_streams_groups_tool_reads_kray_as_kafka_and_kray_streams_groups_prints_the_same(both):
    """kafka-streams-groups.sh (its main class) against both brokers: the same output once names are masked; and
    `kray streams-groups` against Kray prints what Kafka's tool prints against Kafka (spaces aside)."""
    from tests.kafka.broker import java
    outputs, kray_tool = {}, {}
    for side, bootstrap in both.items():
        group, source, prefix = _group_with_tasks(bootstrap)
        names = {group: "<group>", source: "<source>", prefix: "<prefix>"}
        runs = {}
        for name, args in {"list-state": ["--list", "--state"],
                           "describe-state": ["--describe", "--group", group, "--state"],
                           "describe-state-verbose": ["--describe", "--group", group, "--state", "--verbose"],
                           "describe-members": ["--describe", "--group", group, "--members"],
                           "describe-offsets": ["--describe", "--group", group],
                           "describe-offsets-verbose": ["--describe", "--group", group, "--verbose"]}.items():
            run = subprocess.run(java("org.apache.kafka.tools.streams.StreamsGroupCommand", "--bootstrap-server",
                                      bootstrap, *args), capture_output=True, text=True, timeout=120)
            runs[name] = (run.returncode, _masked(run.stdout, names))
            if side == "kray":
                mine = subprocess.run([sys.executable, "-m", "cluster.cli", "streams-groups", "--bootstrap-server",
                                       bootstrap, *args], capture_output=True, text=True, timeout=120)
                kray_tool[name] = (mine.returncode, _masked(mine.stdout, names))
        outputs[side] = runs
    kafka, kray = outputs["kafka"], outputs["kray"]
    for name in kafka:
        if name == "list-state":   # each broker lists the groups the session made on it: compare this one's line
            kafka[name] = (kafka[name][0], "\n".join(l for l in kafka[name][1].splitlines()
                                                      if l.startswith(("GROUP", "<group>"))))
            kray[name] = (kray[name][0], "\n".join(l for l in kray[name][1].splitlines()
                                                    if l.startswith(("GROUP", "<group>"))))
            kray_tool[name] = (kray_tool[name][0], "\n".join(l for l in kray_tool[name][1].splitlines()
                                                              if l.startswith(("GROUP", "<group>"))))
        if name.startswith("describe-offsets"):   # Kafka's tool prints the partitions in no particular order
            kafka[name], kray[name], kray_tool[name] = (
                (code, "\n".join(text.splitlines()[:1] + sorted(text.splitlines()[1:])))
                for code, text in (kafka[name], kray[name], kray_tool[name]))
        assert kray[name] == kafka[name], (name, kafka[name], kray[name])
    for name, printed in kray_tool.items():
        assert printed == kafka[name], (name, kafka[name], printed)


def test_kray_streams_groups_tool(both):
    """`kray streams-groups` against Kray (in ./dev test; its output is compared with Kafka's tool by the
    reference_full test above): list, describe (state, members, offsets), delete once empty."""
    bootstrap = both["kray"]
    group, source, prefix = _group_with_tasks(bootstrap)

    def kray(*args):
        run = subprocess.run([sys.executable, "-m", "cluster.cli", "streams-groups", "--bootstrap-server", bootstrap,
                              *args], capture_output=True, text=True, timeout=120)
        return run.returncode, run.stdout, run.stderr
    assert group in kray("--list")[1].split()
    code, out, _ = kray("--describe", "--group", group, "--state")
    assert code == 0 and out.split("\n")[1].split()[-3:] == ["sticky", "Stable", "1"], out
    code, out, _ = kray("--describe", "--group", group, "--members")
    assert code == 0 and "ACTIVE: 0:[0,1]; 1:[0,1];" in out, out
    code, out, _ = kray("--describe", "--group", group)      # nothing committed, nothing produced: no lag
    assert code == 0 and sorted(line.split()[1:] for line in out.strip().split("\n")[1:]) == sorted([
        [source, "0", "0"], [source, "1", "0"], [f"{prefix}-rep", "0", "0"], [f"{prefix}-rep", "1", "0"]]), out
    code, _, err = kray("--delete", "--group", group)
    assert code == 1 and "NON_EMPTY_GROUP" in err, err
    with KafkaConnection(bootstrap, client_id="streams-probe") as conn:
        conn._call(H(group_id=group, member_id="m1", member_epoch=-1, endpoint_information_epoch=0), 88, 0)
    code, out, _ = kray("--delete", "--group", group)
    assert code == 0 and out.strip() == f"Deletion of requested streams groups ('{group}') was successful.", out
    assert group not in kray("--list")[1].split()
