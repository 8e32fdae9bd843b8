"""The transaction APIs a client sends: InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, TxnOffsetCommit, DescribeTransactions, ListTransactions; and Produce's check of transactional records:
with transaction version 2 (Produce v12+) the broker adds the partitions to the transaction itself
(`add_produced_partitions`), with version 1 it verifies them with the coordinator first (KIP-890 part 1,
`verify_produced_partitions`), as Kafka 4.4 does.

TxnOffsetCommit (sendOffsetsToTransaction) goes to the group's coordinator, as OffsetCommit does: it checks the
producer against the partition and the transaction's coordinator, the group's generation or member epoch, and keeps
the offsets pending until the transaction's marker reaches the group's `__consumer_offsets` partition
(actors/group_coordinator/offsets.py).

A transactional id's coordinator is the actor that follows the leadership of the `__transaction_state` partition the
id hashes to (created on first use); a broker that does not lead it answers NOT_COORDINATOR and the client finds
it again. The coordinator steps its core, appends, then answers (actors/transaction_coordinator/actor.py);
wire.py translates requests and the coordinator's responses. AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, a transaction's own
requests, reach it as TXN_COORDINATOR frames over the data path to its shard (no Ray call per transaction);
InitProducerId, DescribeTransactions and ListTransactions are Ray calls.

With an authorizer, as Kafka's KafkaApis: InitProducerId, AddPartitionsToTxn v0-3, AddOffsetsToTxn, EndTxn and
transactional Produce need WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); AddPartitionsToTxn
v0-3 needs WRITE on each topic (internal topics are never added by a client: TOPIC_AUTHORIZATION_FAILED) and any
failed partition fails the whole transaction's request (the others OPERATION_NOT_ATTEMPTED); v4+ comes from brokers
(CLUSTER_ACTION); AddOffsetsToTxn needs READ on the group; TxnOffsetCommit WRITE on the transactional id, READ on
the group and READ on each topic (TOPIC_AUTHORIZATION_FAILED for that topic alone); DescribeTransactions DESCRIBE on each id (its topics the
principal may not describe are left out); ListTransactions lists the ids the principal may describe.
"""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode
from protocol.messages import (AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, DescribeTransactionsResponse,
                               EndTxnResponse, InitProducerIdResponse, ListTransactionsResponse, ProduceResponse,
                               TxnOffsetCommitResponse)
from protocol.record_batch import parse_header

from actors import internal_topics
from actors.gateway.connection import in_request_order
from actors.gateway.handlers.groups import NotCoordinator, _internal_partition, coordinator_error, group_coordinator
from actors.gateway.partition_client import PartitionNotHosted
from actors.security.authorizer import AclOperation, ResourceType
from actors.transaction_coordinator import wire
from actors.transaction_coordinator.core import AddPartitions, ListResult, TxnResponse
from actors.transaction_coordinator.states import STATE_NAMES

log = logging.getLogger("kray.gateway")
E = ErrorCode
TRANSACTIONAL_ID, TOPIC, GROUP = ResourceType.TRANSACTIONAL_ID, ResourceType.TOPIC, ResourceType.GROUP
WRITE, DESCRIBE, READ = AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.READ
BATCH_ATTRIBUTES_AT = 21     # a v2 record batch's int16 attributes: base offset 8, length 4, epoch 4, magic 1, crc 4
TRANSACTIONAL_FLAG = 0x10


async def _coordinator_partition(ctx, transactional_id: str):
    """(the `__transaction_state` partition of `transactional_id`, its coordinator)."""
    return await _internal_partition(
        ctx, internal_topics.TRANSACTION_STATE, lambda n: internal_topics.transaction_partition(transactional_id, n))


def _not_coordinator(ctx, transactional_id: str, leader: int) -> NotCoordinator:
    return NotCoordinator(f"broker {ctx.broker_id} is not the coordinator of transactional id {transactional_id!r} "
                          f"(broker {leader} is): find it with FindCoordinator")


async def transaction_coordinator(ctx, transactional_id: str):
    """The coordinator of `transactional_id` if this broker leads its `__transaction_state` partition; else
    NotCoordinator (the client asks FindCoordinator again)."""
    partition, actor = await _coordinator_partition(ctx, transactional_id)
    if ctx.fenced() or partition.leader != ctx.broker_id or actor is None:
        raise _not_coordinator(ctx, transactional_id, partition.leader)
    return actor


async def coordinator_operation(ctx, transactional_id: str, operation: str, args: list):
    """A per-transaction request to the coordinator of `transactional_id`, as a TXN_COORDINATOR frame to the shard
    that hosts it (actors/partition/wire.py): its answer (wire.py txn_answer). NotCoordinator where this broker
    does not lead the id's `__transaction_state` partition; the data path's failure (ConnectionError, TimeoutError)
    is the caller's to answer as COORDINATOR_NOT_AVAILABLE (a retried request is answered alike by the core)."""
    partition, _ = await _coordinator_partition(ctx, transactional_id)
    client = None  # (ctx.partition is None while this broker is fenced)
    if partition.leader == ctx.broker_id:
        client = ctx.partition(ctx.metadata.topics[internal_topics.TRANSACTION_STATE].topic_id, partition.index)
    if client is None:
        raise _not_coordinator(ctx, transactional_id, partition.leader)
    try:
        return await client.txn_coordinator(operation, args)
    except PartitionNotHosted:
        raise _not_coordinator(ctx, transactional_id, partition.leader) from None


# ---- InitProducerId ------------------------------------------------------------------------------------------------

async def handle_transactional_init_producer_id(ctx, header, request, connection=None) -> InitProducerIdResponse:
    version = header.api_version
    if not ctx.access(connection).allows(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return wire.init_producer_id_response(version, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not request.transactional_id:
        return wire.init_producer_id_response(version, E.INVALID_REQUEST)
    checked = wire.init_producer_id_input(request, -1)
    if isinstance(checked, ErrorCode):
        return wire.init_producer_id_response(version, checked)
    try:
        coordinator = await transaction_coordinator(ctx, checked.transactional_id)
        response = await coordinator.init_producer_id.remote(checked.transactional_id,
                                                             checked.transaction_timeout_ms, checked.producer_id,
                                                             checked.producer_epoch)
    except Exception as e:
        log.info("InitProducerId of %r: %s", request.transactional_id, e)
        return wire.init_producer_id_response(version, ErrorCode(coordinator_error(e)))
    return wire.init_producer_id_response(version, response)


# ---- AddPartitionsToTxn --------------------------------------------------------------------------------------------

def known_partition(ctx, topic: str, partition: int) -> bool:
    state = ctx.metadata.topics.get(topic)
    return state is not None and 0 <= partition < len(state.partitions)


async def handle_add_partitions_to_txn(ctx, header, request, connection=None) -> AddPartitionsToTxnResponse:
    version = header.api_version
    access = ctx.access(connection)
    if version >= 4 and not access.allows_cluster(AclOperation.CLUSTER_ACTION):  # only brokers send v4+
        return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED,
                                          results_by_transaction=[])
    inputs = wire.add_partitions_inputs(request, version)
    if any(tp for i in inputs for tp in i.partitions if not known_partition(ctx, *tp)):
        await ctx.catch_up_metadata()  # a topic created just now: never refuse on metadata older than the client's
    replies: list = [None] * len(inputs)
    by_coordinator: dict[int, list[int]] = {}
    for n, i in enumerate(inputs):
        if not i.transactional_id:
            replies[n] = {tp: E.INVALID_REQUEST for tp in i.partitions}
            continue
        if version < 4 and not access.allows(WRITE, TRANSACTIONAL_ID, i.transactional_id):
            replies[n] = {tp: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in i.partitions}
            continue
        topics = {t for t, _ in i.partitions}
        internal = {t for t in topics if getattr(ctx.metadata.topics.get(t), "internal", False)}
        writable = access.allowed(WRITE, TOPIC, topics - internal) if version < 4 else topics
        refused = {tp: E.TOPIC_AUTHORIZATION_FAILED if tp[0] not in writable else E.UNKNOWN_TOPIC_OR_PARTITION
                   for tp in i.partitions if tp[0] not in writable or not known_partition(ctx, *tp)}
        if refused:  # one failed partition fails the transaction's request: the rest are not attempted
            replies[n] = {tp: refused.get(tp, E.OPERATION_NOT_ATTEMPTED) for tp in i.partitions}
            continue
        index = internal_topics.transaction_partition(i.transactional_id, _transaction_state_partitions(ctx))
        by_coordinator.setdefault(index, []).append(n)

    async def ask(numbers: list[int]) -> None:
        try:
            answers = [wire.txn_response(a) for a in await coordinator_operation(
                ctx, inputs[numbers[0]].transactional_id, "add_partitions",
                [[i.transactional_id, i.producer_id, i.producer_epoch, [list(tp) for tp in i.partitions], i.verify_only,
                  i.transaction_version] for i in (inputs[n] for n in numbers)])]
        except Exception as e:
            error = ErrorCode(coordinator_error(e))
            answers = [{tp: error for tp in inputs[n].partitions} for n in numbers]
        for n, answer in zip(numbers, answers):
            replies[n] = answer
    await asyncio.gather(*(ask(numbers) for numbers in by_coordinator.values()))
    return wire.add_partitions_response(version, inputs, replies)


def _transaction_state_partitions(ctx) -> int:
    topic = ctx.metadata.topics.get(internal_topics.TRANSACTION_STATE)
    return len(topic.partitions) if topic is not None else int(
        ctx.config.get("transaction.state.log.num.partitions", 50))


# ---- AddOffsetsToTxn, EndTxn ---------------------------------------------------------------------------------------

async def handle_add_offsets_to_txn(ctx, header, request, connection=None) -> AddOffsetsToTxnResponse:
    version = header.api_version
    access = ctx.access(connection)
    if not access.allows(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return wire.add_offsets_response(version, TxnResponse(error=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not access.allows(READ, GROUP, request.group_id):
        return wire.add_offsets_response(version, TxnResponse(error=E.GROUP_AUTHORIZATION_FAILED))
    if not request.transactional_id:
        return wire.add_offsets_response(version, TxnResponse(error=E.INVALID_REQUEST))
    try:
        response = wire.txn_response(await coordinator_operation(ctx, request.transactional_id, "add_offsets", [
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id]))
    except Exception as e:
        response = TxnResponse(error=ErrorCode(coordinator_error(e)))
    return wire.add_offsets_response(version, response)


async def handle_end_txn(ctx, header, request, connection=None) -> EndTxnResponse:
    version = header.api_version
    if not ctx.access(connection).allows(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return wire.end_txn_response(version, TxnResponse(error=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not request.transactional_id:
        return wire.end_txn_response(version, TxnResponse(error=E.INVALID_REQUEST))
    try:
        end = wire.end_txn_input(request, version)
        response = wire.txn_response(await coordinator_operation(ctx, request.transactional_id, "end_txn", [
            end.transactional_id, end.producer_id, end.producer_epoch, end.committed, end.transaction_version]))
    except Exception as e:
        response = TxnResponse(error=ErrorCode(coordinator_error(e)))
    return wire.end_txn_response(version, response)


# ---- TxnOffsetCommit -----------------------------------------------------------------------------------------------

TXN_OFFSET_COMMIT_TOPIC_IDS = 6   # TxnOffsetCommit names topics by id from this version


async def handle_txn_offset_commit(ctx, header, request, connection=None) -> TxnOffsetCommitResponse:
    """As Kafka's handleTxnOffsetCommitRequest: WRITE on the transactional id, else every partition answers
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED; READ on the group, else GROUP_AUTHORIZATION_FAILED; per topic READ
    (TOPIC_AUTHORIZATION_FAILED) and existence (UNKNOWN_TOPIC_OR_PARTITION, by id UNKNOWN_TOPIC_ID); the rest go
    to the group's coordinator."""
    by_id = header.api_version >= TXN_OFFSET_COMMIT_TOPIC_IDS
    R = TxnOffsetCommitResponse
    answers = [R.TxnOffsetCommitResponseTopic(
        name=t.name if not by_id else "", topic_id=t.topic_id if by_id else None,
        partitions=[R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=0)
                    for p in t.partitions]) for t in request.topics]

    def everyone(error):
        for answer in answers:
            for slot in answer.partitions:
                slot.error_code = error
        return R(throttle_time_ms=0, topics=answers)
    access = ctx.access(connection)
    if not access.allows(WRITE, TRANSACTIONAL_ID, request.transactional_id or ""):
        return everyone(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not access.allows(READ, GROUP, request.group_id or ""):
        return everyone(E.GROUP_AUTHORIZATION_FAILED)
    if not request.transactional_id:
        return everyone(E.INVALID_REQUEST)
    if not request.group_id:
        return everyone(E.INVALID_GROUP_ID)

    def name_of(topic):
        if not by_id:
            return topic.name
        found = ctx.metadata.topic_by_id(topic.topic_id)
        return found.name if found is not None else None
    if any(not (name_of(t) and known_partition(ctx, name_of(t), p.partition_index))
           for t in request.topics for p in t.partitions):
        await ctx.catch_up_metadata()  # a topic created just now: never refuse on metadata older than the client's
    names = [name_of(t) for t in request.topics]
    readable = access.allowed(READ, TOPIC, (n for n in names if n is not None))
    wanted, slots = [], []
    for topic, answer, name in zip(request.topics, answers, names):
        for p, slot in zip(topic.partitions, answer.partitions):
            if name is None:
                slot.error_code = E.UNKNOWN_TOPIC_ID
            elif name not in readable:
                slot.error_code = E.TOPIC_AUTHORIZATION_FAILED
            elif not known_partition(ctx, name, p.partition_index):
                slot.error_code = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append((name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                               p.committed_metadata))
                slots.append(slot)
    if wanted:
        async with in_request_order(connection):  # a connection's commits in request order, as OffsetCommit's
            try:
                coordinator = await group_coordinator(ctx, request.group_id)
                errors = await coordinator.txn_commit_offsets.remote(
                    request.group_id, request.transactional_id, request.producer_id, request.producer_epoch,
                    request.member_id or "", request.group_instance_id, request.generation_id_or_member_epoch,
                    wanted, header.api_version)
            except Exception as e:
                log.info("TxnOffsetCommit of %r for group %r: %s", request.transactional_id, request.group_id, e)
                errors = [coordinator_error(e)] * len(wanted)
        for slot, error in zip(slots, errors):
            slot.error_code = error
    return R(throttle_time_ms=0, topics=answers)


# ---- DescribeTransactions, ListTransactions ------------------------------------------------------------------------

async def handle_describe_transactions(ctx, header, request, connection=None) -> DescribeTransactionsResponse:
    access = ctx.access(connection)

    async def describe(transactional_id: str):
        if not access.allows(DESCRIBE, TRANSACTIONAL_ID, transactional_id):
            return transactional_id, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        if not transactional_id:
            return transactional_id, E.INVALID_REQUEST, None
        try:
            coordinator = await transaction_coordinator(ctx, transactional_id)
            [result] = await coordinator.describe_transactions.remote([transactional_id])
        except Exception as e:
            return transactional_id, ErrorCode(coordinator_error(e)), None
        return result
    results = await asyncio.gather(*(describe(i) for i in request.transactional_ids))
    response = wire.describe_transactions_response(list(results))
    if access.enforced:  # topics the principal may not describe are left out, as Kafka does
        named = {t.topic for s in response.transaction_states for t in (s.topics or ())}
        allowed = access.allowed(DESCRIBE, TOPIC, named)
        for state in response.transaction_states:
            state.topics = [t for t in (state.topics or ()) if t.topic in allowed]
    return response


async def handle_list_transactions(ctx, header, request, connection=None) -> ListTransactionsResponse:
    """The transactions of the coordinators this broker leads (an admin client lists every broker's)."""
    topic = ctx.metadata.topics.get(internal_topics.TRANSACTION_STATE)
    actors = [a for (name, index), a in ctx.metadata.coordinators.items()
              if name == internal_topics.TRANSACTION_STATE and topic is not None and not ctx.fenced()
              and topic.partitions[index].leader == ctx.broker_id]
    states = list(request.state_filters or ())
    pattern = request.transactional_id_pattern if header.api_version >= 2 else None
    duration_ms = request.duration_filter if header.api_version >= 1 else -1
    try:
        results = await asyncio.gather(*(a.list_transactions.remote(states, list(request.producer_id_filters or ()),
                                                                    duration_ms, pattern) for a in actors))
    except Exception as e:
        log.warning("listing transactions failed: %s", e)
        results = [ListResult(ErrorCode(coordinator_error(e)), [], [])]
    error = next((r.error for r in results if r.error), E.NONE)
    unknown = sorted({s for r in results for s in r.unknown_state_filters}) or \
        [s for s in states if s not in STATE_NAMES.values()]
    listed = [t for r in results for t in r.transactions]
    allowed = ctx.access(connection).allowed(DESCRIBE, TRANSACTIONAL_ID, (t.transactional_id for t in listed))
    return wire.list_transactions_response(ListResult(error, [] if error else [
        t for t in listed if t.transactional_id in allowed], unknown))


# ---- Produce: transactional records --------------------------------------------------------------------------------

def _transactional(records) -> bool:
    """Whether a partition's records are a transactional batch (the first batch's attributes: Kafka takes one batch
    per partition from a v2 producer)."""
    if records is None or len(records) < BATCH_ATTRIBUTES_AT + 2:
        return False
    return bool(memoryview(records)[BATCH_ATTRIBUTES_AT + 1] & TRANSACTIONAL_FLAG)


# ---- transaction version 2: Produce v12+ adds its partitions -------------------------------------------------------

PRODUCE_ADDS_PARTITIONS = 12   # a transactional Produce from this version adds its partitions to the transaction
ADDED_REMEMBERED = 100_000     # (transactional id, producer id, epoch, partition) a gateway remembers as added
# what a Produce answers when its partition could not be added (Kafka's ReplicaManager: retriable coordinator errors
# become NOT_ENOUGH_REPLICAS, which every client retries without a metadata refresh; a fenced epoch is the
# producer's INVALID_PRODUCER_EPOCH)
_ADD_ERRORS = {E.CONCURRENT_TRANSACTIONS: E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_LOAD_IN_PROGRESS: E.NOT_ENOUGH_REPLICAS,
               E.COORDINATOR_NOT_AVAILABLE: E.NOT_ENOUGH_REPLICAS, E.NOT_COORDINATOR: E.NOT_ENOUGH_REPLICAS,
               E.PRODUCER_FENCED: E.INVALID_PRODUCER_EPOCH}


def _partitions_to_ask(batches: list[tuple[str, int, object]], known):
    """What a transactional Produce's batches need from the coordinator: (producer id, producer epoch, an answer per
    batch (NONE, or INVALID_PRODUCER_ID_MAPPING for a batch of another producer or epoch than the first's), the
    partitions `known(producer id, epoch, topic, partition)` does not cover -> the indexes of their batches)."""
    first = parse_header(batches[0][2], 0, whole=False)
    producer_id, producer_epoch = first.producer_id, first.producer_epoch
    out: list = [(E.NONE, None)] * len(batches)
    wanted: dict[tuple[str, int], list[int]] = {}
    for n, (topic, partition, records) in enumerate(batches):
        header = parse_header(records, 0, whole=False)
        if (header.producer_id, header.producer_epoch) != (producer_id, producer_epoch):
            out[n] = (E.INVALID_PRODUCER_ID_MAPPING, "a transactional produce carries one producer id and epoch")
        elif not known(producer_id, producer_epoch, topic, partition):
            wanted.setdefault((topic, partition), []).append(n)
    return producer_id, producer_epoch, out, wanted


async def add_produced_partitions(ctx, transactional_id: str, batches: list[tuple[str, int, object]],
                                  ) -> list[tuple[ErrorCode, str | None]]:
    """Transaction version 2 (Produce v12+): the partitions of a transactional Produce join the producer's
    transaction before anything is appended, as Kafka's broker adds them (AddPartitionsToTxn v5 to the
    coordinator): `batches` are (topic, partition, records); each gets (error, message), NONE where its records
    may be appended. A partition added for this producer id and epoch is remembered, so only a transaction's first
    batch per partition asks the coordinator (a new transaction has a new epoch)."""
    added = ctx.txn_partitions_added

    def known(producer_id, producer_epoch, topic, partition) -> bool:
        key = (transactional_id, producer_id, producer_epoch, topic, partition)
        if key in added:
            added.move_to_end(key)
            return True
        return False
    producer_id, producer_epoch, out, wanted = _partitions_to_ask(batches, known)
    if not wanted:
        return out
    try:
        errors = await _add_partitions(ctx, transactional_id, producer_id, producer_epoch, list(wanted))
    except Exception as e:
        error = ErrorCode(coordinator_error(e))
        log.info("adding %d partitions to the transaction of %r: %s", len(wanted), transactional_id, e)
        errors = {tp: error for tp in wanted}
    for tp, numbers in wanted.items():
        error = errors.get(tp, E.UNKNOWN_SERVER_ERROR)
        if error == E.NONE:
            added[(transactional_id, producer_id, producer_epoch, *tp)] = None
            while len(added) > ADDED_REMEMBERED:
                added.popitem(last=False)
            continue
        answer = _ADD_ERRORS.get(error, error)
        message = (f"the partition could not be added to the transaction of {transactional_id!r} "
                   f"({error.name}); retry" if answer == E.NOT_ENOUGH_REPLICAS else None)
        for n in numbers:
            out[n] = (answer, message)
    return out


PRODUCE_ABORTABLE_VERSION = 11   # Produce answers TRANSACTION_ABORTABLE from this version (older: INVALID_TXN_STATE)


async def verify_produced_partitions(ctx, transactional_id: str, version: int, batches: list[tuple[str, int, object]],
                                     ) -> list[tuple[ErrorCode, str | None]]:
    """Transaction version 1 (Produce v3-11): KIP-890 part 1, on as in Kafka 4.4 (transaction.partition.verification
    .enable): a transactional batch is appended only to a partition the coordinator has in the producer's open
    transaction. Each of `batches` (topic, partition, records) gets (error, message); a partition verified before
    (and no marker of the producer since: actors/gateway/txn_verifications.py) is not asked again. The caller
    checks `ctx.txn_verifications.is_verified` once more right before writing the batch."""
    verifications = ctx.txn_verifications
    producer_id, producer_epoch, out, wanted = _partitions_to_ask(
        batches, lambda pid, epoch, topic, partition: verifications.is_verified(transactional_id, pid, epoch, topic,
                                                                                partition))
    if not wanted:
        return out
    guards = {tp: verifications.guard(producer_id, *tp) for tp in wanted}
    try:
        errors = await _add_partitions(ctx, transactional_id, producer_id, producer_epoch, list(wanted), verify=True)
    except Exception as e:
        error = ErrorCode(coordinator_error(e))
        log.info("verifying %d partitions of the transaction of %r: %s", len(wanted), transactional_id, e)
        errors = {tp: error for tp in wanted}
    for tp, numbers in wanted.items():
        error = errors.get(tp, E.UNKNOWN_SERVER_ERROR)
        if error == E.NONE and not verifications.keep(transactional_id, producer_id, producer_epoch, *tp, guards[tp]):
            error = E.CONCURRENT_TRANSACTIONS  # a marker came meanwhile: the transaction ended
        if error == E.NONE:
            continue
        answer, message = _ADD_ERRORS.get(error, error), None
        if answer == E.TRANSACTION_ABORTABLE and version < PRODUCE_ABORTABLE_VERSION:
            answer = E.INVALID_TXN_STATE
        if answer in (E.TRANSACTION_ABORTABLE, E.INVALID_TXN_STATE):
            message = "Partition was not added to the transaction"
        elif answer == E.NOT_ENOUGH_REPLICAS:
            message = (f"Unable to verify the partition has been added to the transaction ({error.name}); retry")
        for n in numbers:
            out[n] = (answer, message)
    return out


async def _add_partitions(ctx, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]], verify: bool = False,
                          ) -> dict[tuple[str, int], ErrorCode]:
    """AddPartitionsToTxn at the id's coordinator, adding (transaction version 2) or, `verify`, only checking
    (KIP-890 part 1): over the data path where this broker leads it, else a call to its actor on the broker that
    does."""
    partition, actor = await _coordinator_partition(ctx, transactional_id)
    version = 0 if verify else 2
    if partition.leader == ctx.broker_id:
        [answer] = await coordinator_operation(ctx, transactional_id, "add_partitions", [
            [transactional_id, producer_id, producer_epoch, [list(tp) for tp in partitions], verify, version]])
        response = wire.txn_response(answer)
    elif actor is not None:
        [response] = await actor.add_partitions.remote([AddPartitions(transactional_id, producer_id, producer_epoch,
                                                                      tuple(partitions), verify, version)])
    else:
        raise _not_coordinator(ctx, transactional_id, partition.leader)
    return response.partition_errors or {tp: response.error for tp in partitions}


def transactional_produce(handle_produce):
    """Produce, with Kafka's check first: transactional records need a transactional id the principal may WRITE,
    else every partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended."""
    async def handle(ctx, header, request, connection=None) -> ProduceResponse:
        transactional = any(_transactional(p.records) for t in request.topic_data for p in t.partition_data)
        if transactional and (request.transactional_id is None or not ctx.access(connection).allows(
                WRITE, TRANSACTIONAL_ID, request.transactional_id)):
            R = ProduceResponse
            return R(throttle_time_ms=0, responses=[R.TopicProduceResponse(
                name=t.name, topic_id=t.topic_id, partition_responses=[R.PartitionProduceResponse(
                    index=p.index, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, base_offset=-1,
                    log_append_time_ms=-1, log_start_offset=-1) for p in t.partition_data])
                for t in request.topic_data])
        return await handle_produce(ctx, header, request, connection)
    return handle
