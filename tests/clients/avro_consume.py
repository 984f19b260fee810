"""Reads a topic to its end with confluent-kafka's AvroDeserializer (the
writer schema fetched from the Schema Registry by the id each value
carries) and prints one JSON line per record: {"key": ..., "value": ...}.
A key in the Confluent wire format (a zero byte first) is deserialized the
same way, any other is printed as text.

    avro_consume.py BOOTSTRAP REGISTRY_URL TOPIC
"""

import json
import sys
import uuid

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext


def main():
    bootstrap, registry, topic = sys.argv[1:4]
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": registry}))
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"avro-consume-{uuid.uuid4()}",
        "enable.auto.commit": False,
    })
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = [TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions]
    ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in partitions}
    consumer.assign(partitions)
    left = {p: end for p, end in ends.items() if end > 0}
    ctx = SerializationContext(topic, MessageField.VALUE)
    key_ctx = SerializationContext(topic, MessageField.KEY)
    while left:
        msg = consumer.poll(10)
        if msg is None:
            sys.exit(f"timed out with {left} left")
        if msg.error():
            sys.exit(str(msg.error()))
        value = deserialize(msg.value(), ctx) if msg.value() is not None else None
        key = msg.key()
        if key is not None:
            key = deserialize(key, key_ctx) if key[:1] == b"\x00" else key.decode()
        print(json.dumps({"key": key, "value": value}, default=str))
        if msg.offset() + 1 >= left.get(msg.partition(), 0):
            left.pop(msg.partition(), None)
    consumer.close()


if __name__ == "__main__":
    main()
