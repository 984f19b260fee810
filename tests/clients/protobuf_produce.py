"""Writes trades to a Kafka topic as confluent-kafka's ProtobufSerializer does
for any producer: the Confluent wire format (magic byte, schema id, message
indexes), the schema registered under `<topic>-value` in the Schema Registry.
No protoc and no generated _pb2 module: the .proto file is built here as a
FileDescriptorProto, and the message class made from it at run time.

    protobuf_produce.py BOOTSTRAP REGISTRY_URL TOPIC FROM TO

The file (package sluice.test, proto3) holds `Unused` before `Trade`, so that
Trade's message index is [1], not the [0] the wire format abbreviates:

    message Unused { string x = 1; }
    message Trade {
      message Meta { int64 ts = 1; string venue = 2; }
      string symbol = 1; int64 quantity = 2; double price = 3;
      string trader = 4; bool buy = 5; Meta meta = 6;
    }

Trade i leaves `price` unset (proto3's default 0) where i % 10 == 3 and
`meta` unset where i % 10 == 7. The key is the symbol's UTF-8 bytes.
"""

import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass

SYMBOLS = ["AAPL", "MSFT", "GOOG", "AMZN", "NVDA"]

F = descriptor_pb2.FieldDescriptorProto


def field(message, name, number, type_, type_name=None):
    f = message.field.add(name=name, number=number, type=type_, label=F.LABEL_OPTIONAL)
    if type_name is not None:
        f.type_name = type_name


def trade_class():
    fd = descriptor_pb2.FileDescriptorProto(name="sluice/test/trade.proto", package="sluice.test", syntax="proto3")
    unused = fd.message_type.add(name="Unused")
    field(unused, "x", 1, F.TYPE_STRING)
    trade = fd.message_type.add(name="Trade")
    meta = trade.nested_type.add(name="Meta")
    field(meta, "ts", 1, F.TYPE_INT64)
    field(meta, "venue", 2, F.TYPE_STRING)
    field(trade, "symbol", 1, F.TYPE_STRING)
    field(trade, "quantity", 2, F.TYPE_INT64)
    field(trade, "price", 3, F.TYPE_DOUBLE)
    field(trade, "trader", 4, F.TYPE_STRING)
    field(trade, "buy", 5, F.TYPE_BOOL)
    field(trade, "meta", 6, F.TYPE_MESSAGE, ".sluice.test.Trade.Meta")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return GetMessageClass(pool.FindMessageTypeByName("sluice.test.Trade"))


def trade(cls, i):
    t = cls(
        symbol=SYMBOLS[i % len(SYMBOLS)],
        quantity=i % 100 + 1,
        trader=f"T{i % 13}",
        buy=i % 2 == 0,
    )
    if i % 10 != 3:
        t.price = 100 + (i % 7) * 0.5
    if i % 10 != 7:
        t.meta.ts = 1_700_000_000_000 + i * 1000
        t.meta.venue = "X"
    return t


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    bootstrap, registry, topic, start, end = sys.argv[1:6]
    cls = trade_class()
    client = SchemaRegistryClient({"url": registry})
    serialize = ProtobufSerializer(cls, client, conf={"auto.register.schemas": True})
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    ctx = SerializationContext(topic, MessageField.VALUE)
    for i in range(int(start), int(end)):
        t = trade(cls, i)
        producer.produce(topic, key=t.symbol.encode("utf-8"), value=serialize(t, ctx), on_delivery=delivered)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(30) != 0:
        sys.exit("not every record was delivered")
    if failed:
        sys.exit(f"{len(failed)} records failed: {failed[0]}")


if __name__ == "__main__":
    main()
