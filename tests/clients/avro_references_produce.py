"""Writes orders whose schema references a shared type, as a team with a
common schema library does with confluent-kafka: the shared `Money`
record is registered under its own subject, the `Order` schema is
registered under `<topic>-value` with a schema reference to it (the
client's own `SchemaReference` support), and the AvroSerializer writes
with that registered schema.

Three versions of `Order` are written, interleaved across two partitions:
v1 names the quantity `units`; v2 renames it `quantity` with `aliases:
["units"]` (BACKWARD compatible); v3 adds `venue` with a default.

    avro_references_produce.py BOOTSTRAP REGISTRY_URL TOPIC N

Order i: id i, quantity i % 10 + 1, total {units: i, currency: "EUR"},
written with version i % 3 + 1 (venue "XLON" under v3), to partition i % 2.
"""

import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

MONEY = """{"type": "record", "name": "Money", "namespace": "shared", "fields": [
    {"name": "units", "type": "long"},
    {"name": "currency", "type": "string"}
]}"""
ORDERS = {
    1: """{"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"},
        {"name": "units", "type": "long"},
        {"name": "total", "type": "shared.Money"}
    ]}""",
    2: """{"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"},
        {"name": "quantity", "type": "long", "aliases": ["units"]},
        {"name": "total", "type": "shared.Money"}
    ]}""",
    3: """{"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"},
        {"name": "quantity", "type": "long", "aliases": ["units"]},
        {"name": "total", "type": "shared.Money"},
        {"name": "venue", "type": "string", "default": "XNAS"}
    ]}""",
}


def main():
    bootstrap, registry, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    client = SchemaRegistryClient({"url": registry})
    money_subject = f"{topic}-shared.Money"
    client.register_schema(money_subject, Schema(MONEY, "AVRO"))
    money_version = client.get_latest_version(money_subject).version
    reference = SchemaReference("shared.Money", money_subject, money_version)
    value_subject = f"{topic}-value"
    serializers = {}
    for version in (1, 2, 3):
        schema = Schema(ORDERS[version], "AVRO", [reference])
        client.register_schema(value_subject, schema)
        serializers[version] = AvroSerializer(
            client, schema, conf={"auto.register.schemas": False, "use.latest.version": False}
        )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    ctx = SerializationContext(topic, MessageField.VALUE)
    for i in range(n):
        version = i % 3 + 1
        order = {"id": i, "total": {"units": i, "currency": "EUR"}}
        quantity = i % 10 + 1
        if version == 1:
            order["units"] = quantity
        else:
            order["quantity"] = quantity
        if version == 3:
            order["venue"] = "XLON"
        producer.produce(topic, partition=i % 2, value=serializers[version](order, ctx))
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(30) != 0:
        sys.exit("not every record was delivered")


if __name__ == "__main__":
    main()
