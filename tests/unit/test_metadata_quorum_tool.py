"""`kray metadata-quorum` (cluster/tools/metadata_quorum.py): its parser, its output from a
DescribeQuorum answer, the way the gateway's handler builds it, and the AddRaftVoter /
RemoveRaftVoter requests of add-controller / remove-controller."""
import uuid

import pytest

from protocol import messages as m

from actors.controller.quorum import QuorumStatus, ReplicaStatus
from actors.controller.quorum_shell import wire
from actors.gateway.handlers.metadata_quorum import describe_quorum_response
from cluster.admin import AdminError
from cluster.tools import metadata_quorum


def _part():
    status = QuorumStatus(node_id=1, role="leader", epoch=4, leader_id=1, voted_id=1, high_watermark=17,
                          log_end_offset=17, voters=(ReplicaStatus(1, 17, 1000, 1000), ReplicaStatus(2, 12, 990, 900),
                                                     ReplicaStatus(3, 17, 995, 995)))
    response = m.DescribeQuorumResponse.decode(describe_quorum_response(status, 2).encode(2), 2)
    return metadata_quorum.partition_of(response)


def test_status():
    text = metadata_quorum.format_status(_part(), now_ms=1100)
    assert "LeaderId:               1" in text
    assert "HighWatermark:          17" in text
    assert "MaxFollowerLag:         5" in text
    assert "MaxFollowerLagTimeMs:   200" in text
    assert "CurrentVoters:          [1,2,3]" in text


def test_replication():
    lines = metadata_quorum.format_replication(_part(), now_ms=1100).splitlines()
    assert lines[1].split()[0] == "1" and lines[1].split()[-1] == "Leader"
    # Kafka's columns: NodeId, DirectoryId (its base64 form), LogEndOffset, Lag, ...
    assert lines[0].split()[:3] == ["NodeId", "DirectoryId", "LogEndOffset"]
    row = lines[2].split()
    assert row[0] == "2" and row[2:4] == ["12", "5"]
    assert metadata_quorum.parse_directory_id(row[1]) == wire.voter_directory_id(2)


def test_directory_ids_in_kafkas_form_or_as_uuids():
    directory = uuid.UUID("12345678-1234-5678-1234-567812345678")
    text = metadata_quorum.format_directory_id(directory)
    assert len(text) == 22 and metadata_quorum.parse_directory_id(text) == directory
    assert metadata_quorum.parse_directory_id(str(directory)) == directory
    assert metadata_quorum.parse_directory_id(None) == uuid.UUID(int=0)
    with pytest.raises(AdminError):
        metadata_quorum.parse_directory_id("not-an-id")


def test_add_and_remove_controller_requests_travel_as_kafkas():
    add = metadata_quorum.add_voter_request(4, wire.voter_directory_id(4), 30_000)
    decoded = m.AddRaftVoterRequest.decode(add.encode(1), 1)
    assert (decoded.voter_id, decoded.voter_directory_id, decoded.timeout_ms) == (4, wire.voter_directory_id(4), 30_000)
    remove = metadata_quorum.remove_voter_request(3, wire.voter_directory_id(3))
    decoded = m.RemoveRaftVoterRequest.decode(remove.encode(0), 0)
    assert (decoded.voter_id, decoded.voter_directory_id) == (3, wire.voter_directory_id(3))


def test_an_error_is_reported():
    with pytest.raises(AdminError):
        metadata_quorum.partition_of(m.DescribeQuorumResponse(error_code=42, error_message="off", topics=[]))


def test_the_cli_knows_the_tool(capsys):
    from cluster import cli
    with pytest.raises(SystemExit):
        cli.main(["metadata-quorum", "--help"])
    out = capsys.readouterr().out
    assert "describe" in out and "add-controller" in out and "remove-controller" in out
