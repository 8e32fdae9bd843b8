"""Set-up shared by the share-group tests on an in-process broker."""
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType


def queue_with_records(bootstrap: str, topic: str, group: str, count: int, batch_records: int = 10) -> None:
    """A one-partition topic holding records keyed 0..count-1 (log batches of `batch_records`),
    and a share group that starts at the earliest offset."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": batch_records})
    for i in range(count):
        p.produce(topic, key=b"%d" % i, value=b"%d" % i, partition=0)
    assert p.flush(30) == 0
