"""The quorum APIs' gateway handlers (actors/gateway/handlers/metadata_quorum.py): Kafka's
authorization (CLUSTER_ACTION for the voters' RPCs, DESCRIBE for DescribeQuorum) and the answers."""
import asyncio
from types import SimpleNamespace

from protocol import messages as m
from protocol.errors import ErrorCode

from actors.controller.quorum import QuorumStatus, ReplicaStatus, VoteRequest, VoteResponse
from actors.controller.quorum_shell import wire
from actors.gateway.handlers import ROUTES
from actors.gateway.handlers.metadata_quorum import handle_describe_quorum, handle_quorum_rpc
from actors.security.authorizer import AclOperation


class Access:
    def __init__(self, allowed):
        self.allowed = allowed

    def allows_cluster(self, operation):
        return operation in self.allowed


class Voter:
    def __init__(self):
        self.seen = []

    async def handle_request(self, message):
        self.seen.append(message)
        return VoteResponse(src=3, error=ErrorCode.NONE, epoch=message.epoch, leader_id=-1, vote_granted=True,
                            pre_vote=message.pre_vote)

    def status(self):
        return QuorumStatus(node_id=1, role="leader", epoch=4, leader_id=1, voted_id=1, high_watermark=17,
                            log_end_offset=17, voters=(ReplicaStatus(1, 17, 1000, 1000), ReplicaStatus(2, 12, 990, None)))


def _ctx(allowed, quorum=None):
    return SimpleNamespace(access=lambda connection: Access(allowed), quorum=quorum)


HEADER = SimpleNamespace(api_version=1, api_key=52)
VOTE = wire.vote_request_to_wire(VoteRequest(2, 5, 4, 10, False), dst=3, cluster_id="c", version=1)


def test_routes_are_listed():
    assert {52, 53, 54, 55} <= set(ROUTES)


def test_a_vote_without_cluster_action_is_refused():
    voter = Voter()
    response = asyncio.run(handle_quorum_rpc(_ctx({AclOperation.DESCRIBE}, voter), HEADER, VOTE, None))
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and voter.seen == []


def test_a_vote_reaches_the_voter_and_its_answer_goes_back():
    voter = Voter()
    response = asyncio.run(handle_quorum_rpc(_ctx({AclOperation.CLUSTER_ACTION}, voter), HEADER, VOTE, None))
    assert voter.seen == [VoteRequest(2, 5, 4, 10, False)]
    part = m.VoteResponse.decode(response.encode(1), 1).topics[0].partitions[0]
    assert part.vote_granted and part.leader_epoch == 5


def test_without_a_quorum_the_rpcs_are_invalid():
    response = asyncio.run(handle_quorum_rpc(_ctx({AclOperation.CLUSTER_ACTION}), HEADER, VOTE, None))
    assert response.error_code == ErrorCode.INVALID_REQUEST


def test_describe_quorum():
    header = SimpleNamespace(api_version=2, api_key=55)
    refused = asyncio.run(handle_describe_quorum(_ctx(set(), Voter()), header, m.DescribeQuorumRequest(), None))
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    response = asyncio.run(handle_describe_quorum(_ctx({AclOperation.DESCRIBE}, Voter()), header,
                                                  m.DescribeQuorumRequest(), None))
    part = m.DescribeQuorumResponse.decode(response.encode(2), 2).topics[0].partitions[0]
    assert (part.leader_id, part.leader_epoch, part.high_watermark) == (1, 4, 17)
    assert [(r.replica_id, r.log_end_offset, r.last_caught_up_timestamp) for r in part.current_voters] == \
        [(1, 17, 1000), (2, 12, -1)]


def test_a_metadata_fetch_goes_to_the_voter():
    from actors.controller.quorum import FetchRequest, FetchResponse
    from actors.gateway.handlers.fetch import handle_fetch

    class Leader(Voter):
        async def handle_request(self, message):
            self.seen.append(message)
            return FetchResponse(1, ErrorCode.NONE, 4, 1, 0, (), None, message.fetch_offset,
                                 message.last_fetched_epoch)

    voter = Leader()
    request = wire.fetch_request_to_wire(FetchRequest(2, 4, 0, 0, 100), cluster_id="c", version=16)
    header = SimpleNamespace(api_version=16, api_key=1)
    response = asyncio.run(handle_fetch(_ctx({AclOperation.CLUSTER_ACTION}, voter), header, request, None))
    assert voter.seen == [FetchRequest(2, 4, 0, 0, 100)]
    assert response.responses[0].partitions[0].current_leader.leader_id == 1
    refused = asyncio.run(handle_fetch(_ctx(set(), voter), header, request, None))
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_a_broker_without_a_voter_asks_the_controller_for_describe_quorum():
    """As Kafka's brokers forward DescribeQuorum to the controller: the dedicated controller answers
    with its single voter's view; with combined voters it has none (None) and the broker says so."""
    header = SimpleNamespace(api_version=2, api_key=55)

    class Controller:
        def __init__(self, status):
            self.status = status

        async def quorum_status(self):
            return self.status

    dedicated = QuorumStatus(node_id=3000, role="leader", epoch=2, leader_id=3000, voted_id=3000, high_watermark=9,
                             log_end_offset=9, voters=(ReplicaStatus(3000, 9, 1000, 1000),))
    ctx = _ctx({AclOperation.DESCRIBE})
    ctx.controller = Controller(dedicated)
    response = asyncio.run(handle_describe_quorum(ctx, header, m.DescribeQuorumRequest(), None))
    part = m.DescribeQuorumResponse.decode(response.encode(2), 2).topics[0].partitions[0]
    assert (part.leader_id, part.leader_epoch, [r.replica_id for r in part.current_voters]) == (3000, 2, [3000])
    ctx.controller = Controller(None)
    response = asyncio.run(handle_describe_quorum(ctx, header, m.DescribeQuorumRequest(), None))
    assert response.error_code == ErrorCode.INVALID_REQUEST and "voter" in response.error_message


def test_a_follower_voter_answers_describe_quorum_with_the_leaders_view(monkeypatch):
    from actors.gateway.handlers import metadata_quorum

    class Follower(Voter):
        def status(self):
            return QuorumStatus(node_id=2, role="follower", epoch=4, leader_id=1, voted_id=None, high_watermark=15,
                                log_end_offset=17)

    async def leader_status(leader_id):
        assert leader_id == 1
        return Voter().status()

    monkeypatch.setattr(metadata_quorum, "leader_status", leader_status)
    header = SimpleNamespace(api_version=2, api_key=55)
    response = asyncio.run(handle_describe_quorum(_ctx({AclOperation.DESCRIBE}, Follower()), header,
                                                  m.DescribeQuorumRequest(), None))
    part = m.DescribeQuorumResponse.decode(response.encode(2), 2).topics[0].partitions[0]
    assert (part.leader_id, part.high_watermark) == (1, 17)
    assert [r.replica_id for r in part.current_voters] == [1, 2]
    assert part.current_voters[0].replica_directory_id == wire.voter_directory_id(1)
