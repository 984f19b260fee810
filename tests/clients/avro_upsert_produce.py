"""Writes an upsert (compacted-table) topic as a Java or Python producer
with Confluent's serializers does: each key a `long` written by
confluent-kafka's AvroSerializer (its schema under `<topic>-key`), each
value an Avro record (under `<topic>-value`), and a deletion as a
tombstone — the key with a null value.

    avro_upsert_produce.py BOOTSTRAP REGISTRY_URL TOPIC < events.jsonl

Each line of standard input is one record:
`{"key": 1, "value": {...} | null, "ts": 1000}` (`ts` the record's
CreateTime, in ms). Records go to partition 0 in order.
"""

import json
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

VALUE_SCHEMA = """{"type": "record", "name": "Customer", "namespace": "dev.sluice.test", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": null},
    {"name": "v", "type": "long"},
    {"name": "updated", "type": {"type": "long", "logicalType": "timestamp-millis"}}
]}"""


def main():
    bootstrap, registry, topic = sys.argv[1:4]
    client = SchemaRegistryClient({"url": registry})
    keys = AvroSerializer(client, '"long"', conf={"auto.register.schemas": True})
    values = AvroSerializer(client, VALUE_SCHEMA, conf={"auto.register.schemas": True})
    key_ctx = SerializationContext(topic, MessageField.KEY)
    value_ctx = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for line in sys.stdin:
        if not line.strip():
            continue
        event = json.loads(line)
        value = event["value"]
        producer.produce(
            topic,
            partition=0,
            key=keys(event["key"], key_ctx),
            value=None if value is None else values(value, value_ctx),
            timestamp=event["ts"],
        )
    if producer.flush(30) != 0:
        sys.exit("not every record was delivered")


if __name__ == "__main__":
    main()
