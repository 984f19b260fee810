//! Nested data end to end, against the real broker and Schema Registry:
//! orders with an array of line-item records and a map of attributes,
//! written by confluent-kafka's `AvroSerializer` and, the same orders, by
//! its `ProtobufSerializer` (a repeated message field, a map field); the
//! job's columns derived from the registry subject, the line items
//! unnested; nested results read back by the clients' deserializers.

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use sluice_e2e::kafka;
use sluice_e2e::worker::{Worker, write_temp};
use sluice_e2e::{harness, unique_name};

const N: i64 = 2000;

/// A result row: order id, SKU, amount in cents, note, channel, items.
type Line = (i64, String, i64, Option<String>, Option<String>, i64);

/// The line items `avro_nested_produce.py` writes for order `i`: (sku,
/// qty, price in cents).
fn items_of(i: i64) -> Vec<(String, i64, i64)> {
    (0..i % 4).map(|j| (format!("sku-{}", (i + j) % 7), j + 1, (i % 5 + j) * 100 + 25)).collect()
}

/// How the orders are written: the source's format.
#[derive(Clone, Copy)]
enum Written {
    Avro,
    Protobuf,
}

impl Written {
    fn format(self) -> &'static str {
        match self {
            Self::Avro => "avro",
            Self::Protobuf => "protobuf",
        }
    }
}

/// A topic of the `N` orders, written by the Python client's serializer.
fn orders(written: Written) -> String {
    let topic = unique_name("nested-orders");
    kafka::create_topic(&topic, 2);
    let h = harness();
    let script = format!("tests/clients/{}_nested_produce.py", written.format());
    let produced = Command::new(&h.clients_python)
        .arg(h.repo.join(&script))
        .args([&h.bootstrap, &h.registry_url, &topic, &N.to_string()])
        .output()
        .expect("run the Python producer");
    assert!(produced.status.success(), "{script}: {}", String::from_utf8_lossy(&produced.stderr));
    topic
}

fn run(name: &str, sql: &str, topic: &str, out: &str, written: Written, sink_format: &str) {
    let h = harness();
    let manifest = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: |
    {sql}
  schemaRegistry: {{ url: "{registry}" }}
  sources:
    - name: orders
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: {source_format}
      schema:
        registry: {{ subject: {topic}-value }}
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
    format: {sink_format}
"#,
        registry = h.registry_url,
        bootstrap = h.bootstrap,
        source_format = written.format(),
    );
    let m = write_temp(&format!("{name}.yaml"), &manifest);
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    assert!(w.log().contains("dead-lettered: 0"), "{}", w.log());
}

fn cents(v: &serde_json::Value) -> i64 {
    (v.as_f64().unwrap_or_else(|| panic!("a number: {v}")) * 100.0).round() as i64
}

/// Every line item of every order, exactly once, with its order's id and
/// amount; orders without items give no row.
#[test]
fn line_items_written_by_the_avro_serializer_unnest_exactly() {
    line_items_unnest_exactly(Written::Avro);
}

/// The same orders written by the `ProtobufSerializer`.
#[test]
fn line_items_written_by_the_protobuf_serializer_unnest_exactly() {
    line_items_unnest_exactly(Written::Protobuf);
}

fn line_items_unnest_exactly(written: Written) {
    let (topic, out) = (orders(written), unique_name("nested-lines"));
    kafka::create_topic(&out, 1);
    run(
        &unique_name("nested-lines"),
        "SELECT o.id, i.sku, i.qty * i.price AS amount, i.note, o.attrs['channel'] AS channel, \
         CARDINALITY(o.items) AS n FROM orders AS o CROSS JOIN UNNEST(o.items) AS i",
        &topic,
        &out,
        written,
        "json",
    );
    let mut expected: Vec<Line> = Vec::new();
    for i in 0..N {
        let channel = channel_of(i).map(str::to_owned);
        for (j, (sku, qty, price)) in items_of(i).into_iter().enumerate() {
            let note = (j % 2 == 1).then(|| "gift".to_owned());
            expected.push((i, sku, qty * price, note, channel.clone(), i % 4));
        }
    }
    let mut got: Vec<Line> = kafka::consume_all(&out, Duration::from_secs(60))
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
            (
                v["id"].as_i64().unwrap(),
                v["sku"].as_str().unwrap().to_owned(),
                cents(&v["amount"]),
                v["note"].as_str().map(str::to_owned),
                v["channel"].as_str().map(str::to_owned),
                v["n"].as_i64().unwrap(),
            )
        })
        .collect();
    expected.sort();
    got.sort();
    assert_eq!(got.len(), expected.len());
    assert_eq!(got, expected);
}

/// A per-SKU total over the unnested line items: the items cross a
/// repartition topic keyed by SKU (their nested order with them).
#[test]
fn a_total_per_sku_over_unnested_line_items_is_exact() {
    total_per_sku_is_exact(Written::Avro);
}

#[test]
fn a_total_per_sku_over_protobuf_line_items_is_exact() {
    total_per_sku_is_exact(Written::Protobuf);
}

fn total_per_sku_is_exact(written: Written) {
    let (topic, out) = (orders(written), unique_name("nested-skus"));
    kafka::create_topic(&out, 1);
    run(
        &unique_name("nested-skus"),
        "SELECT i.sku, SUM(i.qty * i.price) AS total, COUNT(*) AS lines \
         FROM orders AS o CROSS JOIN UNNEST(o.items) AS i GROUP BY i.sku",
        &topic,
        &out,
        written,
        "json",
    );
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for i in 0..N {
        for (sku, qty, price) in items_of(i) {
            let e = expected.entry(sku).or_default();
            e.0 += qty * price;
            e.1 += 1;
        }
    }
    let mut got: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for r in kafka::consume_all(&out, Duration::from_secs(60)) {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        got.insert(v["sku"].as_str().unwrap().to_owned(), (cents(&v["total"]), v["lines"].as_i64().unwrap()));
    }
    assert_eq!(got, expected, "the last result per SKU is its total");
}

/// Nested results written as Avro (the writer schema derived from the
/// query's output: an array of line-item records, a map), read back by
/// confluent-kafka's `AvroDeserializer` with the schema the registry
/// serves for the id in each value: every order's items and attributes
/// as the producer wrote them.
#[test]
fn nested_results_written_as_avro_are_read_back_by_confluent_kafkas_deserializer() {
    let (topic, out) = (orders(Written::Avro), unique_name("nested-avro-out"));
    kafka::create_topic(&out, 1);
    let sql = "SELECT o.id, o.items, o.attrs FROM orders AS o";
    run(&unique_name("nested-avro-out"), sql, &topic, &out, Written::Avro, "avro");
    let h = harness();
    let read = Command::new(&h.clients_python)
        .arg(h.repo.join("tests/clients/avro_consume.py"))
        .args([&h.bootstrap, &h.registry_url, &out])
        .output()
        .expect("run the Python consumer");
    assert!(read.status.success(), "avro_consume.py: {}", String::from_utf8_lossy(&read.stderr));
    read_back_as_written(&read.stdout, |v| {
        let items = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|it| {
                let price: f64 = it["price"].as_str().unwrap().parse().unwrap();
                (
                    it["sku"].as_str().unwrap().to_owned(),
                    it["qty"].as_i64().unwrap(),
                    (price * 100.0).round() as i64,
                    it["note"].as_str().map(str::to_owned),
                )
            })
            .collect();
        (v["id"].as_i64().unwrap(), items)
    });
}

/// Protobuf orders in, nested results out as Protobuf (the writer schema
/// derived from the query's output: a repeated message field, a map
/// field), read back by confluent-kafka's `ProtobufDeserializer` with the
/// registered schema compiled by Google's `protoc`: every order's items
/// and attributes as the producer wrote them.
#[test]
fn nested_results_written_as_protobuf_are_read_back_by_confluent_kafkas_deserializer() {
    let (topic, out) = (orders(Written::Protobuf), unique_name("nested-proto-out"));
    kafka::create_topic(&out, 1);
    let sql = "SELECT o.id, o.items, o.attrs FROM orders AS o";
    run(&unique_name("nested-proto-out"), sql, &topic, &out, Written::Protobuf, "protobuf");
    let h = harness();
    let read = Command::new(&h.clients_python)
        .arg(h.repo.join("tests/clients/protobuf_consume.py"))
        .args([&h.bootstrap, &h.registry_url, &out])
        .output()
        .expect("run the Python consumer");
    assert!(read.status.success(), "protobuf_consume.py: {}", String::from_utf8_lossy(&read.stderr));
    // Protobuf's JSON mapping: an int64 as a string, a field left out
    // (NULL, an empty repeated field or map) missing.
    let int = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse::<i64>().ok()).unwrap_or_else(|| panic!("{v}"));
    read_back_as_written(&read.stdout, |v| {
        let items = v["items"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|it| {
                (
                    it["sku"].as_str().unwrap().to_owned(),
                    int(&it["qty"]),
                    cents(&it["price"]),
                    it["note"].as_str().map(str::to_owned),
                )
            })
            .collect();
        (int(&v["id"]), items)
    });
}

/// An item as a result row holds it: SKU, quantity, price in cents, note.
type Item = (String, i64, i64, Option<String>);

/// Order `i`'s channel attribute, as the producers write it.
fn channel_of(i: i64) -> Option<&'static str> {
    (i % 2 == 0).then_some(if i % 4 == 0 { "web" } else { "app" })
}

/// Checks a consumer's JSON lines (`{"value": …}`), one per order, each
/// read by `read` into its id and items: every order's items and channel
/// as the producer wrote them, and every order once.
fn read_back_as_written(stdout: &[u8], read: impl Fn(&serde_json::Value) -> (i64, Vec<Item>)) {
    let mut seen = 0;
    for line in std::str::from_utf8(stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let v = &v["value"];
        let (i, items) = read(v);
        let want: Vec<Item> = items_of(i)
            .into_iter()
            .enumerate()
            .map(|(j, (sku, qty, price))| (sku, qty, price, (j % 2 == 1).then(|| "gift".to_owned())))
            .collect();
        assert_eq!(items, want, "order {i}");
        assert_eq!(v["attrs"]["channel"].as_str(), channel_of(i), "order {i}: {v}");
        seen += 1;
    }
    assert_eq!(seen, N);
}
