#!/usr/bin/env python3
"""Helpers for bench/e2e.sh that read Kafka from outside Sluice.

    tools.py topic BOOTSTRAP NAME PARTITIONS [key=value ...]   create a topic
    tools.py check BOOTSTRAP TOPIC --field F --expect N [--key-fields a,b]
        read every result, keep the last one per record key, and check that
        the sum of F over keys is N (how many input records the results
        account for) -- correctness of counts, never speed
    tools.py watch BOOTSTRAP OUTPUT FILE --id FIELD --seconds S
        reads OUTPUT read_committed as it is written; FILE gets "<id> <wall ms>" per result
    tools.py visible-latency BOOTSTRAP INPUT FILE --id FIELD
        latency as a consumer sees it: wall ms readable (from watch) - input record timestamp
    tools.py latency BOOTSTRAP INPUT OUTPUT --id FIELD
        join each result to its input record on FIELD and report the
        broker-side latency: output LogAppendTime - input record timestamp (LogAppendTime in bench/e2e.sh)
    tools.py delete BOOTSTRAP PREFIX       delete the topics whose names start with PREFIX
    tools.py quantiles METRICS_FILE NAME
        p50/p99 from a Prometheus histogram in a /metrics dump
    tools.py keys BOOTSTRAP TOPIC --start A --end B
        rows {"k": i, "v": 1} for i in A..B, as fast as the broker takes them
    tools.py updates BOOTSTRAP TOPIC --keys K --rate R --seconds S [--hot H] [--seed N]
        R rows/s of {"k": i, "v": 1}, i uniform over 0..K (or over the first H keys)
    tools.py side-input BOOTSTRAP TOPIC N
        Nexmark q13's side input: rows {"key": k, "value": "k"} for k in 0..N,
        keyed by k and partitioned as a Java producer would (murmur2)
"""

from __future__ import annotations

import argparse
import json
import sys

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def read_all(bootstrap: str, topic: str):
    """Every record of every partition of `topic`, from the beginning to the end seen now."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sluice-bench-reader", "enable.auto.commit": False})
    md = c.list_topics(topic, timeout=10)
    parts = sorted(md.topics[topic].partitions)
    ends = {}
    for p in parts:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        ends[p] = hi
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    remaining = {p for p in parts if ends[p] > 0}
    idle = 0
    while remaining:
        batch = c.consume(num_messages=10000, timeout=1.0)
        idle = 0 if batch else idle + 1
        if idle >= 30:
            raise SystemExit(f"{topic}: no progress for 30 s with partitions {sorted(remaining)} unfinished")
        for m in batch:
            if m.error():
                continue
            yield m
            if m.offset() + 1 >= ends[m.partition()]:
                remaining.discard(m.partition())
        # A transactional topic ends in commit markers, which are never
        # delivered: the position passing the end is the end.
        for tp in c.position([TopicPartition(topic, p) for p in remaining]):
            if tp.offset >= ends[tp.partition]:
                remaining.discard(tp.partition)
    c.close()


def cmd_watch(a):
    """Reads OUTPUT as it is written (read_committed, as an exactly-once
    consumer must) for SECONDS, writing each result's id and the wall time
    it became readable: what a consumer sees, transactions included."""
    import time

    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "sluice-bench-watch", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 5})
    md = c.list_topics(a.output, timeout=10)
    c.assign([TopicPartition(a.output, p, 0) for p in md.topics[a.output].partitions])
    end = time.time() + a.seconds
    with open(a.file, "w") as f:
        while time.time() < end:
            # consume() returns once it has num_messages or the timeout
            # passed: a short timeout stamps each result when it is readable.
            for m in c.consume(num_messages=10000, timeout=0.002):
                if not m.error():
                    f.write(f"{json.loads(m.value())[a.id]} {int(time.time() * 1000)}\n")
    c.close()


def cmd_visible_latency(a):
    created = input_times(a)
    lat = []
    with open(a.file) as f:
        for line in f:
            key, seen = line.split()
            start = created.get(int(key) if key.isdigit() else key)
            if start is not None:
                lat.append(int(seen) - start)
    print_quantiles(lat)


def cmd_topic(a):
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    config = dict(kv.split("=", 1) for kv in a.config)
    fut = admin.create_topics([NewTopic(a.name, num_partitions=a.partitions, replication_factor=1, config=config)])
    for f in fut.values():
        f.result()


def cmd_side_input(a):
    producer = Producer({"bootstrap.servers": a.bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    for k in range(a.n):
        producer.produce(a.topic, key=str(k), value=json.dumps({"key": k, "value": str(k)}))
        producer.poll(0)
    if producer.flush(60):
        sys.exit("side input: not every record was delivered")


def cmd_keys(a):
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1000000})
    for k in range(a.start, a.end):
        while True:
            try:
                producer.produce(a.topic, value=b'{"k":%d,"v":1}' % k)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        sys.exit("keys: not every record was delivered")


def cmd_updates(a):
    import random
    import time
    rng = random.Random(a.seed)
    space = a.hot or a.keys
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5})
    tick = 0.1
    per_tick = max(1, int(a.rate * tick))
    start = time.monotonic()
    sent = 0
    while sent < a.rate * a.seconds:
        for _ in range(per_tick):
            producer.produce(a.topic, value=b'{"k":%d,"v":1}' % rng.randrange(space))
        sent += per_tick
        producer.poll(0)
        behind = start + sent / a.rate - time.monotonic()
        if behind > 0:
            time.sleep(behind)
    if producer.flush(60):
        sys.exit("updates: not every record was delivered")
    print(sent)


def cmd_delete(a):
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(a.prefix)]
    for f in admin.delete_topics(names).values() if names else []:
        f.result()
    print(f"deleted {len(names)} topic(s) starting with {a.prefix}")


def cmd_check(a):
    last = {}
    rows = 0
    for m in read_all(a.bootstrap, a.topic):
        rows += 1
        last[m.key()] = json.loads(m.value())
    total = sum(v[a.field] for v in last.values())
    ok = total == a.expect
    print(f"{a.topic}: {rows} results, {len(last)} keys, sum({a.field}) = {total}, expected {a.expect}: {'ok' if ok else 'WRONG'}")
    sys.exit(0 if ok else 1)


def input_times(a):
    """Each input record's id → its timestamp (the broker's append time in the benchmarks)."""
    return {json.loads(m.value())[a.id]: m.timestamp()[1] for m in read_all(a.bootstrap, a.input)}


def print_quantiles(lat):
    lat.sort()
    if not lat:
        print(json.dumps({"records": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}))
        return
    q = lambda x: lat[min(len(lat) - 1, int(x * len(lat)))]
    print(json.dumps({"records": len(lat), "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": lat[-1]}))


def cmd_latency(a):
    created = input_times(a)
    lat = []
    for m in read_all(a.bootstrap, a.output):
        kind, appended = m.timestamp()
        start = created.get(json.loads(m.value())[a.id])
        if start is not None:
            lat.append(appended - start)
    if not lat:
        print("no results")
        sys.exit(1)
    print_quantiles(lat)


def cmd_quantiles(a):
    buckets = {}
    with open(a.file) as f:
        for line in f:
            if not line.startswith(a.name + "_bucket{"):
                continue
            labels, value = line.rsplit(" ", 1)
            le = labels.split('le="')[1].split('"')[0]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0) + float(value)
    if not buckets:
        print(json.dumps({"p50_ms": None, "p99_ms": None}))
        return
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds[-1] == float("inf") else max(buckets.values())

    def quantile(q):
        rank = q * total
        for b in bounds:
            if buckets[b] >= rank:
                return b * 1000
        return None

    print(json.dumps({"count": total, "p50_ms": quantile(0.5), "p99_ms": quantile(0.99)}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("topic")
    t.add_argument("bootstrap")
    t.add_argument("name")
    t.add_argument("partitions", type=int)
    t.add_argument("config", nargs="*")
    c = sub.add_parser("check")
    c.add_argument("bootstrap")
    c.add_argument("topic")
    c.add_argument("--field", required=True)
    c.add_argument("--expect", type=int, required=True)
    l = sub.add_parser("latency")
    l.add_argument("bootstrap")
    l.add_argument("input")
    l.add_argument("output")
    l.add_argument("--id", required=True)
    w = sub.add_parser("watch")
    w.add_argument("bootstrap")
    w.add_argument("output")
    w.add_argument("file")
    w.add_argument("--id", required=True)
    w.add_argument("--seconds", type=float, required=True)
    v = sub.add_parser("visible-latency")
    v.add_argument("bootstrap")
    v.add_argument("input")
    v.add_argument("file")
    v.add_argument("--id", required=True)
    d = sub.add_parser("delete")
    d.add_argument("bootstrap")
    d.add_argument("prefix")
    q = sub.add_parser("quantiles")
    q.add_argument("file")
    q.add_argument("name")
    si = sub.add_parser("side-input")
    si.add_argument("bootstrap")
    si.add_argument("topic")
    si.add_argument("n", type=int)
    k = sub.add_parser("keys")
    k.add_argument("bootstrap")
    k.add_argument("topic")
    k.add_argument("--start", type=int, required=True)
    k.add_argument("--end", type=int, required=True)
    u = sub.add_parser("updates")
    u.add_argument("bootstrap")
    u.add_argument("topic")
    u.add_argument("--keys", type=int, required=True)
    u.add_argument("--rate", type=int, required=True)
    u.add_argument("--seconds", type=float, required=True)
    u.add_argument("--hot", type=int, default=0)
    u.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    commands = {"topic": cmd_topic, "delete": cmd_delete, "check": cmd_check, "latency": cmd_latency,
                "quantiles": cmd_quantiles, "watch": cmd_watch, "visible-latency": cmd_visible_latency,
                "side-input": cmd_side_input, "keys": cmd_keys, "updates": cmd_updates}
    commands[a.cmd](a)


if __name__ == "__main__":
    main()
