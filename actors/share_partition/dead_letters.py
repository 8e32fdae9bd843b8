"""What a share-partition leader writes to its group's dead-letter topic (KIP-1191), pure: no Ray,
no I/O, no clock (the shell passes ``now_ms`` and the original records it read from the log).

One DLQ record per Archiving record. Its headers name where it came from and why, as Apache Kafka
4.4 writes them (measured against it: tests/kafka/test_clients.py), in Kafka's order:

    __dlq.errors.topic           the original topic
    __dlq.errors.partition       its partition
    __dlq.errors.offset          the record's offset
    __dlq.errors.group           the share group
    __dlq.errors.delivery.count  delivery attempts it had
    __dlq.errors.message         "Offset rejected by client." (a consumer rejected it) or "Offset delivery
                                 count exceeded the threshold." (its last attempt was released, timed out
                                 or its member left)

all UTF-8 text. With ``errors.deadletterqueue.copy.record.enable=false`` (the default) the DLQ
record carries the headers only (null key and value); with true, also the original's key, value
and headers (the original headers first) and its timestamp. An original the log no longer has
(compacted away, a gap) gets the coordinates-only record.

Also the DLQ topic naming rules (Kafka's legal topic names, the broker's
``errors.deadletterqueue.topic.name.prefix``) and the topic config that lets a topic be one.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from actors.share_partition.core import DeadLetter
from actors.topic_names import topic_name_error as legal_name_error

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
# why a record was dead-lettered (core.REASON_*) -> the __dlq.errors.message Kafka 4.4 writes
MESSAGES = {"REJECT": "Offset rejected by client.",
            "DELIVERY_COUNT_LIMIT": "Offset delivery count exceeded the threshold."}

TOPIC_NAME_CONFIG = "errors.deadletterqueue.topic.name"            # group config, "" = no DLQ
COPY_RECORD_CONFIG = "errors.deadletterqueue.copy.record.enable"   # group config, false
AUTO_CREATE_CONFIG = "errors.deadletterqueue.auto.create.topics.enable"  # broker config, false
PREFIX_CONFIG = "errors.deadletterqueue.topic.name.prefix"         # broker config, "dlq."
GROUP_ENABLE_CONFIG = "errors.deadletterqueue.group.enable"        # topic config a DLQ topic needs (true)


def topic_name_error(name: str, prefix: str) -> str | None:
    """Why ``name`` cannot be a group's DLQ topic, or None if it can (empty: no DLQ). Kafka's legal
    topic names (not '.' or '..', at most 249 of [a-zA-Z0-9._-]), starting with the broker's prefix,
    never an internal topic (those start with '__')."""
    if not name:
        return None
    if legal_name_error(name) is not None:
        return f"{name!r} is not a legal topic name (at most 249 of a-z, A-Z, 0-9, '.', '_', '-')"
    if name.startswith("__"):
        return f"{name!r} is an internal topic name"
    if prefix and not name.startswith(prefix):
        return f"the dead-letter topic name must start with {PREFIX_CONFIG} ({prefix!r}), not {name!r}"
    return None


def coordinate_headers(group_id: str, topic: str, partition: int, offset: int, delivery_count: int,
                       reason: str) -> list[tuple[str, bytes]]:
    return [(HEADER_TOPIC, topic.encode()), (HEADER_PARTITION, str(partition).encode()),
            (HEADER_OFFSET, str(offset).encode()), (HEADER_GROUP, group_id.encode()),
            (HEADER_DELIVERY_COUNT, str(delivery_count).encode()), (HEADER_MESSAGE, MESSAGES[reason].encode())]


def dead_letter_records(group_id: str, topic: str, partition: int, letters: Iterable[DeadLetter], *,
                        copy_record: bool, originals: Mapping[int, object] | None = None,
                        now_ms: int) -> list[tuple]:
    """The DLQ records, as (key, value, headers, timestamp_ms) tuples for
    protocol.record_batch.build_batch, one per offset of ``letters`` in offset order.
    ``originals``: offset -> protocol.record_batch.Record, read from the log when ``copy_record``."""
    out: list[tuple] = []
    for letter in letters:
        for offset in range(letter.first_offset, letter.last_offset + 1):
            headers = coordinate_headers(group_id, topic, partition, offset, letter.delivery_count, letter.reason)
            original = originals.get(offset) if copy_record and originals is not None else None
            if original is None:
                out.append((None, None, headers, now_ms))
            else:
                out.append((original.key, original.value, list(original.headers) + headers, original.timestamp_ms))
    return out
