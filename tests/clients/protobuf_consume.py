"""Reads a topic to its end with confluent-kafka's ProtobufDeserializer and
prints one JSON line per record: {"key": ..., "value": ...}.

The message classes come from the schemas the writer registered: each
schema id a record carries is fetched from the Schema Registry as .proto
text, compiled by Google's protoc (grpcio-tools, with the well-known
google/protobuf/*.proto it ships), and the file's first message made a
class at run time. A value or key in the Confluent wire format (a zero
byte first) is deserialized so; any other key is printed as text; a
tombstone is null. Messages print as protobuf's JSON mapping with the
.proto field names: a field left out (NULL) is missing, an int64 is a
string, a google.protobuf.Timestamp an RFC 3339 text.

    protobuf_consume.py BOOTSTRAP REGISTRY_URL TOPIC
"""

import json
import os
import subprocess
import sys
import tempfile
import uuid

import grpc_tools
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from google.protobuf import descriptor_pb2, descriptor_pool, json_format
from google.protobuf.message_factory import GetMessageClass


def compile_schema(text):
    """The first message of .proto `text`, compiled by protoc, as a class."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "registered.proto"), "w") as f:
            f.write(text)
        out = os.path.join(d, "set.pb")
        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{d}", f"-I{well_known}",
             "--include_imports", f"--descriptor_set_out={out}", "registered.proto"],
            check=True,
        )
        files = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            files.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in files.file:
        pool.Add(fd)
    registered = next(fd for fd in files.file if fd.name == "registered.proto")
    name = f"{registered.package}.{registered.message_type[0].name}".lstrip(".")
    return GetMessageClass(pool.FindMessageTypeByName(name))


def main():
    bootstrap, registry, topic = sys.argv[1:4]
    client = SchemaRegistryClient({"url": registry})
    deserializers = {}

    def read(data):
        schema_id = int.from_bytes(data[1:5], "big")
        if schema_id not in deserializers:
            schema = client.get_schema(schema_id)
            if schema.schema_type != "PROTOBUF":
                sys.exit(f"schema {schema_id} is {schema.schema_type}, not PROTOBUF")
            deserializers[schema_id] = ProtobufDeserializer(compile_schema(schema.schema_str))
        message = deserializers[schema_id](data, None)
        return json_format.MessageToDict(message, preserving_proto_field_name=True)

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"protobuf-consume-{uuid.uuid4()}",
        "enable.auto.commit": False,
    })
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = [TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions]
    ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in partitions}
    consumer.assign(partitions)
    left = {p: end for p, end in ends.items() if end > 0}
    while left:
        msg = consumer.poll(10)
        if msg is None:
            sys.exit(f"timed out with {left} left")
        if msg.error():
            sys.exit(str(msg.error()))
        value = read(msg.value()) if msg.value() is not None else None
        key = msg.key()
        if key is not None:
            key = read(key) if key[:1] == b"\x00" else key.decode()
        print(json.dumps({"key": key, "value": value}))
        if msg.offset() + 1 >= left.get(msg.partition(), 0):
            left.pop(msg.partition(), None)
    consumer.close()


if __name__ == "__main__":
    main()
