"""The transaction APIs and the records of __transaction_state, generated from Kafka's schemas (issue 19).

The generic round trip (test_protocol_roundtrip.py) covers every version of every generated message; this file pins
what issue 19 adds: the API table of the transaction APIs, hand-built messages in the versions clients send, the
record formats of __transaction_state, and that ApiVersions does not advertise an API the gateway cannot serve.
"""
import itertools

import pytest

from actors.gateway.dispatch import Dispatcher
from actors.gateway.handlers import ROUTES
from protocol.apis import API_BY_KEY
from protocol.coordinator_records import TransactionLogKey, TransactionLogValue
from protocol.messages import (AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
                               EndTxnRequest, EndTxnResponse, TxnOffsetCommitRequest, WriteTxnMarkersRequest)
from tests.unit.test_protocol_roundtrip import populate

# (api key, name, versions Kafka trunk d79bd502ec7f accepts, first flexible version)
TRANSACTION_APIS = [
    (24, "AddPartitionsToTxn", (0, 5), 3),
    (25, "AddOffsetsToTxn", (0, 4), 3),
    (26, "EndTxn", (0, 5), 3),
    (27, "WriteTxnMarkers", (1, 2), 1),
    (28, "TxnOffsetCommit", (0, 6), 3),
    (61, "DescribeProducers", (0, 0), 0),
    (65, "DescribeTransactions", (0, 0), 0),
    (66, "ListTransactions", (0, 2), 0),
]

# What the gateway advertised in ApiVersions before the transaction APIs were generated: generating a message
# class must never add an API to ApiVersions; only a route in actors/gateway/handlers does.
ADVERTISED_BEFORE_ISSUE_19 = [  # and DeleteRecords (21), added later
    (0, 0, 13), (1, 4, 18), (2, 1, 11), (3, 0, 13), (8, 2, 10), (9, 1, 10), (10, 0, 6), (11, 0, 9), (12, 0, 4),
    (13, 0, 5), (14, 0, 5), (15, 0, 6), (16, 0, 5), (17, 0, 1), (18, 0, 5), (19, 2, 7), (20, 1, 6), (21, 0, 2), (22, 0, 5),
    (29, 1, 3), (30, 1, 3), (31, 1, 3), (32, 1, 4), (36, 0, 2), (37, 0, 3), (42, 0, 3), (44, 0, 1), (47, 0, 0),
    (35, 1, 5), (43, 0, 2), (45, 0, 1), (46, 0, 0),  # log dirs, elections, reassignment (issue 36), added later
    (48, 0, 1), (49, 0, 1),  # client quotas, added later
    (50, 0, 0), (51, 0, 0), (52, 0, 2), (53, 0, 1), (54, 0, 1), (55, 0, 2), (60, 0, 2), (68, 0, 1), (69, 0, 1),
    (76, 1, 1), (77, 1, 1), (78, 1, 2), (79, 1, 2), (83, 0, 0), (84, 0, 0), (85, 0, 1), (86, 0, 0), (87, 0, 1),
    (88, 0, 1), (89, 0, 1),  # streams groups (KIP-1071), added later
    (80, 0, 1), (81, 0, 0),  # AddRaftVoter, RemoveRaftVoter (KIP-853, issue 36), added later
    (90, 0, 1), (91, 0, 0), (92, 0, 0)]


@pytest.mark.parametrize("key,name,versions,flexible_min", TRANSACTION_APIS)
def test_transaction_api_table(key, name, versions, flexible_min):
    spec = API_BY_KEY[key]
    assert spec.name == name
    assert (spec.min_version, spec.max_version) == versions
    assert spec.flexible_min == flexible_min
    assert not spec.latest_version_unstable


def test_add_partitions_to_txn_v3_and_v4_shapes():
    """v0-3 carry one transaction at the top level (the producer's); v4+ a batch of them (the brokers' KIP-890
    verification), and the top-level fields are gone."""
    topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="t", partitions=[0, 2])
    v3 = AddPartitionsToTxnRequest(v3_and_below_transactional_id="tx", v3_and_below_producer_id=7,
                                   v3_and_below_producer_epoch=3, v3_and_below_topics=[topic])
    decoded = AddPartitionsToTxnRequest.decode(v3.encode(3), 3)
    assert (decoded.v3_and_below_transactional_id, decoded.v3_and_below_topics, decoded.transactions) == (
        "tx", [topic], [])
    v4 = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
        transactional_id="tx", producer_id=7, producer_epoch=3, verify_only=True, topics=[topic])])
    decoded = AddPartitionsToTxnRequest.decode(v4.encode(4), 4)
    assert decoded.transactions[0].verify_only and decoded.v3_and_below_transactional_id == ""
    response = AddPartitionsToTxnResponse(error_code=0, results_by_transaction=[
        AddPartitionsToTxnResponse.AddPartitionsToTxnResult(transactional_id="tx", topic_results=[
            AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult(name="t", results_by_partition=[
                AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult(partition_index=0,
                                                                             partition_error_code=0)])])])
    assert AddPartitionsToTxnResponse.decode(response.encode(5), 5) == response


def test_end_txn_v5_returns_the_bumped_producer_id_and_epoch():
    """KIP-890 part 2: from v5 the coordinator bumps the epoch at the end of every transaction and says so."""
    response = EndTxnResponse(error_code=0, producer_id=9, producer_epoch=4)
    assert EndTxnResponse.decode(response.encode(5), 5) == response
    older = EndTxnResponse.decode(response.encode(4), 4)
    assert (older.producer_id, older.producer_epoch) == (-1, -1)  # not on the wire before v5
    request = EndTxnRequest(transactional_id="tx", producer_id=9, producer_epoch=3, committed=True)
    for version in range(0, 6):
        assert EndTxnRequest.decode(request.encode(version), version) == request


def test_add_offsets_and_txn_offset_commit():
    request = AddOffsetsToTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, group_id="g")
    for version in range(0, 5):
        assert AddOffsetsToTxnRequest.decode(request.encode(version), version) == request
    commit = TxnOffsetCommitRequest(transactional_id="tx", group_id="g", producer_id=1, producer_epoch=0,
                                    generation_id_or_member_epoch=5, member_id="m", group_instance_id=None)
    decoded = TxnOffsetCommitRequest.decode(commit.encode(3), 3)
    assert (decoded.generation_id_or_member_epoch, decoded.member_id, decoded.group_instance_id) == (5, "m", None)
    # v3 added the member fields
    assert TxnOffsetCommitRequest.decode(commit.encode(2), 2).generation_id_or_member_epoch == -1


def test_write_txn_markers_starts_at_v1():
    assert API_BY_KEY[27].min_version == 1  # KIP-896 removed v0
    marker = WriteTxnMarkersRequest.WritableTxnMarker(producer_id=5, producer_epoch=2, transaction_result=True,
                                                      topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                                                          name="t", partition_indexes=[0, 1])],
                                                      coordinator_epoch=11)
    request = WriteTxnMarkersRequest(markers=[marker])
    for version in (1, 2):
        assert WriteTxnMarkersRequest.decode(request.encode(version), version) == request


# ---- __transaction_state records --------------------------------------------------------------------------------

def test_transaction_log_key():
    key = TransactionLogKey(transactional_id="tx-1")
    assert TransactionLogKey.decode(key.encode(0), 0) == key
    assert key.encode(0) == b"\x00\x04tx-1"  # a plain (not flexible) string


@pytest.mark.parametrize("version", [0, 1])
def test_transaction_log_value_round_trip(version):
    value = populate(TransactionLogValue, version, itertools.count(3))
    encoded = value.encode(version)
    assert TransactionLogValue.decode(encoded, version) == value
    nulls = populate(TransactionLogValue, version, itertools.count(3), nulls=True)
    assert nulls.transaction_partitions is None
    assert TransactionLogValue.decode(nulls.encode(version), version) == nulls


def test_transaction_log_value_tagged_fields_are_v1_only():
    value = TransactionLogValue(producer_id=10, previous_producer_id=9, next_producer_id=11, producer_epoch=0,
                                next_producer_epoch=0, transaction_timeout_ms=60_000, transaction_status=1,
                                transaction_partitions=[TransactionLogValue.PartitionsSchema(topic="t",
                                                                                            partition_ids=[0])],
                                transaction_last_update_timestamp_ms=5, transaction_start_timestamp_ms=4,
                                client_transaction_version=2)
    assert TransactionLogValue.decode(value.encode(1), 1) == value
    v0 = TransactionLogValue.decode(value.encode(0), 0)
    assert (v0.previous_producer_id, v0.next_producer_id, v0.next_producer_epoch, v0.client_transaction_version) == (
        -1, -1, -1, 0)
    assert v0.transaction_partitions == value.transaction_partitions
    defaults = TransactionLogValue(producer_id=10, producer_epoch=0, transaction_timeout_ms=1, transaction_status=0,
                                   transaction_partitions=None)
    assert defaults.encode(1).endswith(b"\x00")  # defaults are not written: an empty tagged-field section


# ---- ApiVersions -------------------------------------------------------------------------------------------------

# the transaction APIs advertised once both sides of issue 19 were in: the coordinator's (24-26, 65, 66), the
# partition leaders' markers (27), the group coordinator's TxnOffsetCommit (28, all of Kafka's versions 0-6) and the
# partition leaders' DescribeProducers (61, v0: all Kafka has)
TRANSACTION_ROUTES = [(24, 0, 5), (25, 0, 4), (26, 0, 5), (27, 1, 2), (28, 0, 6), (61, 0, 0), (65, 0, 0), (66, 0, 2)]


def test_only_the_built_transaction_apis_are_advertised():
    advertised = Dispatcher(None, ROUTES).advertised()
    assert advertised == sorted(ADVERTISED_BEFORE_ISSUE_19 + TRANSACTION_ROUTES)


def test_generator_gives_a_tagged_field_without_versions_its_tagged_versions():
    from protocol import generate
    field = {"name": "PreviousProducerId", "type": "int64", "taggedVersions": "1+", "tag": 0, "default": -1}
    assert generate.field_line(field) == "F('previous_producer_id', 'int64', '1+', tag=0, tagged='1+', default=-1),"
    with pytest.raises(ValueError):
        generate.field_versions({"name": "X", "type": "int8"})
