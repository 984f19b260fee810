"""Writes trades to a Kafka topic as confluent-kafka's AvroSerializer does
for any producer: the Confluent wire format, the schema registered under
`<topic>-value` in the Schema Registry. Trade i is the same as the Rust
tests compute (`sluice_e2e::formats::avro_trade`).

    avro_produce.py BOOTSTRAP REGISTRY_URL TOPIC v1|v2 FROM TO [avro-key]

The key is the symbol as a string (StringSerializer), or with `avro-key`
an Avro `TradeKey` record {symbol, venue_id} written by the AvroSerializer
too (its schema under `<topic>-key`), as producers that use Avro keys do.

v2 is v1 evolved compatibly: `venue` added (with a default), the optional
`trader_id` removed, `quantity` narrowed to an int (a reader's long reads it).
"""

import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer

SCHEMAS = {
    "v1": """{"type": "record", "name": "Trade", "namespace": "dev.sluice.test", "fields": [
        {"name": "trader_id", "type": ["null", "string"], "default": null},
        {"name": "symbol", "type": "string"},
        {"name": "price", "type": "double"},
        {"name": "quantity", "type": "long"},
        {"name": "trade_time", "type": {"type": "long", "logicalType": "timestamp-millis"}}
    ]}""",
    "v2": """{"type": "record", "name": "Trade", "namespace": "dev.sluice.test", "fields": [
        {"name": "venue", "type": "string", "default": "XNAS"},
        {"name": "symbol", "type": "string"},
        {"name": "price", "type": "double"},
        {"name": "quantity", "type": "int"},
        {"name": "trade_time", "type": {"type": "long", "logicalType": "timestamp-millis"}}
    ]}""",
}
SYMBOLS = ["AAPL", "MSFT", "GOOG", "AMZN", "NVDA"]
KEY_SCHEMA = """{"type": "record", "name": "TradeKey", "namespace": "dev.sluice.test", "fields": [
    {"name": "symbol", "type": "string"},
    {"name": "venue_id", "type": "int"}
]}"""


def trade(i, version):
    t = {
        "symbol": SYMBOLS[i % len(SYMBOLS)],
        "price": 100.0 + i % 7,
        "quantity": i % 100 + 1,
        "trade_time": 1_700_000_000_000 + i * 1000,
    }
    if version == "v1":
        t["trader_id"] = None if i % 3 == 0 else f"T{i % 13}"
    else:
        t["venue"] = "XNYS"
    return t


def main():
    bootstrap, registry, topic, version, start, end = sys.argv[1:7]
    client = SchemaRegistryClient({"url": registry})
    serialize = AvroSerializer(client, SCHEMAS[version], conf={"auto.register.schemas": True})
    avro_key = sys.argv[7:] == ["avro-key"]
    if avro_key:
        key_serializer = AvroSerializer(client, KEY_SCHEMA, conf={"auto.register.schemas": True})
        key_ctx = SerializationContext(topic, MessageField.KEY)
        key = lambda t: key_serializer({"symbol": t["symbol"], "venue_id": 7}, key_ctx)  # noqa: E731
    else:
        strings = StringSerializer()
        key = lambda t: strings(t["symbol"])  # noqa: E731
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    ctx = SerializationContext(topic, MessageField.VALUE)
    for i in range(int(start), int(end)):
        t = trade(i, version)
        producer.produce(topic, key=key(t), value=serialize(t, ctx))
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(30) != 0:
        sys.exit("not every record was delivered")


if __name__ == "__main__":
    main()
