"""DescribeProducers (KIP-664): the producers a partition leader's state knows (actors/partition/producer_state.py),
as `kafka-transactions.sh describe-producers` and admin clients' describeProducers show them.

As Kafka's KafkaApis answers it: per topic, an illegal name is INVALID_TOPIC_EXCEPTION, a topic the principal may
not READ is TOPIC_AUTHORIZATION_FAILED and an unknown one UNKNOWN_TOPIC_OR_PARTITION, for each partition asked;
otherwise each partition's leader answers (one data-path frame per partition, as ListOffsets'), and a partition this
broker does not lead is NOT_LEADER_OR_FOLLOWER (Kafka lets any replica answer; Kray's gateway reaches its node's
leaders only)."""
from __future__ import annotations

import asyncio
import logging
from typing import Iterable

from protocol.errors import ErrorCode
from protocol.messages import DescribeProducersResponse

from actors.topic_names import topic_name_error
from actors.gateway.handlers.routing import partition_client
from actors.security.authorizer import AclOperation, ResourceType
from actors.partition.producer_state import ActiveProducer

log = logging.getLogger("kray.gateway")
PartitionResponse = DescribeProducersResponse.PartitionResponse


def producer_states(producers: Iterable[ActiveProducer]) -> list[DescribeProducersResponse.ProducerState]:
    """The response's ActiveProducers of a partition, one per producer its leader knows (Kafka's fields: -1 where a
    producer has no cached sequence, no marker's coordinator epoch or no open transaction)."""
    return [DescribeProducersResponse.ProducerState(
        producer_id=p.producer_id, producer_epoch=p.producer_epoch, last_sequence=p.last_sequence,
        last_timestamp=p.last_timestamp_ms, coordinator_epoch=p.coordinator_epoch,
        current_txn_start_offset=p.current_txn_start_offset) for p in producers]


def partition_response(index: int, error: int, producers: Iterable[ActiveProducer] = (),
                       message: str | None = None) -> PartitionResponse:
    return PartitionResponse(partition_index=index, error_code=int(error), error_message=message,
                             active_producers=producer_states(producers) if not error else [])


async def _one(client, response: PartitionResponse) -> None:
    try:
        error, producers = await client.describe_producers()
    except Exception as e:  # the leader moved or its host restarted: the client asks the new leader
        log.warning("describe_producers on a partition failed: %s", e)
        response.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return
    response.error_code = int(error)
    response.active_producers = producer_states(producers) if not error else []


async def handle_describe_producers(ctx, header, request, connection=None) -> DescribeProducersResponse:
    readable = ctx.access(connection).allowed(AclOperation.READ, ResourceType.TOPIC,
                                              (t.name for t in request.topics))
    jobs, topics = [], []
    for t in request.topics:
        topic = ctx.metadata.topics.get(t.name)
        invalid = topic_name_error(t.name or "")
        if invalid:
            topic_error, message = ErrorCode.INVALID_TOPIC_EXCEPTION, invalid
        elif t.name not in readable:
            topic_error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        elif topic is None:
            topic_error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        else:
            topic_error, message = ErrorCode.NONE, None
        partitions = []
        topics.append(DescribeProducersResponse.TopicResponse(name=t.name, partitions=partitions))
        for index in t.partition_indexes or ():
            if topic_error:
                partitions.append(partition_response(index, topic_error, message=message))
                continue
            client, error = partition_client(ctx, topic, index)
            response = partition_response(index, error)
            partitions.append(response)
            if client is not None:
                jobs.append(_one(client, response))
    await asyncio.gather(*jobs)
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
