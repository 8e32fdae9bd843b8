"""Which share-partitions a share session fetches from, at the handler (issue 20).

Kafka's rule (ShareSession.update, called from SharePartitionManager.newContext): every partition
listed in a ShareFetch's Topics joins the member's share session, whether it is listed to be
fetched or only to carry piggybacked acknowledgements; ForgottenTopicsData removes partitions
after that; later requests of the session fetch from all its partitions. A partition a member
acknowledges after it forgot it is therefore back in its session until the client forgets it
again. That is Kafka's protocol, pinned here so that it is not "fixed" into a deviation:
librdkafka 2.16's share consumer does not track such partitions as part of its session, so it
never forgets them again and keeps fetching partitions no longer assigned to it (measured in
issue 20: three of eight members, until the backlog was drained; franz-go fixed the same client
bug in twmb/franz-go#1352). The remedy belongs to the client, not to the broker."""
import asyncio
import uuid
from types import SimpleNamespace

from actors.gateway.handlers.share_fetch import handle_share_fetch
from actors.gateway.share_sessions import ShareSessionCache
from actors.share_partition.core import ShareFetchResult
from actors.config_schema import BROKER_DEFAULTS
from protocol import messages as m
from protocol.headers import RequestHeader

TOPIC_ID = uuid.uuid4()


class _Partition:
    """A share-partition leader that records what each request asked of it."""

    def __init__(self, index, calls):
        self.index, self.calls = index, calls

    async def send_share_fetch(self, group_id, member_id, *, acks, fetch, **_):
        self.calls.append((self.index, "fetch" if fetch else "ack-only", bool(acks)))

        async def answer():
            return ShareFetchResult(acquired=[(0, 0, 1)] if fetch else [])
        return answer()


class _Context:
    def __init__(self):
        topic = SimpleNamespace(topic_id=TOPIC_ID, name="t", partitions=[SimpleNamespace(leader_epoch=0)] * 4)
        self.metadata = SimpleNamespace(topic_by_id=lambda i: topic if i == TOPIC_ID else None,
                                        leader_id=lambda topic, index: 1, group_configs={})
        self.config = dict(BROKER_DEFAULTS)
        self.share_sessions = ShareSessionCache(max_sessions=10)
        self.calls = []
        self.partitions = {(TOPIC_ID, i): _Partition(i, self.calls) for i in range(4)}

    def partition(self, topic_id, index, follower=False):
        return self.partitions.get((topic_id, index))

    def access(self, connection):
        return SimpleNamespace(allows=lambda *a: True)

    async def catch_up_metadata(self):
        pass


def _fetch(ctx, epoch, *, fetch=(), acks=(), forget=()):
    parts = [m.ShareFetchRequest.FetchPartition(partition_index=p) for p in fetch]
    parts += [m.ShareFetchRequest.FetchPartition(partition_index=p, acknowledgement_batches=[
        m.ShareFetchRequest.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=[1])]) for p in acks]
    request = m.ShareFetchRequest(
        group_id="g", member_id="member", share_session_epoch=epoch, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
        max_records=10, batch_size=10,
        topics=[m.ShareFetchRequest.FetchTopic(topic_id=TOPIC_ID, partitions=parts)] if parts else [],
        forgotten_topics_data=[m.ShareFetchRequest.ForgottenTopic(topic_id=TOPIC_ID, partitions=list(forget))]
        if forget else [])
    ctx.calls.clear()
    header = RequestHeader(78, 1, epoch, "c")
    asyncio.run(handle_share_fetch(ctx, header, request))
    return sorted(ctx.calls)


def _session(ctx):
    return sorted(p for _, p in ctx.share_sessions.sessions[("g", "member")].partitions)


def test_forgotten_partitions_leave_the_session_even_when_acknowledged_in_the_same_request():
    ctx = _Context()
    assert _fetch(ctx, 0, fetch=[0, 1, 2, 3]) == [(i, "fetch", False) for i in range(4)]
    # Kafka's order: the request's partitions are added first, then the forgotten ones removed
    _fetch(ctx, 1, acks=[2, 3], forget=[2, 3])
    assert _session(ctx) == [0, 1]
    assert _fetch(ctx, 2) == [(0, "fetch", False), (1, "fetch", False)]


def test_a_partition_acknowledged_after_it_was_forgotten_rejoins_the_session_as_in_kafka():
    ctx = _Context()
    _fetch(ctx, 0, fetch=[0, 1, 2, 3])
    _fetch(ctx, 1, forget=[2, 3])
    assert _session(ctx) == [0, 1]
    # acknowledgements of records still held from partition 2, piggybacked on the next fetch
    assert _fetch(ctx, 2, acks=[2]) == [(0, "fetch", False), (1, "fetch", False), (2, "fetch", True)]
    assert _session(ctx) == [0, 1, 2], "Kafka's ShareSession.update adds every listed partition"
    assert (2, "fetch", False) in _fetch(ctx, 3), "and later requests fetch from it"
    _fetch(ctx, 4, forget=[2])
    assert _session(ctx) == [0, 1], "until the client forgets it again"
