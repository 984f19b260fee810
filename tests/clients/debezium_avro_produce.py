"""Writes Debezium change events to a Kafka topic as Debezium's Avro
converter does: key and value in the Confluent wire format through
confluent-kafka's AvroSerializer, the key schema (Debezium's `Key` record)
registered under `<topic>-key` and the `Envelope` under `<topic>-value`.

    debezium_avro_produce.py BOOTSTRAP REGISTRY_URL TOPIC < events.jsonl

Each input line is `{"key": {"id": N}, "value": EVENT}` where EVENT is the
envelope as a dict (`before`, `after`, `source`, `op`, `ts_ms`) or null for
Debezium's tombstone after a delete. The table is `customers (id bigint,
name text)`; the envelope is Debezium 2.x's, with `transaction` (null).
"""

import json
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

KEY = """{"type": "record", "name": "Key", "namespace": "shop.public.customers",
  "fields": [{"name": "id", "type": "long"}], "connect.name": "shop.public.customers.Key"}"""
VALUE = """{"type": "record", "name": "Envelope", "namespace": "shop.public.customers", "fields": [
  {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": null}]}], "default": null},
  {"name": "after", "type": ["null", "Value"], "default": null},
  {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
    "fields": [
      {"name": "version", "type": "string"},
      {"name": "connector", "type": "string"},
      {"name": "name", "type": "string"},
      {"name": "ts_ms", "type": "long"},
      {"name": "snapshot", "type": [{"type": "string", "connect.default": "false"}, "null"], "default": "false"},
      {"name": "db", "type": "string"},
      {"name": "schema", "type": "string"},
      {"name": "table", "type": "string"},
      {"name": "txId", "type": ["null", "long"], "default": null},
      {"name": "lsn", "type": ["null", "long"], "default": null}]}},
  {"name": "op", "type": "string"},
  {"name": "ts_ms", "type": ["null", "long"], "default": null},
  {"name": "transaction", "type": ["null", {"type": "record", "name": "block", "namespace": "event", "fields": [
    {"name": "id", "type": "string"},
    {"name": "total_order", "type": "long"},
    {"name": "data_collection_order", "type": "long"}]}], "default": null}
]}"""


def main():
    bootstrap, registry, topic = sys.argv[1:4]
    client = SchemaRegistryClient({"url": registry})
    key_serializer = AvroSerializer(client, KEY, conf={"auto.register.schemas": True})
    value_serializer = AvroSerializer(client, VALUE, conf={"auto.register.schemas": True})
    producer = Producer({"bootstrap.servers": bootstrap})
    key_ctx = SerializationContext(topic, MessageField.KEY)
    value_ctx = SerializationContext(topic, MessageField.VALUE)
    for line in sys.stdin:
        event = json.loads(line)
        value = event["value"]
        if value is not None:
            source = value["source"]
            value["source"] = {
                "version": "2.7.0.Final", "connector": "postgresql", "name": "shop", "ts_ms": source["ts_ms"],
                "snapshot": "true" if value["op"] == "r" else "false", "db": source["db"], "schema": "public",
                "table": source["table"], "txId": None, "lsn": None,
            }
            value["transaction"] = None
            value = value_serializer(value, value_ctx)
        producer.produce(topic, key=key_serializer(event["key"], key_ctx), value=value, partition=0)
    if producer.flush(30) != 0:
        sys.exit("not every record was delivered")


if __name__ == "__main__":
    main()
