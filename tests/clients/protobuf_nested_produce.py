"""Writes orders with nested data as a shop's order service does with
confluent-kafka's ProtobufSerializer: a repeated line-item message field, a
map<string, string> of attributes, a repeated string of tags; the schema
registered under `<topic>-value`, keyed by the order id (the Java-compatible
murmur2 partitioner picks the partition). No protoc and no generated _pb2
module: the file is built here as a FileDescriptorProto, and the message
class made from it at run time.

    protobuf_nested_produce.py BOOTSTRAP REGISTRY_URL TOPIC N

The file (package shop, proto3):

    message Order {
      message LineItem { string sku = 1; int32 qty = 2; double price = 3; optional string note = 4; }
      int64 id = 1;
      repeated LineItem items = 2;
      map<string, string> attrs = 3;
      repeated string tags = 4;
    }

Order i: the orders avro_nested_produce.py writes (items: i % 4 line items,
item j with sku "sku-<(i + j) % 7>", qty j + 1, price (i % 5 + j) + 0.25,
note "gift" when j is odd; attrs {"channel": "web" | "app"} for even i, none
for odd i; tags ["t<i % 3>"]).
"""

import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass

F = descriptor_pb2.FieldDescriptorProto


def field(message, name, number, type_, type_name=None, label=F.LABEL_OPTIONAL, proto3_optional=False):
    f = message.field.add(name=name, number=number, type=type_, label=label)
    if type_name is not None:
        f.type_name = type_name
    if proto3_optional:
        f.proto3_optional = True
        f.oneof_index = len(message.oneof_decl)
        message.oneof_decl.add(name=f"_{name}")


def order_class():
    fd = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3")
    order = fd.message_type.add(name="Order")
    item = order.nested_type.add(name="LineItem")
    field(item, "sku", 1, F.TYPE_STRING)
    field(item, "qty", 2, F.TYPE_INT32)
    field(item, "price", 3, F.TYPE_DOUBLE)
    field(item, "note", 4, F.TYPE_STRING, proto3_optional=True)
    entry = order.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    field(entry, "key", 1, F.TYPE_STRING)
    field(entry, "value", 2, F.TYPE_STRING)
    field(order, "id", 1, F.TYPE_INT64)
    field(order, "items", 2, F.TYPE_MESSAGE, ".shop.Order.LineItem", F.LABEL_REPEATED)
    field(order, "attrs", 3, F.TYPE_MESSAGE, ".shop.Order.AttrsEntry", F.LABEL_REPEATED)
    field(order, "tags", 4, F.TYPE_STRING, label=F.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def order(cls, i):
    o = cls(id=i, tags=[f"t{i % 3}"])
    for j in range(i % 4):
        item = o.items.add(sku=f"sku-{(i + j) % 7}", qty=j + 1, price=(i % 5 + j) + 0.25)
        if j % 2 == 1:
            item.note = "gift"
    if i % 2 == 0:
        o.attrs["channel"] = "web" if i % 4 == 0 else "app"
    return o


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    bootstrap, registry, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    cls = order_class()
    client = SchemaRegistryClient({"url": registry})
    serialize = ProtobufSerializer(cls, client, conf={"auto.register.schemas": True})
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"})
    ctx = SerializationContext(topic, MessageField.VALUE)
    for i in range(n):
        producer.produce(topic, key=str(i).encode(), value=serialize(order(cls, i), ctx), on_delivery=delivered)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(30) != 0:
        sys.exit("not every record was delivered")
    if failed:
        sys.exit(f"{len(failed)} records failed: {failed[0]}")


if __name__ == "__main__":
    main()
