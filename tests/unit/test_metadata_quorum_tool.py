"""`kray metadata-quorum describe` (cluster/tools/metadata_quorum.py): its parser and its output
from a DescribeQuorum answer, the way the gateway's handler builds it."""
import pytest

from protocol import messages as m

from actors.controller.quorum import QuorumStatus, ReplicaStatus
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
    assert lines[2].split()[:3] == ["2", "12", "5"]


def test_an_error_is_reported():
    with pytest.raises(AdminError):
        metadata_quorum.partition_of(m.DescribeQuorumResponse(error_code=42, error_message="off", topics=[]))


def test_the_cli_knows_the_tool(capsys):
    from cluster import cli
    with pytest.raises(SystemExit):
        cli.main(["metadata-quorum", "--help"])
    assert "describe" in capsys.readouterr().out
