"""The gateway's routing table: api key -> handler and the versions it serves.

Only what is listed here is advertised in ApiVersions.
"""
from __future__ import annotations

from actors.gateway.dispatch import Route
from actors.gateway.handlers.acls import handle_create_acls, handle_delete_acls, handle_describe_acls
from actors.gateway.handlers.api_versions import handle_api_versions
from actors.gateway.handlers.cluster_info import handle_describe_cluster, handle_metadata
from actors.gateway.handlers.consumer_groups import (handle_consumer_group_describe, handle_consumer_group_heartbeat,
                                                     handle_describe_groups, handle_heartbeat, handle_join_group,
                                                     handle_leave_group, handle_offset_commit, handle_offset_delete,
                                                     handle_offset_fetch, handle_sync_group)
from actors.gateway.handlers.configs import handle_describe_configs, handle_incremental_alter_configs
from actors.gateway.handlers.delete_records import handle_delete_records
from actors.gateway.handlers.fetch import handle_fetch
from actors.gateway.handlers.groups import (handle_delete_groups, handle_find_coordinator, handle_list_groups,
                                            handle_share_group_describe, handle_share_group_heartbeat)
from actors.gateway.handlers.list_offsets import handle_list_offsets
from actors.gateway.handlers.log_dirs import handle_describe_log_dirs
from actors.gateway.handlers.metadata_quorum import handle_describe_quorum, handle_quorum_rpc
from actors.gateway.handlers.raft_voters import handle_raft_voter
from actors.gateway.handlers.produce import acks_zero, handle_produce
from actors.gateway.handlers.producer_ids import handle_init_producer_id
from actors.gateway.handlers.producers import handle_describe_producers
from actors.gateway.handlers.sasl import handle_sasl_authenticate, handle_sasl_handshake
from actors.gateway.handlers.scram_credentials import (handle_alter_user_scram_credentials,
                                                       handle_describe_user_scram_credentials)
from actors.gateway.handlers.share_admin import (handle_alter_share_group_offsets, handle_delete_share_group_offsets,
                                                 handle_describe_share_group_offsets)
from actors.gateway.handlers.quotas import handle_alter_client_quotas, handle_describe_client_quotas
from actors.gateway.handlers.reassignments import (handle_alter_partition_reassignments, handle_elect_leaders,
                                                   handle_list_partition_reassignments)
from actors.gateway.handlers.share_fetch import handle_share_acknowledge, handle_share_fetch
from actors.gateway.handlers.share_state import handle_share_state
from actors.gateway.handlers.streams_groups import handle_streams_group_describe, handle_streams_group_heartbeat
from actors.gateway.handlers.txn_markers import handle_write_txn_markers
from actors.gateway.handlers.topics import handle_create_partitions, handle_create_topics, handle_delete_topics
from actors.gateway.handlers.transactions import (handle_add_offsets_to_txn, handle_add_partitions_to_txn,
                                                  handle_describe_transactions, handle_end_txn,
                                                  handle_list_transactions, handle_txn_offset_commit,
                                                  transactional_produce)

# Transactions (issue 19): the coordinator's APIs, TxnOffsetCommit (sendOffsetsToTransaction), the
# partition leaders' markers and DescribeProducers (61) are advertised.
TRANSACTIONS_ADVERTISED = True

ROUTES: dict[int, Route] = {
    0: Route(transactional_produce(handle_produce), 3, 13, no_response=acks_zero, advertised_min_version=0),
    1: Route(handle_fetch, 4, 18),  # v18 (KIP-1166) adds a follower's high watermark, tagged: nothing to do here
    2: Route(handle_list_offsets, 1, 11),
    3: Route(handle_metadata, 0, 13),  # the connection's listener: its addresses
    8: Route(handle_offset_commit, 2, 10),
    9: Route(handle_offset_fetch, 1, 10),
    10: Route(handle_find_coordinator, 0, 6),
    11: Route(handle_join_group, 0, 9),
    12: Route(handle_heartbeat, 0, 4),
    13: Route(handle_leave_group, 0, 5),
    14: Route(handle_sync_group, 0, 5),
    15: Route(handle_describe_groups, 0, 6),
    16: Route(handle_list_groups, 0, 5),
    17: Route(handle_sasl_handshake, 0, 1),
    18: Route(handle_api_versions, 0, 5),
    19: Route(handle_create_topics, 2, 7),
    20: Route(handle_delete_topics, 1, 6),
    21: Route(handle_delete_records, 0, 2),
    22: Route(handle_init_producer_id, 0, 5),
    24: Route(handle_add_partitions_to_txn, 0, 5, advertised=TRANSACTIONS_ADVERTISED),
    25: Route(handle_add_offsets_to_txn, 0, 4, advertised=TRANSACTIONS_ADVERTISED),
    26: Route(handle_end_txn, 0, 5, advertised=TRANSACTIONS_ADVERTISED),
    # the partition leaders' side of transactions, sent by the transaction coordinators
    27: Route(handle_write_txn_markers, 1, 2),
    28: Route(handle_txn_offset_commit, 0, 6, advertised=TRANSACTIONS_ADVERTISED),
    36: Route(handle_sasl_authenticate, 0, 2),
    29: Route(handle_describe_acls, 1, 3),
    30: Route(handle_create_acls, 1, 3),
    31: Route(handle_delete_acls, 1, 3),
    32: Route(handle_describe_configs, 1, 4),
    35: Route(handle_describe_log_dirs, 1, 5),  # one log directory per broker (v5: never cordoned, KIP-1066)
    37: Route(handle_create_partitions, 0, 3),
    42: Route(handle_delete_groups, 0, 3),
    43: Route(handle_elect_leaders, 0, 2),  # PREFERRED and UNCLEAN (handlers/reassignments.py)
    44: Route(handle_incremental_alter_configs, 0, 1),
    45: Route(handle_alter_partition_reassignments, 0, 1),
    46: Route(handle_list_partition_reassignments, 0, 0),
    47: Route(handle_offset_delete, 0, 0),
    48: Route(handle_describe_client_quotas, 0, 1),
    49: Route(handle_alter_client_quotas, 0, 1),
    50: Route(handle_describe_user_scram_credentials, 0, 0),
    51: Route(handle_alter_user_scram_credentials, 0, 0),
    # KRaft's quorum: the voters' RPCs (CLUSTER_ACTION) and DescribeQuorum (handlers/metadata_quorum.py)
    52: Route(handle_quorum_rpc, 0, 2),  # Vote; v2 carries KIP-996's PreVote
    53: Route(handle_quorum_rpc, 0, 1),  # BeginQuorumEpoch
    54: Route(handle_quorum_rpc, 0, 1),  # EndQuorumEpoch
    55: Route(handle_describe_quorum, 0, 2),
    80: Route(handle_raft_voter, 0, 1),  # AddRaftVoter (KIP-853; UpdateRaftVoter, 82, is Kafka's controllers' only)
    81: Route(handle_raft_voter, 0, 0),  # RemoveRaftVoter
    60: Route(handle_describe_cluster, 0, 2),
    61: Route(handle_describe_producers, 0, 0, advertised=TRANSACTIONS_ADVERTISED),  # the partition leaders' state
    65: Route(handle_describe_transactions, 0, 0, advertised=TRANSACTIONS_ADVERTISED),
    66: Route(handle_list_transactions, 0, 2, advertised=TRANSACTIONS_ADVERTISED),
    68: Route(handle_consumer_group_heartbeat, 0, 1),
    69: Route(handle_consumer_group_describe, 0, 1),
    76: Route(handle_share_group_heartbeat, 1, 1),
    77: Route(handle_share_group_describe, 1, 1),
    78: Route(handle_share_fetch, 1, 2),
    79: Route(handle_share_acknowledge, 1, 2),
    # share-state APIs, for other brokers' share-partition leaders (CLUSTER_ACTION on the cluster)
    83: Route(handle_share_state, 0, 0),  # InitializeShareGroupState
    84: Route(handle_share_state, 0, 0),  # ReadShareGroupState
    85: Route(handle_share_state, 0, 1),  # WriteShareGroupState
    86: Route(handle_share_state, 0, 0),  # DeleteShareGroupState
    87: Route(handle_share_state, 0, 1),  # ReadShareGroupStateSummary
    88: Route(handle_streams_group_heartbeat, 0, 1),  # KIP-1071 (handlers/streams_groups.py)
    89: Route(handle_streams_group_describe, 0, 1),
    90: Route(handle_describe_share_group_offsets, 0, 1),
    91: Route(handle_alter_share_group_offsets, 0, 0),
    92: Route(handle_delete_share_group_offsets, 0, 0),
}
