"""Kafka's share-state APIs (keys 83-87) on the brokers' own listeners: the gateway's handler
(authorization, routing to the coordinator's shard, NOT_COORDINATOR), the SHARE_STATE frame over a
real shard listener on a Unix socket, and the share-partition leaders' two connections (to a shard
of their own broker, and Kafka's requests to another broker's listener). The coordinator is a
recording stand-in (its shard is tested on its own)."""
import asyncio
import os
import time
import tempfile
import uuid

import pytest

from actors.coordinator_log import CoordinatorLogError
from actors.gateway.connection import ClientConnection
from actors.gateway.context import GatewayContext
from actors.gateway.frontend import start_frontend
from actors.gateway.handlers import ROUTES, share_state
from actors.gateway.partition_client import DataPaths, SocketPartition
from actors.security.inter_broker import broker_transport, with_broker_secret
from actors.security.principal import ANONYMOUS, BROKER_PRINCIPAL, KafkaPrincipal
from actors.partition.listener import start_listener
from actors.pipelined import PipelinedConnection
from actors.share_coordinator import wire
from actors.share_coordinator.core import ReadResponse, StateBatch, StateResponse, SummaryResponse
from actors.share_partition.state_client import BrokerStateConnection, LocalStateConnection, StateConnectionError
from protocol.errors import ErrorCode, MalformedMessage
from protocol.headers import RequestHeader
from protocol.messages import (ApiVersionsRequest, DeleteShareGroupStateRequest, InitializeShareGroupStateRequest,
                               ReadShareGroupStateRequest, ReadShareGroupStateSummaryRequest,
                               WriteShareGroupStateRequest)

CONFIG = with_broker_secret({"socket.request.max.bytes": 1 << 20, "connections.max.idle.ms": 60000,
                             "connection.failed.authentication.delay.ms": 10})
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:admin"}
TOPIC = uuid.uuid4()
STATE_TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")


class RecordingCoordinator:
    """A share coordinator stand-in, hosted as a replica of a shard (it has `share_state`)."""

    def __init__(self, delay_s=0.0):
        self.writes, self.delay_s, self.calls = [], delay_s, []

    async def share_state(self, api_key, group_id, items):
        return await wire.apply(self, api_key, group_id, items)

    async def write_state(self, group_id, topic_id, partition, state_epoch, leader_epoch, start_offset, batches,
                          delivery_complete_count):
        self.writes.append((group_id, topic_id, partition, state_epoch, leader_epoch, start_offset, batches))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if state_epoch == -9:
            raise CoordinatorLogError(ErrorCode.NOT_COORDINATOR, "this replica does not lead the partition now")
        return StateResponse(ErrorCode.FENCED_STATE_EPOCH, "stale") if state_epoch < 0 else StateResponse(0, None)

    async def read_state(self, group_id, topic_id, partition, leader_epoch):
        self.calls.append(("read", partition, leader_epoch))
        return ReadResponse(0, None, 3, 40, (StateBatch(40, 44, 0, 2),))

    async def delete_state(self, group_id, topic_id, partition):
        self.calls.append(("delete", partition))
        return StateResponse(0, None)

    async def initialize_state(self, group_id, topic_id, partition, state_epoch, start_offset):
        self.calls.append(("initialize", partition, state_epoch, start_offset))
        return StateResponse(0, None)

    async def read_state_summary(self, group_id, topic_id, partition):
        self.calls.append(("summary", partition))
        return SummaryResponse(0, None, 3, 1, 40, -1)


def write_request(start_offset, state_epoch=1, partition=0):
    W = WriteShareGroupStateRequest
    return W(group_id="g", topics=[W.WriteStateData(topic_id=TOPIC, partitions=[W.PartitionData(
        partition=partition, state_epoch=state_epoch, leader_epoch=2, start_offset=start_offset,
        delivery_complete_count=-1, state_batches=[W.StateBatch(first_offset=start_offset,
                                                                last_offset=start_offset + 9, delivery_state=2,
                                                                delivery_count=1)])])])


async def shard(hosted: dict) -> tuple:
    address = os.path.join(tempfile.mkdtemp(), "shard.sock")
    return await start_listener(hosted.get, address, 1 << 20, asyncio.Event), address


def route_to(monkeypatch, address, hosted_index=3):
    """The gateway's routing replaced: every partition's coordinator is `hosted_index` behind `address`."""
    paths = DataPaths()

    def routes(ctx, group_id, keys):
        return [SocketPartition(address, (STATE_TOPIC, hosted_index), paths) for _ in keys], None
    monkeypatch.setattr(share_state, "_routes", routes)


def test_the_frame_round_trip_keeps_every_field():
    async def run():
        coordinator = RecordingCoordinator()
        R, I, S = ReadShareGroupStateRequest, InitializeShareGroupStateRequest, ReadShareGroupStateSummaryRequest
        read = R(group_id="g", topics=[R.ReadStateData(topic_id=TOPIC, partitions=[
            R.PartitionData(partition=0, leader_epoch=1), R.PartitionData(partition=5, leader_epoch=2)])])
        init = I(group_id="g", topics=[I.InitializeStateData(topic_id=TOPIC, partitions=[
            I.PartitionData(partition=1, state_epoch=4, start_offset=17)])])
        summary = S(group_id="g", topics=[S.ReadStateSummaryData(topic_id=TOPIC, partitions=[
            S.PartitionData(partition=2, leader_epoch=1)])])
        out = []
        for api_key, request in ((84, read), (83, init), (87, summary), (85, write_request(10))):
            frame_items = [item for _, item in wire.items(api_key, request)]
            out.append(wire.response(api_key, request, await wire.apply(coordinator, api_key, "g", frame_items)))
        return coordinator, out

    coordinator, (read, init, summary, write) = asyncio.run(run())
    assert [(p.partition, p.state_epoch, p.start_offset, [(b.first_offset, b.last_offset, b.delivery_count)
                                                         for b in p.state_batches])
            for p in read.results[0].partitions] == [(0, 3, 40, [(40, 44, 2)]), (5, 3, 40, [(40, 44, 2)])]
    assert init.results[0].partitions[0].error_code == 0
    assert (summary.results[0].partitions[0].state_epoch, summary.results[0].partitions[0].start_offset) == (3, 40)
    assert write.results[0].topic_id == TOPIC and write.results[0].partitions[0].error_code == 0
    assert coordinator.calls == [("read", 0, 1), ("read", 5, 2), ("initialize", 1, 4, 17), ("summary", 2)]
    assert coordinator.writes == [("g", TOPIC, 0, 1, 2, 10, [(10, 19, 2, 1)])]


@pytest.mark.parametrize("frame", [
    [85, "g", [[b"short", 0, 1, 2, 3, [], -1]]],
    [85, "g", [[TOPIC.bytes, 0, 1, 2, 3, [[1, 2, 3]], -1]]],  # a batch of three fields
    [85, "g", [[TOPIC.bytes, "0", 1, 2, 3, [], -1]]],
    [84, "g", [[TOPIC.bytes, 0]]],
    [3, "g", []],
    [85, None, []],
])
def test_a_malformed_frame_raises_and_runs_nothing(frame):
    coordinator = RecordingCoordinator()
    with pytest.raises(MalformedMessage):
        asyncio.run(wire.apply(coordinator, *frame))
    assert coordinator.writes == []


def test_pipelined_local_writes_are_applied_in_order_and_answered_each():
    """A share-partition leader on the coordinator's broker: SHARE_STATE frames over the shard's
    Unix socket, applied in the order sent; a coordinator that no longer leads answers NOT_COORDINATOR
    (the connection stays); a replica without a coordinator answers not hosted (None)."""
    async def run():
        coordinator = RecordingCoordinator(delay_s=0.001)
        server, address = await shard({(STATE_TOPIC, 3): coordinator, (STATE_TOPIC, 4): object()})
        connection = await LocalStateConnection.open(address, 5)
        epochs = [-1 if i == 7 else -9 if i == 11 else 1 for i in range(20)]
        answers = await asyncio.gather(*(connection.call((STATE_TOPIC, 3), wire.WRITE, "g", [wire.write_item(
            TOPIC, 0, epoch, 2, 100 * i, [(100 * i, 100 * i + 9, 2, 1)])], 5) for i, epoch in enumerate(epochs)))
        not_hosted = [await connection.call((STATE_TOPIC, k), wire.WRITE, "g", [wire.write_item(TOPIC, 0, 1, 2, 0, [])], 5)
                      for k in (4, 5)]
        usable = connection.usable
        connection.close()
        server.close()
        return coordinator, answers, not_hosted, usable

    coordinator, answers, not_hosted, usable = asyncio.run(run())
    assert [w[5] for w in coordinator.writes] == [100 * i for i in range(20)]
    assert coordinator.writes[1][6] == [(100, 109, 2, 1)]
    codes = [a[0][0] for a in answers]
    assert codes == [ErrorCode.FENCED_STATE_EPOCH if i == 7 else ErrorCode.NOT_COORDINATOR if i == 11 else 0
                     for i in range(20)]
    assert answers[7][0][1] == "stale"
    assert not_hosted == [None, None]
    assert usable


def _gateway(config=None):
    return GatewayContext(broker_id=1, config=config or {}, controller=None)


def _handle(ctx, request, principal=ANONYMOUS, listener="PLAINTEXT", api_key=None, version=None):
    api_key = api_key or request.API_KEY
    connection = ClientConnection(("127.0.0.1", 5555), listener_name=listener, principal=principal)
    header = RequestHeader(api_key, version if version is not None else ROUTES[api_key].max_version, 1, "test")
    return share_state.handle_share_state(ctx, header, request, connection), connection


def test_a_principal_without_cluster_action_is_refused_with_cluster_authorization_failed(monkeypatch):
    """Kafka's rule for keys 83-87: CLUSTER_ACTION on the Cluster, else every partition answers
    CLUSTER_AUTHORIZATION_FAILED and nothing reaches the coordinator. The brokers' principal is a
    super user; a PLAINTEXT listener's ANONYMOUS is refused where an authorizer is on (as in Kafka),
    allowed where none is."""
    async def run():
        coordinator = RecordingCoordinator()
        server, address = await shard({(STATE_TOPIC, 3): coordinator})
        route_to(monkeypatch, address)
        secured, open_ = _gateway(AUTHORIZER), _gateway()
        D, R, I, S = (DeleteShareGroupStateRequest, ReadShareGroupStateRequest, InitializeShareGroupStateRequest,
                      ReadShareGroupStateSummaryRequest)
        requests = {
            83: I(group_id="g", topics=[I.InitializeStateData(topic_id=TOPIC, partitions=[
                I.PartitionData(partition=0, state_epoch=1, start_offset=0)])]),
            84: R(group_id="g", topics=[R.ReadStateData(topic_id=TOPIC, partitions=[
                R.PartitionData(partition=0, leader_epoch=1), R.PartitionData(partition=1, leader_epoch=1)])]),
            85: write_request(5),
            86: D(group_id="g", topics=[D.DeleteStateData(topic_id=TOPIC, partitions=[D.PartitionData(partition=0)])]),
            87: S(group_id="g", topics=[S.ReadStateSummaryData(topic_id=TOPIC, partitions=[
                S.PartitionData(partition=0, leader_epoch=1)])]),
        }
        refused = {}
        for who, principal in (("alice", KafkaPrincipal("User", "alice")), ("anonymous", ANONYMOUS)):
            for api_key, request in requests.items():
                answer, _ = _handle(secured, request, principal, "SASL_PLAINTEXT" if who == "alice" else "PLAINTEXT")
                response = await answer
                refused[(who, api_key)] = [(p.error_code, p.error_message) for t in response.results
                                           for p in t.partitions]
        nothing_reached = (list(coordinator.writes), list(coordinator.calls))
        allowed = {}
        for name, ctx, principal in (("broker", secured, BROKER_PRINCIPAL), ("admin", secured, KafkaPrincipal("User", "admin")),
                                     ("no authorizer", open_, ANONYMOUS)):
            answer, _ = _handle(ctx, write_request(7), principal)
            allowed[name] = (await answer).results[0].partitions[0].error_code
        server.close()
        return refused, nothing_reached, allowed, coordinator

    refused, nothing_reached, allowed, coordinator = asyncio.run(run())
    for key, partitions in refused.items():
        assert partitions and all(p == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
                                  for p in partitions), key
    assert len(refused[("alice", 84)]) == 2
    assert nothing_reached == ([], [])
    assert allowed == {"broker": 0, "admin": 0, "no authorizer": 0}
    assert [w[5] for w in coordinator.writes] == [7, 7, 7]


def test_a_coordinator_not_led_here_answers_not_coordinator(monkeypatch):
    """No route (this broker does not lead the coordinator's partition, even after catching up with
    the controller), or a shard that does not host it: NOT_COORDINATOR, the connection stays open."""
    async def run():
        ctx = _gateway()
        caught_up = []

        async def catch_up():
            caught_up.append(True)
        ctx.catch_up_metadata = catch_up
        monkeypatch.setattr(share_state, "_routes", lambda ctx, group_id, keys: ([None] * len(keys), None))
        answer, connection = _handle(ctx, write_request(1))
        no_route = (await answer).results[0].partitions[0].error_code
        server, address = await shard({})
        route_to(monkeypatch, address)
        answer, connection2 = _handle(ctx, write_request(1))
        not_hosted = (await answer).results[0].partitions[0].error_code
        server.close()
        return no_route, not_hosted, caught_up, connection.broken, connection2.broken

    no_route, not_hosted, caught_up, broken, broken2 = asyncio.run(run())
    assert no_route == not_hosted == ErrorCode.NOT_COORDINATOR
    assert caught_up == [True], "a refusal is decided on metadata no older than the sender's"
    assert broken is None and broken2 is None


def test_one_connections_writes_through_the_gateway_reach_the_coordinator_in_order(monkeypatch):
    """Kafka's WriteShareGroupState from another broker's share-partition leader, pipelined on one
    connection to a real front end: each is forwarded in the order it came, whatever the coordinator's
    pace; ApiVersions advertises the five APIs."""
    async def run():
        coordinator = RecordingCoordinator(delay_s=0.002)
        shard_server, address = await shard({(STATE_TOPIC, 3): coordinator})
        route_to(monkeypatch, address)
        ctx = GatewayContext(broker_id=1, config=CONFIG, controller=None)
        server = await start_frontend(ctx, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        ssl_context, login = broker_transport({"listeners": "PLAINTEXT://127.0.0.1:0"} | CONFIG)
        assert (ssl_context, login) == (None, None), "PLAINTEXT: no TLS, no login"
        connection = await BrokerStateConnection.open("127.0.0.1", port, 5)
        answers = await asyncio.gather(*[connection.send_write("g", TOPIC, 0, -1 if i == 7 else 1, 2, 100 * i,
                                                               [(100 * i, 100 * i + 9, 2, 1)], 5) for i in range(20)])
        versions = await connection.call(ApiVersionsRequest(), 3, 5)
        connection.close()
        server.close()
        shard_server.close()
        return coordinator, answers, versions

    coordinator, answers, versions = asyncio.run(run())
    assert [w[5] for w in coordinator.writes] == [100 * i for i in range(20)]
    assert [a[0] for a in answers] == [ErrorCode.FENCED_STATE_EPOCH if i == 7 else 0 for i in range(20)]
    assert {83, 84, 85, 86, 87} <= {k.api_key for k in versions.api_keys}


def test_a_lost_broker_fails_waiting_requests_and_the_connection_stays_failed():
    async def run():
        received = asyncio.Event()

        async def dies_mid_request(reader, writer):  # a broker that dies holding a request
            await reader.read(1)
            received.set()
            writer.transport.abort()

        server = await asyncio.start_server(dies_mid_request, "127.0.0.1", 0)
        connection = BrokerStateConnection(await PipelinedConnection.open_tcp(
            "127.0.0.1", server.sockets[0].getsockname()[1], timeout_s=5, response_bytes_max=1 << 20))
        pending = asyncio.ensure_future(connection.call(write_request(0), 1, 30))
        await asyncio.wait_for(received.wait(), 5)
        with pytest.raises(StateConnectionError):
            await asyncio.wait_for(pending, 5)
        assert not connection.usable
        with pytest.raises(StateConnectionError):
            await connection.call(write_request(1), 1, 5)
        server.close()

    asyncio.run(run())


class FakeController:
    def __init__(self, image):
        self.image, self.asked = image, 0

        class Method:
            async def remote(_, name):
                self.asked += 1
                await asyncio.sleep(0.01)  # the controller takes a while: later writes must not overtake
                return self.image
        self.ensure_internal_topic = Method()


def test_share_partition_leaders_write_to_a_local_shard_or_another_brokers_listener_in_order(monkeypatch):
    """ShareLeaders (the share-partition leaders of one partition, on broker 1) route each group's
    writes by the metadata: to the Unix socket of this broker's shard where broker 1 leads the
    coordinator's partition, else Kafka's WriteShareGroupState to the leader broker's listener (its
    gateway forwards to its shard). A group's writes made while the route is still being looked up
    keep their order; NOT_COORDINATOR makes the leader look the route up again."""
    from types import SimpleNamespace

    from actors import internal_topics
    from actors.controller.core import BrokerInfo, PartitionState, TopicState
    from actors.share_coordinator.core import state_partition_for
    from actors.share_partition.actor import ShareLeaders

    async def run():
        local, remote = RecordingCoordinator(delay_s=0.001), RecordingCoordinator(delay_s=0.001)
        local_server, local_address = await shard({(STATE_TOPIC, 0): local})
        remote_shard, remote_address = await shard({(STATE_TOPIC, 1): remote})
        route_to(monkeypatch, remote_address, hosted_index=1)  # broker 2's gateway: its shard leads partition 1
        gateway = await start_frontend(GatewayContext(broker_id=2, config=CONFIG, controller=None), "127.0.0.1", 0)
        state = TopicState(internal_topics.SHARE_GROUP_STATE, STATE_TOPIC,
                           [PartitionState(0, [1], leader=1), PartitionState(1, [2], leader=2)], {}, internal=True)
        image = SimpleNamespace(
            topics={internal_topics.SHARE_GROUP_STATE: state},
            brokers={1: BrokerInfo(1, "127.0.0.1", 1), 2: BrokerInfo(2, "127.0.0.1", gateway.sockets[0].getsockname()[1])},
            partition_listeners={(STATE_TOPIC, 0): local_address},
            coordinators={(internal_topics.SHARE_GROUP_STATE, 0): "handle-0", (internal_topics.SHARE_GROUP_STATE, 1): "h1"})
        controller = FakeController(image)
        partition = SimpleNamespace(broker_id=1, topic_id=TOPIC, partition=0, leader_epoch=3)
        leaders = ShareLeaders(partition, CONFIG | {"share.coordinator.state.topic.num.partitions": 2,
                                                    "listeners": "PLAINTEXT://127.0.0.1:0"}, controller)
        groups = {}
        for n in range(100):
            groups.setdefault(state_partition_for(f"g{n}", TOPIC, 0, 2), f"g{n}")
        for group in groups.values():
            leaders.state_epochs[group] = 1
        answers = await asyncio.gather(*[leaders._write_state(groups[i % 2], 10 * i, [(10 * i, 10 * i + 9, 2, 1)])
                                         for i in range(20)])
        routes = dict(leaders.state_routes)
        # the coordinator of partition 1 moved away from broker 2: NOT_COORDINATOR, and the route is forgotten
        monkeypatch.setattr(share_state, "_routes", lambda ctx, group_id, keys: ([None] * len(keys), None))
        leaders.state_epochs[groups[1]] = 1
        moved = await leaders._write_state(groups[1], 999, [])
        leaders._forget_coordinator(groups[1])
        after_move = dict(leaders.state_routes)
        leaders.close()
        for server in (local_server, remote_shard, gateway):
            server.close()
        return local, remote, answers, routes, moved, after_move, groups, controller.asked

    local, remote, answers, routes, moved, after_move, groups, asked = asyncio.run(run())
    assert answers == [(0, None)] * 20
    assert [(w[0], w[5], w[6]) for w in local.writes] == [(groups[0], 10 * i, [(10 * i, 10 * i + 9, 2, 1)])
                                                          for i in range(0, 20, 2)]
    assert [(w[0], w[5]) for w in remote.writes] == [(groups[1], 10 * i) for i in range(1, 20, 2)]
    assert all(w[3:5] == (1, 3) for w in local.writes + remote.writes), "state epoch, leader epoch"
    assert isinstance(routes[0][1], str) and isinstance(routes[1][1], tuple), "a Unix socket here, TCP there"
    assert moved[0] == ErrorCode.NOT_COORDINATOR
    assert 1 not in after_move and 0 in after_move
    assert asked <= 2, "the route was looked up once for the writes that waited for it"


class DirtyState:
    """A share-partition's state as _persist sees it: a delta, or everything once invalidated."""

    def __init__(self):
        self.whole = False

    def take_dirty(self):
        return (50, [(50, 59, 2, 1)]) if self.whole else (55, [(55, 59, 2, 1)])

    def invalidate_persisted(self):
        self.whole = True

    def delivery_complete_count(self):
        return 0

    def archiving_count(self):  # no records waiting for their dead-letter record (KIP-1191)
        return 0

    durable_version = 0  # no key ordering: a durable write frees no key

    def made_durable(self, version):
        return False


def state_image(leader: int, local_address: str, cut_off_port: int = 1):
    """The controller's metadata as a share-partition leader on broker 1 reads it: coordinator 0's
    partition led by `leader` (1: this broker's shard at `local_address`; 3: broker 3's listener)."""
    from types import SimpleNamespace

    from actors import internal_topics
    from actors.controller.core import BrokerInfo, PartitionState, TopicState
    return SimpleNamespace(
        topics={internal_topics.SHARE_GROUP_STATE: TopicState(
            internal_topics.SHARE_GROUP_STATE, STATE_TOPIC, [PartitionState(0, [1, 3], leader=leader)], {},
            internal=True)},
        brokers={1: BrokerInfo(1, "127.0.0.1", 1), 3: BrokerInfo(3, "127.0.0.1", cut_off_port)},
        partition_listeners={(STATE_TOPIC, 0): local_address},
        coordinators={(internal_topics.SHARE_GROUP_STATE, 0): "handle-0"})


def share_leaders(controller):
    """The share-partition leaders of partition 0 on broker 1 (leader epoch 3), one coordinator."""
    from types import SimpleNamespace

    from actors.share_partition.actor import ShareLeaders
    partition = SimpleNamespace(broker_id=1, topic_id=TOPIC, partition=0, leader_epoch=3)
    return ShareLeaders(partition, CONFIG | {"share.coordinator.state.topic.num.partitions": 1,
                                             "listeners": "PLAINTEXT://127.0.0.1:0"}, controller)


async def cut_off_broker():
    """(a listener that reads a request and never answers, as a broker cut off from the others;
    an event set once a request reached it)."""
    received = asyncio.Event()

    async def black_hole(reader, writer):
        await reader.read(1)
        received.set()
        await asyncio.sleep(60)
    return await asyncio.start_server(black_hole, "127.0.0.1", 0), received


async def coordinator_on_a_cut_off_broker():
    """Coordinator 0 led by broker 3, cut off; its next leader (broker 1's shard) ready: `moved()`
    is the metadata once broker 3 is fenced. Close with `close()`."""
    from types import SimpleNamespace
    cut_off, received = await cut_off_broker()
    local = RecordingCoordinator()
    local_server, local_address = await shard({(STATE_TOPIC, 0): local})
    port = cut_off.sockets[0].getsockname()[1]

    def close():
        cut_off.close()
        local_server.close()
    return SimpleNamespace(received=received, local=local, close=close,
                           controller=FakeController(state_image(3, local_address, port)),
                           moved=lambda: state_image(1, local_address, port))


@pytest.mark.parametrize("stuck", ["answer", "connect"])
def test_a_write_to_a_coordinator_cut_off_goes_to_its_new_leader_without_waiting_for_the_write_timeout(
        monkeypatch, stuck):
    """A broker cut off from the others answers nothing (no reset: the packets are lost). Its
    share coordinators get new leaders once its session times out; a share-partition leader whose
    state write waits on it must see that in the metadata and write the whole state to the new
    leader, not wait STATE_WRITE_TIMEOUT_S (30 s) to answer the acknowledgement with an error:
    the member's ShareAcknowledge (and, on the same connection, its ShareFetches) waited that long.
    Either the request is sent and never answered, or (a new connection) the connect never completes."""
    from actors.share_partition import actor as share_actor

    monkeypatch.setattr(share_actor, "STATE_MOVE_CHECK_S", 0.1)

    async def run():
        c = await coordinator_on_a_cut_off_broker()
        leaders = share_leaders(c.controller)
        leaders.state_epochs["g"] = 1
        if stuck == "connect":
            connect = leaders._connect

            async def connect_nowhere(address):
                if isinstance(address, tuple):
                    c.received.set()
                    await asyncio.sleep(60)
                return await connect(address)
            leaders._connect = connect_nowhere
        persisting = asyncio.ensure_future(leaders._persist("g", DirtyState()))
        await asyncio.wait_for(c.received.wait(), 5)
        await asyncio.sleep(0.3)
        assert not persisting.done()
        c.controller.image = c.moved()  # broker 3 fenced: broker 1 leads the coordinator's partition now
        started = time.monotonic()
        outcome = await asyncio.wait_for(persisting, 10)
        took = time.monotonic() - started
        leaders.close()
        c.close()
        return outcome, took, c.local.writes

    outcome, took, writes = asyncio.run(run())
    assert outcome == (0, None)
    assert took < 2, f"{took:.1f} s"
    assert [(w[0], w[5], w[6]) for w in writes] == [("g", 50, [(50, 59, 2, 1)])], "the whole state, to the new leader"


def test_a_state_read_from_a_coordinator_cut_off_is_sent_again_to_its_new_leader(monkeypatch):
    """A share-partition leader that takes over (its partition's leader moved in a network cut)
    reads its state from the share coordinator; where that coordinator's broker was cut off as
    well, the Read waits on a connection nobody answers. Once the metadata shows the coordinator's
    new leader, the Read goes there, well before the load step's 10 s (the share consumers of that
    partition wait for the load)."""
    from actors.share_partition import actor as share_actor

    monkeypatch.setattr(share_actor, "STATE_MOVE_CHECK_S", 0.1)

    async def run():
        c = await coordinator_on_a_cut_off_broker()
        leaders = share_leaders(c.controller)
        reading = asyncio.ensure_future(leaders._state_call("g", wire.READ, [TOPIC.bytes, 0, 3]))
        await asyncio.wait_for(c.received.wait(), 5)
        await asyncio.sleep(0.3)
        assert not reading.done()
        c.controller.image = c.moved()  # broker 3 fenced: broker 1 leads the coordinator's partition now
        started = time.monotonic()
        answer = await asyncio.wait_for(reading, 10)
        took = time.monotonic() - started
        leaders.close()
        c.close()
        return answer, took, c.local.calls

    answer, took, calls = asyncio.run(run())
    assert answer[0] == 0 and answer[3] == 40, answer  # no error; the state's start offset
    assert took < 2, f"{took:.1f} s"
    assert calls == [("read", 0, 3)], "read once, from the new leader"


def test_a_state_write_to_a_new_coordinator_that_has_not_heard_it_leads_is_sent_again(monkeypatch):
    """The metadata names a share coordinator's new leader a moment before that broker hears it
    leads: its first answers are NOT_COORDINATOR. The share-partition leader sends the whole state
    again shortly after, instead of failing the acknowledgement that waits for the write."""
    from actors.share_partition import actor as share_actor

    monkeypatch.setattr(share_actor, "MOVED_RETRY_DELAYS_S", (0.0, 0.05, 0.1))

    class NotYetLeading(RecordingCoordinator):
        async def write_state(self, group_id, topic_id, partition, state_epoch, leader_epoch, start_offset,
                              batches, delivery_complete_count):
            self.calls.append(("write", start_offset))
            if len(self.calls) <= 2:
                raise CoordinatorLogError(ErrorCode.NOT_COORDINATOR, "this replica does not lead the partition now")
            return await super().write_state(group_id, topic_id, partition, state_epoch, leader_epoch,
                                             start_offset, batches, delivery_complete_count)

    async def run():
        local = NotYetLeading()
        local_server, local_address = await shard({(STATE_TOPIC, 0): local})
        leaders = share_leaders(FakeController(state_image(1, local_address)))
        leaders.state_epochs["g"] = 1
        outcome = await asyncio.wait_for(leaders._persist("g", DirtyState()), 10)
        leaders.close()
        local_server.close()
        return outcome, local.calls, local.writes

    outcome, calls, writes = asyncio.run(run())
    assert outcome == (0, None)
    assert calls == [("write", 55), ("write", 50), ("write", 50)], "the delta, then the whole state twice"
    assert [(w[5], w[6]) for w in writes] == [(50, [(50, 59, 2, 1)])]


def test_a_share_fetch_is_answered_while_its_share_partition_state_still_loads(monkeypatch):
    """A new share-partition leader loads its state from a coordinator whose broker is cut off (no
    answer until the metadata names the coordinator's new leader, ~10 s into a cut). A ShareFetch
    that acknowledges nothing here is answered within LOAD_WAIT_S, without records and without
    error, and its long poll gives up at its own timeout: the client keeps one ShareFetch in flight
    for all its partitions (librdkafka), whose records must not wait for this one. The load goes on
    meanwhile, and once it is done the share-partition serves."""
    from types import SimpleNamespace

    from actors.share_partition import actor as share_actor

    monkeypatch.setattr(share_actor, "STATE_MOVE_CHECK_S", 0.1)

    async def group_configs(group_id):
        return {}

    async def run():
        c = await coordinator_on_a_cut_off_broker()
        leaders = share_leaders(c.controller)
        leaders.partition.group_configs = group_configs
        leaders.partition.core = SimpleNamespace(log_start_offset=0, high_watermark=100, last_stable_offset=100)
        started = time.monotonic()
        first = await asyncio.wait_for(leaders.share_fetch("g", "m", acks=None, max_records=10, batch_size=10,
                                                           max_bytes=1 << 20), 5)
        fetch_s = time.monotonic() - started
        started = time.monotonic()
        woken = await asyncio.wait_for(leaders.share_wait("g", 300), 5)
        wait_s = time.monotonic() - started
        loading = leaders.loading["g"]
        reached = c.received.is_set()
        c.controller.image = c.moved()  # the coordinator's new leader is named: the Read goes there
        woken_after = await asyncio.wait_for(leaders.share_wait("g", 5000), 5)
        same_load = leaders.loading.get("g") is loading
        leaders.close()
        c.close()
        return first, fetch_s, woken, wait_s, reached, woken_after, same_load, c.local.calls

    first, fetch_s, woken, wait_s, reached, woken_after, same_load, calls = asyncio.run(run())
    assert (first.error_code, first.acquired) == (0, []), first
    assert fetch_s < share_actor.LOAD_WAIT_S + 0.5, f"{fetch_s:.2f} s"
    assert woken is False and wait_s < 1.0, f"{wait_s:.2f} s"
    assert reached, "the Read went to the cut-off coordinator"
    assert woken_after is True, "the loaded share-partition has records from offset 40 below the high watermark"
    assert same_load and calls == [("read", 0, 3)], "one load, not one per request"
