"""Copies a topic of the seed's JSON trades into Avro, record by record:
the same partition, the same key, the value written by confluent-kafka's
AvroSerializer (the schema registered under `<to>-value`), so the Avro
topic holds exactly the JSON topic's records, partitioned alike.

    avro_copy.py BOOTSTRAP REGISTRY_URL FROM TO

Run with the Python of tests/clients (confluent-kafka with its Avro
serializer): `$(bash tests/infra/tools.sh path python-clients)`.
"""

import json
import sys
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

SCHEMA = """{"type": "record", "name": "Trade", "namespace": "dev.sluice.bench", "fields": [
    {"name": "trader_id", "type": "string"},
    {"name": "symbol", "type": "string"},
    {"name": "price", "type": "double"},
    {"name": "quantity", "type": "long"},
    {"name": "trade_time", "type": {"type": "long", "logicalType": "timestamp-millis"}}
]}"""


def main():
    bootstrap, registry, source, target = sys.argv[1:5]
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry}), SCHEMA,
                               to_dict=lambda t, ctx: t, conf={"auto.register.schemas": True})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"avro-copy-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1000000})
    partitions = consumer.list_topics(source, timeout=10).topics[source].partitions
    assigned = [TopicPartition(source, p, 0) for p in partitions]
    left = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in assigned}
    left = {p: end for p, end in left.items() if end > 0}
    consumer.assign(assigned)
    ctx = SerializationContext(target, MessageField.VALUE)
    copied = 0
    while left:
        for msg in consumer.consume(10000, timeout=10):
            if msg.error():
                sys.exit(str(msg.error()))
            trade = json.loads(msg.value())
            # The Avro serializer takes timestamp-millis as epoch milliseconds
            # when given an int; the seed's are.
            producer.produce(target, partition=msg.partition(), key=msg.key(), value=serialize(trade, ctx),
                             timestamp=msg.timestamp()[1])
            copied += 1
            if msg.offset() + 1 >= left.get(msg.partition(), 0):
                left.pop(msg.partition(), None)
            if copied % 10000 == 0:
                producer.poll(0)
    if producer.flush(60) != 0:
        sys.exit("not every record was delivered")
    print(f"copied {copied} records into {target}")


if __name__ == "__main__":
    main()
