"""The messages voters and observers of the metadata quorum exchange, as KRaft's RPCs (KIP-595,
KIP-996): Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch, each a request and a response.

Plain frozen dataclasses, no wire format: the transport that carries them (a later step) maps them
onto Kafka's VoteRequest/VoteResponse... v1+ or onto its own frames. Fields keep Kafka's names
where Kafka has one; like the wire, a missing leader is `NO_LEADER` (-1), never None.

Every message names its sender (`src`): the core is transport-agnostic and must not depend on a
connection to tell it who answered. Responses also repeat the part of the request they answer
(`pre_vote` of a Vote, the fetch position of a Fetch), where Kafka leans on the connection's
correlation ids: a response that arrives late, twice, or after a restart of its requester is
recognised as stale by its contents alone (see RaftCore's handlers).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from protocol.errors import ErrorCode

from .log import Batch

NO_LEADER = -1


@dataclass(frozen=True)
class VoteRequest:
    """A Vote (pre_vote=False: the candidate bumped its epoch and voted for itself) or a pre-vote
    (KIP-996: epoch is the prospective's current epoch, nothing changes on a receiver that grants
    it). last_epoch/last_offset: the sender's log end (epoch of its last batch, log end offset)."""
    src: int
    epoch: int
    last_epoch: int
    last_offset: int
    pre_vote: bool


@dataclass(frozen=True)
class VoteResponse:
    src: int
    error: ErrorCode
    epoch: int            # the responder's epoch (after the request moved it forward, if it did)
    leader_id: int        # the responder's leader in that epoch, NO_LEADER if none (or a pre-vote granted)
    vote_granted: bool
    pre_vote: bool        # repeated from the request


@dataclass(frozen=True)
class BeginQuorumEpochRequest:
    """A new leader announces itself to the voters (sent at once and every fetch.timeout.ms / 2)."""
    src: int
    epoch: int
    leader_id: int


@dataclass(frozen=True)
class BeginQuorumEpochResponse:
    src: int
    error: ErrorCode
    epoch: int
    leader_id: int


@dataclass(frozen=True)
class EndQuorumEpochRequest:
    """A resigning leader tells the voters to elect another; preferred_successors (most caught up
    first) decide who starts an election first."""
    src: int
    epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True)
class EndQuorumEpochResponse:
    src: int
    error: ErrorCode
    epoch: int
    leader_id: int


@dataclass(frozen=True)
class EpochEndOffset:
    """Fetch's DivergingEpoch: where `epoch` ends in the leader's log."""
    epoch: int
    end_offset: int


@dataclass(frozen=True)
class FetchRequest:
    """A replica (voter or observer) pulls from the leader: fetch_offset is its log end offset,
    last_fetched_epoch the epoch of its last batch (0 for an empty log), epoch the leader epoch it
    believes current. A leader with nothing to send holds the fetch up to max_wait_ms."""
    src: int
    epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int


@dataclass(frozen=True)
class FetchResponse:
    """Either an error, or a diverging epoch (truncate, then fetch again), or records from
    fetch_offset on (whole batches, perhaps none) with the leader's high watermark (-1: unknown)."""
    src: int
    error: ErrorCode
    epoch: int                 # the responder's epoch and leader (Kafka's CurrentLeader)
    leader_id: int
    high_watermark: int
    records: tuple[Batch, ...]
    diverging_epoch: EpochEndOffset | None
    fetch_offset: int          # repeated from the request
    last_fetched_epoch: int    # repeated from the request


Message = Union[VoteRequest, VoteResponse, BeginQuorumEpochRequest, BeginQuorumEpochResponse,
                EndQuorumEpochRequest, EndQuorumEpochResponse, FetchRequest, FetchResponse]
