"""Writes CSV values as a Python service would: each record one row
written by the standard library's `csv.writer` (RFC 4180 quoting only
where needed, `\\r\\n` line ends), keyed by the order's region, to
partition 0 in order.

    csv_produce.py BOOTSTRAP TOPIC < rows.jsonl

Each line of standard input is one record: `{"key": "eu", "row": [...]}`,
its fields as Python values (None is an empty field).
"""

import csv
import io
import json
import sys

from confluent_kafka import Producer


def main():
    bootstrap, topic = sys.argv[1:3]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for line in sys.stdin:
        if not line.strip():
            continue
        record = json.loads(line)
        text = io.StringIO()
        csv.writer(text).writerow(["" if f is None else f for f in record["row"]])
        producer.produce(topic, key=record["key"].encode(), value=text.getvalue().encode(), partition=0)
    producer.flush(30)


if __name__ == "__main__":
    main()
