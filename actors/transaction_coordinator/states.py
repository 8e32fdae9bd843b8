"""Transaction states and their transitions: one table, checked by one function.

The ids are the ones `__transaction_state` stores (TransactionLogValue.TransactionStatus) and the names the ones
DescribeTransactions and ListTransactions report, as in Kafka's TransactionState. PrepareEpochFence is never
stored: it is the moment a coordinator fences a producer (a timed-out transaction, or InitProducerId while one is
ongoing) on its way to PrepareAbort. Dead is never stored either: an expired transactional id is a tombstone.
"""
from __future__ import annotations

from enum import IntEnum

__all__ = ["TxnState", "STATE_NAMES", "STATE_BY_NAME", "TRANSITIONS", "EXPIRATION_ALLOWED", "STORED_STATES",
           "IllegalTransition", "check_transition"]


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


STATE_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATE_BY_NAME = {name: state for state, name in STATE_NAMES.items()}

_S = TxnState
# to-state -> the states it may be reached from (Kafka's TransactionState.VALID_PREVIOUS_STATES; an abort with no
# transaction open, from Empty or Complete*, is transaction version 2's)
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),                  # InitProducerId
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),    # AddPartitions/Offsets
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),                                              # EndTxn(commit)
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE,                         # EndTxn(abort), fence
                                 _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),          # version 2's empty abort
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),                                      # markers written
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),                                        # markers written
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),                   # id expired
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),                                         # timeout, InitProducerId
}
EXPIRATION_ALLOWED = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
STORED_STATES = frozenset(TxnState) - {_S.DEAD, _S.PREPARE_EPOCH_FENCE}


class IllegalTransition(RuntimeError):
    """The coordinator tried a transition the table does not allow: a bug of ours, never a client's error
    (clients' requests are checked first and answered with Kafka's error codes)."""


def check_transition(from_state: TxnState, to_state: TxnState) -> None:
    if from_state not in TRANSITIONS[to_state]:
        raise IllegalTransition(f"{STATE_NAMES[from_state]} -> {STATE_NAMES[to_state]}")
