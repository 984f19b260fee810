"""Writes orders with nested data, as a shop's order service does with
confluent-kafka: an array of line-item records (one of them a nullable
note), a map of attributes (nullable), an array of tags; registered under
`<topic>-value` and written by the client's AvroSerializer, keyed by the
order id (the Java-compatible murmur2 partitioner picks the partition).

    avro_nested_produce.py BOOTSTRAP REGISTRY_URL TOPIC N

Order i: id i; items: i % 4 line items, item j with sku "sku-<(i + j) % 7>",
qty j + 1, price (i % 5 + j) + 0.25 as decimal(9,2), note "gift" when j is
odd; attrs {"channel": "web" | "app"} for even i, null for odd i; tags
["t<i % 3>"].
"""

import decimal
import sys

from confluent_kafka import SerializingProducer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import StringSerializer

ORDER = """{"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "items", "type": {"type": "array", "items": {
        "type": "record", "name": "LineItem", "fields": [
            {"name": "sku", "type": "string"},
            {"name": "qty", "type": "int"},
            {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {"name": "note", "type": ["null", "string"], "default": null}
        ]}}},
    {"name": "attrs", "type": ["null", {"type": "map", "values": "string"}], "default": null},
    {"name": "tags", "type": {"type": "array", "items": "string"}}
]}"""


def order(i):
    items = []
    for j in range(i % 4):
        items.append(
            {
                "sku": f"sku-{(i + j) % 7}",
                "qty": j + 1,
                "price": decimal.Decimal(i % 5 + j) + decimal.Decimal("0.25"),
                "note": "gift" if j % 2 == 1 else None,
            }
        )
    attrs = {"channel": "web" if i % 4 == 0 else "app"} if i % 2 == 0 else None
    return {"id": i, "items": items, "attrs": attrs, "tags": [f"t{i % 3}"]}


def main():
    bootstrap, registry, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    client = SchemaRegistryClient({"url": registry})
    serializer = AvroSerializer(client, Schema(ORDER, "AVRO"))
    producer = SerializingProducer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "partitioner": "murmur2_random",
            "key.serializer": StringSerializer(),
            "value.serializer": serializer,
        }
    )
    for i in range(n):
        producer.produce(topic, key=str(i), value=order(i))
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(30) != 0:
        sys.exit("not every record was delivered")


if __name__ == "__main__":
    main()
