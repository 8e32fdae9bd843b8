"""Three QuorumNodes in one event loop, every message through Kafka's wire bytes and back: a leader
is elected, proposals commit on all three, the leader is stopped and another takes over with the
earlier commits, and a restart rebuilds a node from its files. Real clock, short timeouts."""
import asyncio

import pytest

from actors.controller.quorum import (
    BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, NotLeader, QuorumConfig, VoteRequest,
)
from actors.controller.quorum_shell import wire
from actors.controller.quorum_shell.node import QuorumNode

CONFIG = QuorumConfig(voters=(1, 2, 3), election_timeout_ms=150, fetch_timeout_ms=400, request_timeout_ms=300,
                      election_backoff_max_ms=100, fetch_max_wait_ms=100)
VOTE_V, BEGIN_V, END_V, FETCH_V = 2, 1, 1, 16


def _bytes(msg, version):
    return type(msg).decode(msg.encode(version), version)


class WireLoopback:
    """A transport that carries each request and answer as Kafka wire bytes between nodes here."""

    def __init__(self, src):
        self.src = src
        self.nodes = {}
        self.down = set()

    async def request(self, dst, msg):
        if self.src in self.down or dst in self.down or dst not in self.nodes:
            await asyncio.sleep(0.05)
            return None
        try:
            return await asyncio.wait_for(self._exchange(self.nodes[dst], dst, msg), CONFIG.request_timeout_ms / 1000)
        except asyncio.TimeoutError:
            return None

    async def _exchange(self, node, dst, msg):
        if isinstance(msg, VoteRequest):
            inbound = wire.vote_request_from_wire(_bytes(wire.vote_request_to_wire(msg, dst=dst, cluster_id="c",
                                                                                  version=VOTE_V), VOTE_V))
            answer = await node.handle_request(inbound)
            return answer and wire.vote_response_from_wire(_bytes(wire.vote_response_to_wire(answer), VOTE_V),
                                                          src=dst, request=msg)
        if isinstance(msg, BeginQuorumEpochRequest):
            inbound = wire.begin_request_from_wire(_bytes(wire.begin_request_to_wire(msg, dst=dst, cluster_id="c",
                                                                                    version=BEGIN_V), BEGIN_V))
            answer = await node.handle_request(inbound)
            return answer and wire.begin_response_from_wire(_bytes(wire.begin_response_to_wire(answer), BEGIN_V),
                                                            src=dst, request=msg)
        if isinstance(msg, EndQuorumEpochRequest):
            inbound = wire.end_request_from_wire(_bytes(wire.end_request_to_wire(msg, cluster_id="c",
                                                                                version=END_V), END_V), END_V)
            answer = await node.handle_request(inbound)
            return answer and wire.end_response_from_wire(_bytes(wire.end_response_to_wire(answer), END_V),
                                                          src=dst, request=msg)
        assert isinstance(msg, FetchRequest)
        inbound = wire.fetch_request_from_wire(_bytes(wire.fetch_request_to_wire(msg, cluster_id="c",
                                                                                version=FETCH_V), FETCH_V), FETCH_V)
        answer = await node.handle_request(inbound)
        return answer and wire.fetch_response_from_wire(_bytes(wire.fetch_response_to_wire(answer), FETCH_V),
                                                        src=dst, request=msg)


async def _until(predicate, timeout_s):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)


def _role(node):
    role = node.status().role
    return getattr(role, "value", role)


async def _scenario(tmp_path):
    down = set()
    transports, nodes, applied, runs = {}, {}, {i: [] for i in (1, 2, 3)}, {}

    def start(i):
        transports[i] = WireLoopback(i)
        transports[i].down = down
        nodes[i] = QuorumNode(i, CONFIG, str(tmp_path / f"n{i}"), transports[i],
                              on_commit=lambda b, i=i: applied[i].extend(b.records))
        for t in transports.values():
            t.nodes = nodes
        runs[i] = asyncio.ensure_future(nodes[i].run())

    for i in (1, 2, 3):
        start(i)
    live = lambda: {i: n for i, n in nodes.items() if i not in down}

    def leader_id():
        ids = {n.status().leader_id for n in live().values() if _role(n) == "leader"}
        return ids.pop() if len(ids) == 1 else None

    await _until(lambda: leader_id() is not None, 5)
    first = leader_id()
    for k in range(3):
        result = await asyncio.wait_for(nodes[first].propose([b"rec-%d" % k]), 5)
        assert not isinstance(result, NotLeader)
    await _until(lambda: all(len(applied[i]) == 3 for i in (1, 2, 3)), 5)
    assert all(applied[i] == [b"rec-0", b"rec-1", b"rec-2"] for i in (1, 2, 3))
    follower = next(i for i in (1, 2, 3) if i != first)
    assert isinstance(await nodes[follower].propose([b"x"]), NotLeader)

    # stop the leader: the others elect one of themselves, within a few seconds, keeping the commits
    down.add(first)
    nodes[first].stop()
    runs[first].cancel()
    t0 = asyncio.get_running_loop().time()
    await _until(lambda: leader_id() not in (None, first), 5)
    took_s = asyncio.get_running_loop().time() - t0
    second = leader_id()
    await asyncio.wait_for(nodes[second].propose([b"after"]), 5)
    others = [i for i in (1, 2, 3) if i != first]
    await _until(lambda: all(applied[i][-1:] == [b"after"] for i in others), 5)
    for i in others:
        assert applied[i][:3] == [b"rec-0", b"rec-1", b"rec-2"]

    # the old leader comes back from its files and catches up
    down.discard(first)
    applied[first].clear()
    start(first)
    await _until(lambda: applied[first] == [b"rec-0", b"rec-1", b"rec-2", b"after"], 5)
    for i in (1, 2, 3):
        nodes[i].stop()
        runs[i].cancel()
    await asyncio.sleep(0)
    return took_s


def test_three_voters_elect_commit_and_fail_over(tmp_path):
    took_s = asyncio.run(_scenario(tmp_path))
    assert took_s < 3, f"a new leader took {took_s:.2f} s"


# ---- one node and a scripted peer: how requests are answered, and a disk that fails ------------------
class GrantingPeers:
    """Peers that grant every vote and take every BeginQuorumEpoch, and never answer anything else."""

    async def request(self, dst, msg):
        from actors.controller.quorum import BeginQuorumEpochResponse, VoteResponse
        from protocol.errors import ErrorCode
        if isinstance(msg, VoteRequest):
            return VoteResponse(dst, ErrorCode.NONE, msg.epoch, -1, True, msg.pre_vote)
        if isinstance(msg, BeginQuorumEpochRequest):
            return BeginQuorumEpochResponse(dst, ErrorCode.NONE, msg.epoch, msg.leader_id)
        await asyncio.sleep(10)


async def _leader(tmp_path):
    node = QuorumNode(1, CONFIG, str(tmp_path), GrantingPeers())
    run = asyncio.ensure_future(node.run())
    for _ in range(200):
        if node.status().role == "leader":
            return node, run
        await asyncio.sleep(0.01)
    raise AssertionError("no leader")


def test_a_newer_fetch_from_a_peer_takes_the_answer_the_core_gives_that_peer(tmp_path):
    """A follower's fetch that reached the leader late (its sender gave up and sent another on a new
    connection) is held by the core and then dropped for the newer one: its handler gets None at
    once, and the core's answers go to the newer fetches, one each (before, every answer went to the
    previous fetch's handler, whose connection was gone: the follower never heard from the leader)."""
    async def scenario():
        node, run = await _leader(tmp_path)
        status = node.status()
        end, epoch = status.log_end_offset, status.epoch
        await asyncio.wait_for(node.handle_request(FetchRequest(3, epoch, end, epoch, 0)), 2)
        late = asyncio.ensure_future(node.handle_request(FetchRequest(2, epoch, end, epoch, 100)))
        await asyncio.sleep(0.01)
        newer = asyncio.ensure_future(node.handle_request(FetchRequest(2, epoch, end, epoch, 100)))
        assert await asyncio.wait_for(late, 1) is None, "the dropped fetch's handler is released"
        answer = await asyncio.wait_for(newer, 1)
        assert answer is not None and answer.epoch == epoch, answer
        again = await asyncio.wait_for(node.handle_request(FetchRequest(2, epoch, end, epoch, 100)), 1)
        assert again is not None, "the next fetch is answered too"
        node.stop()
        run.cancel()
    asyncio.run(scenario())


def test_a_state_write_that_fails_stops_the_node_for_good(tmp_path):
    """The quorum-state write of a granted vote fails (disk full): nothing is answered (the vote is
    not on disk), the node refuses every later request, including the candidate's retry that the
    core would otherwise grant again with nothing written, and run() raises the failure."""
    from actors.controller.quorum_shell.node import QuorumStorageError

    async def scenario():
        quiet = QuorumConfig(voters=(1, 2, 3), election_timeout_ms=10_000, fetch_timeout_ms=20_000)
        node = QuorumNode(1, quiet, str(tmp_path), GrantingPeers())
        run = asyncio.ensure_future(node.run())
        write = node.store._write_state

        def full(state):
            raise OSError(28, "No space left on device")
        node.store._write_state = full
        vote = VoteRequest(src=2, epoch=1, last_epoch=0, last_offset=0, pre_vote=False)
        with pytest.raises(QuorumStorageError):
            await asyncio.wait_for(node.handle_request(vote), 1)
        node.store._write_state = write
        assert await asyncio.wait_for(node.handle_request(vote), 1) is None, "a failed node answers nothing"
        with pytest.raises(QuorumStorageError):
            await asyncio.wait_for(run, 1)
        assert isinstance(await node.propose([b"x"]), NotLeader)
    asyncio.run(scenario())


def test_a_proposal_waiting_when_the_node_stops_is_told_its_fate_is_unknown(tmp_path):
    """A leader alone (its peers never fetch) cannot commit a proposal; stopping the node ends the
    wait with LookupError (the gateway answers "lost" and the controller reads the log again)
    instead of leaving the caller waiting forever."""
    async def scenario():
        node, run = await _leader(tmp_path)
        proposal = asyncio.ensure_future(node.propose([b"never-committed"]))
        await asyncio.sleep(0.05)
        assert not proposal.done(), "no majority: not committed"
        node.stop()
        with pytest.raises(LookupError):
            await asyncio.wait_for(proposal, 1)
        run.cancel()
    asyncio.run(scenario())


async def _voter_changes(tmp_path):
    """Three nodes over the wire loopback: remove a follower (it follows on as an observer), add it
    back, then the leader removes itself and another node leads; change_voters answers Kafka's
    error codes once the change committed."""
    from protocol.errors import ErrorCode
    transports, nodes, runs = {}, {}, {}
    for i in (1, 2, 3):
        transports[i] = WireLoopback(i)
        nodes[i] = QuorumNode(i, CONFIG, str(tmp_path / f"n{i}"), transports[i])
    for t in transports.values():
        t.nodes = nodes
    for i in (1, 2, 3):
        runs[i] = asyncio.ensure_future(nodes[i].run())

    def leader_id():
        ids = {n.status().leader_id for n in nodes.values() if _role(n) == "leader"}
        return ids.pop() if len(ids) == 1 else None

    await _until(lambda: leader_id() is not None, 5)
    first = leader_id()
    follower = next(i for i in (1, 2, 3) if i != first)
    assert await nodes[follower].change_voters("remove", first, 1000) == \
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {follower} does not lead the quorum")
    assert await nodes[first].change_voters("remove", follower, 3000) == (ErrorCode.NONE, None)
    assert nodes[first].core.voters == tuple(sorted({1, 2, 3} - {follower}))
    await asyncio.wait_for(nodes[first].propose([b"two voters"]), 5)
    await _until(lambda: nodes[follower].core.voters == nodes[first].core.voters, 5)   # it follows on
    assert (await nodes[first].change_voters("remove", follower, 1000))[0] == ErrorCode.VOTER_NOT_FOUND
    assert await nodes[first].change_voters("add", follower, 3000) == (ErrorCode.NONE, None)
    assert nodes[first].core.voters == (1, 2, 3)
    assert await nodes[first].change_voters("remove", first, 3000) == (ErrorCode.NONE, None)
    await _until(lambda: leader_id() not in (None, first), 5)
    second = leader_id()
    await asyncio.wait_for(nodes[second].propose([b"after"]), 5)
    assert not nodes[first].core.is_voter and nodes[second].core.voters == tuple(sorted({1, 2, 3} - {first}))
    for i in (1, 2, 3):
        nodes[i].stop()
        runs[i].cancel()
    await asyncio.sleep(0)


def test_voters_change_through_the_nodes(tmp_path):
    asyncio.run(_voter_changes(tmp_path))
