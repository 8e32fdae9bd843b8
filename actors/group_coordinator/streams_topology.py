"""A streams group's topology (KIP-1071), configured against the cluster's topics. Pure: no Ray, no I/O.

A Kafka Streams application sends its topology in its first StreamsGroupHeartbeat: subtopologies, each with its
source topics (or regexes), the repartition topics it writes and reads, its state changelog topics and its
copartition groups. The coordinator decides how many partitions the internal topics (repartition, changelog)
need, which of them are missing (the broker creates them, as Kafka 4.1+ does from the heartbeat), and how many
tasks each subtopology has. The rules follow Kafka's InternalTopicManager (behaviour, not code):

- every source topic must exist, else MISSING_SOURCE_TOPICS ("Source topics a, b are missing.");
- a repartition topic without a fixed partition count gets the largest partition count of the topics that feed
  the subtopologies writing to it (resolved until nothing changes: one repartition topic can feed another);
- the topics of a copartition group must have equal counts: fixed ones that differ are
  INCORRECTLY_PARTITIONED_TOPICS; flexible repartition topics take the group's count;
- a changelog topic without a fixed count gets the subtopology's task count;
- a subtopology has as many tasks as the largest partition count of its source and repartition source topics;
- an internal topic that exists with another partition count is INCORRECTLY_PARTITIONED_TOPICS, one that is
  missing makes the topology wait (MISSING_INTERNAL_TOPICS) and is returned to be created with its configs.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

TopicsView = Mapping[str, tuple[object, int]]  # topic name -> (topic id, partition count)

# StreamsGroupHeartbeatResponse Status codes
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int = 0             # 0: decided by the coordinator
    replication_factor: int = 0     # 0: the broker's default
    topic_configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def by_id(self) -> dict[str, Subtopology]:
        return {s.subtopology_id: s for s in self.subtopologies}


@dataclass(frozen=True)
class TopicToCreate:
    name: str
    partitions: int
    replication_factor: int         # -1: the broker's default
    configs: tuple[tuple[str, str], ...]


@dataclass
class ConfiguredTopology:
    """The outcome of `configure`: task counts when the topology can run, else the status that says why not."""
    task_counts: dict[str, int] = field(default_factory=dict)    # subtopology id -> number of tasks
    internal_partitions: dict[str, int] = field(default_factory=dict)  # internal topic -> partitions decided
    source_partitions: dict[str, dict[str, int]] = field(default_factory=dict)  # subtopology -> input topic -> count
    to_create: list[TopicToCreate] = field(default_factory=list)
    status: tuple[int, str] | None = None                        # (status code, detail); None: ready

    @property
    def ready(self) -> bool:
        return self.status is None


class _Misconfigured(Exception):
    def __init__(self, code: int, detail: str):
        super().__init__(detail)
        self.code, self.detail = code, detail


def validate(topology: Topology) -> str | None:
    """Kafka's StreamsGroupHeartbeat topology checks (STREAMS_INVALID_TOPOLOGY): the message, or None if valid."""
    ids = [s.subtopology_id for s in topology.subtopologies]
    if len(set(ids)) != len(ids):
        return "Duplicate subtopology IDs in the topology."
    repartition_sources = {t.name for s in topology.subtopologies for t in s.repartition_source_topics}
    for s in topology.subtopologies:
        for sink in s.repartition_sink_topics:
            if sink not in repartition_sources:
                return (f"Subtopology {s.subtopology_id} has repartition sink topic {sink} which is not a "
                        f"repartition source topic.")
        for regex in s.source_topic_regex:
            try:
                re.compile(regex)
            except re.error as e:
                return f"Subtopology {s.subtopology_id} has an invalid source topic regex {regex}: {e}."
    return None


def source_topics(subtopology: Subtopology, topics: TopicsView) -> list[str]:
    """The subtopology's source topics, its regexes resolved against the (non-internal) topics that exist."""
    names = list(subtopology.source_topics)
    for regex in subtopology.source_topic_regex:
        pattern = re.compile(regex)
        names += sorted(t for t in topics if t not in INTERNAL_TOPICS and pattern.fullmatch(t) and t not in names)
    return names


def required_topics(topology: Topology, topics: TopicsView) -> set[str]:
    """Every topic the topology reads or writes that the coordinator knows of: the metadata hash covers these."""
    out: set[str] = set()
    for s in topology.subtopologies:
        out.update(source_topics(s, topics))
        out.update(t.name for t in s.repartition_source_topics)
        out.update(t.name for t in s.state_changelog_topics)
    return out


def configure(topology: Topology, topics: TopicsView) -> ConfiguredTopology:
    try:
        return _configure(topology, topics)
    except _Misconfigured as e:
        return ConfiguredTopology(status=(e.code, e.detail))


def _configure(topology: Topology, topics: TopicsView) -> ConfiguredTopology:
    missing = sorted({t for s in topology.subtopologies for t in s.source_topics if t not in topics})
    if missing:
        raise _Misconfigured(MISSING_SOURCE_TOPICS, f"Source topics {', '.join(missing)} are missing.")
    sources = {s.subtopology_id: source_topics(s, topics) for s in topology.subtopologies}
    internal: dict[str, int] = {}

    def count(topic: str) -> int | None:
        if topic in topics:
            return topics[topic][1]
        return internal.get(topic)

    # repartition topics: fixed counts first, then the flexible ones from the subtopologies that write to them
    repartition = {t.name: t for s in topology.subtopologies for t in s.repartition_source_topics}
    for name, info in repartition.items():
        if info.partitions > 0:
            internal[name] = info.partitions
    changed = True
    while changed:
        changed = False
        for name, info in repartition.items():
            if info.partitions > 0:
                continue
            feeding = [count(t) for s in topology.subtopologies if name in s.repartition_sink_topics
                       for t in sources[s.subtopology_id] + [r.name for r in s.repartition_source_topics]]
            known = [c for c in feeding if c is not None]
            if known and max(known) != internal.get(name):
                internal[name] = max(known)
                changed = True
    unresolved = sorted(n for n in repartition if count(n) is None)
    if unresolved:
        raise _Misconfigured(INCORRECTLY_PARTITIONED_TOPICS,
                             f"Could not decide the number of partitions of repartition topics "
                             f"{', '.join(unresolved)}.")

    # copartition groups: indexes into the subtopology's source topics, regexes and repartition source topics
    for s in topology.subtopologies:
        for source_idx, regex_idx, repartition_idx in s.copartition_groups:
            names = [s.source_topics[i] for i in source_idx if 0 <= i < len(s.source_topics)]
            for i in regex_idx:
                if 0 <= i < len(s.source_topic_regex):
                    pattern = re.compile(s.source_topic_regex[i])
                    names += [t for t in topics if t not in INTERNAL_TOPICS and pattern.fullmatch(t)]
            flexible = [s.repartition_source_topics[i].name for i in repartition_idx
                        if 0 <= i < len(s.repartition_source_topics) and s.repartition_source_topics[i].partitions == 0]
            fixed = names + [s.repartition_source_topics[i].name for i in repartition_idx
                             if 0 <= i < len(s.repartition_source_topics)
                             and s.repartition_source_topics[i].partitions > 0]
            fixed_counts = {t: count(t) for t in fixed}
            if len(set(fixed_counts.values())) > 1:
                listed = ", ".join(f"{t}={c}" for t, c in sorted(fixed_counts.items()))
                raise _Misconfigured(INCORRECTLY_PARTITIONED_TOPICS,
                                     f"Following topics do not have the same number of partitions: [{listed}]")
            target = next(iter(fixed_counts.values()), None)
            if target is None:
                target = max((count(t) or 0 for t in flexible), default=0)
            for t in flexible:
                internal[t] = target

    task_counts, source_partitions = {}, {}
    for s in topology.subtopologies:
        inputs = sources[s.subtopology_id] + [t.name for t in s.repartition_source_topics]
        counts = {t: count(t) for t in inputs}
        if not counts or any(c is None for c in counts.values()):
            raise _Misconfigured(MISSING_SOURCE_TOPICS,
                                 f"Subtopology {s.subtopology_id} has no source topic that exists.")
        task_counts[s.subtopology_id] = max(counts.values())
        source_partitions[s.subtopology_id] = counts
        for changelog in s.state_changelog_topics:
            internal[changelog.name] = changelog.partitions or task_counts[s.subtopology_id]

    to_create = []
    infos = {**repartition, **{t.name: t for s in topology.subtopologies for t in s.state_changelog_topics}}
    for name, info in sorted(infos.items()):
        wanted = internal[name]
        if name in topics:
            if topics[name][1] != wanted:
                raise _Misconfigured(INCORRECTLY_PARTITIONED_TOPICS,
                                     f"Existing topic {name} has different number of partitions: expected "
                                     f"{wanted}, found {topics[name][1]}")
            continue
        to_create.append(TopicToCreate(name, wanted, info.replication_factor or -1, info.topic_configs))
    status = None
    if to_create:
        status = (MISSING_INTERNAL_TOPICS, "Internal topics are missing: " + ", ".join(t.name for t in to_create))
    return ConfiguredTopology(task_counts, internal, source_partitions, to_create, status)
