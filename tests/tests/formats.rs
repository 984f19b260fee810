//! Record formats against the real broker and Schema Registry (Apicurio,
//! Confluent-compatible API), with records written by a client nobody here
//! wrote: Python `confluent-kafka` and its `AvroSerializer`.

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::process::Command;
use std::str::FromStr;
use std::time::Duration;

use sluice_e2e::kafka::{self, Record};
use sluice_e2e::worker::{Worker, write_temp};
use sluice_e2e::{harness, unique_name};

const SYMBOLS: [&str; 5] = ["AAPL", "MSFT", "GOOG", "AMZN", "NVDA"];

/// Writes trades `from..to` with `tests/clients/avro_produce.py`, whose
/// trade `i` has symbol `SYMBOLS[i % 5]` and quantity `i % 100 + 1`.
fn produce_avro(topic: &str, version: &str, from: u64, to: u64) {
    produce_avro_keyed(topic, version, from, to, &[]);
}

/// [`produce_avro`], with the script's extra arguments (`avro-key`).
fn produce_avro_keyed(topic: &str, version: &str, from: u64, to: u64, extra: &[&str]) {
    let h = harness();
    let script = h.repo.join("tests/clients/avro_produce.py");
    let out = Command::new(&h.clients_python)
        .arg(script)
        .args([&h.bootstrap, &h.registry_url, topic, version, &from.to_string(), &to.to_string()])
        .args(extra)
        .output()
        .expect("run the Python producer");
    assert!(out.status.success(), "avro_produce.py failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// `(count, quantity)` per symbol of trades `range`, computed here.
fn expected(range: std::ops::Range<u64>) -> BTreeMap<String, (i64, i64)> {
    let mut m: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for i in range {
        let e = m.entry(SYMBOLS[(i % 5) as usize].to_owned()).or_default();
        e.0 += 1;
        e.1 += i64::try_from(i % 100 + 1).unwrap();
    }
    m
}

fn final_per_symbol(records: &[Record]) -> BTreeMap<String, (i64, i64)> {
    let mut out = BTreeMap::new();
    for r in records {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        out.insert(v["symbol"].as_str().unwrap().to_owned(), (v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap()));
    }
    out
}

/// An Avro topic read with the columns declared: 3,000 trades under one
/// writer schema, 3,000 under a compatible evolution of it (a field added
/// with a default, an optional one removed, a long narrowed to an int),
/// every total exact and not one dead letter for them; a record not in the
/// wire format and one naming a schema id the registry does not have go to
/// the dead-letter topic with their reason.
#[test]
fn an_avro_topic_reads_across_a_compatible_schema_change_and_bad_records_are_dead_letters() {
    let (topic, out, dlq) = (unique_name("avro-trades"), unique_name("avro-totals"), unique_name("avro-dlq"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    kafka::create_topic(&dlq, 1);
    produce_avro(&topic, "v1", 0, 3_000);
    let trace: &[(&str, Option<&[u8]>)] = &[("trace-id", Some(b"t-1")), ("empty", None)];
    kafka::produce_full(
        &topic,
        &[
            (Some(b"AAPL".as_slice()), b"{\"symbol\":\"AAPL\"}".as_slice(), 0, 1_700_000_000_000, trace),
            (Some(b"MSFT".as_slice()), [0u8, 0x7f, 0xff, 0xff, 0xf0, 2, 4].as_slice(), 1, 1_700_000_000_000, &[]),
        ],
    );
    produce_avro(&topic, "v2", 3_000, 6_000);
    let h = harness();
    let manifest = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: SELECT symbol, COUNT(*) AS n, SUM(quantity) AS qty FROM trades GROUP BY symbol
  schemaRegistry: {{ url: "{registry}" }}
  sources:
    - name: trades
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: avro
      schema:
        columns:
          - {{ name: trader_id, type: string }}
          - {{ name: symbol, type: string, required: true }}
          - {{ name: price, type: double }}
          - {{ name: quantity, type: bigint, required: true }}
          - {{ name: trade_time, type: timestamp }}
      partitionKey: [symbol]
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
  deadLetter:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {dlq} }}
"#,
        name = unique_name("avro"),
        registry = h.registry_url,
        bootstrap = h.bootstrap,
    );
    let m = write_temp("avro.yaml", &manifest);
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    assert!(w.log().contains("records in: 6002"), "{}", w.log());
    let got = final_per_symbol(&kafka::consume_all(&out, Duration::from_secs(60)));
    assert_eq!(got, expected(0..6_000), "every trade of both schema versions counted once");
    let mut dead = kafka::consume_all(&dlq, Duration::from_secs(30));
    dead.sort_by_key(|r| r.key.clone());
    let reasons: Vec<String> = dead.iter().map(|r| r.header("sluice.error.reason").unwrap_or_default()).collect();
    assert_eq!(reasons.len(), 2, "the two bad records only: {reasons:?}");
    assert!(reasons[0].contains("not in the Confluent wire format"), "{reasons:?}");
    assert!(reasons[1].contains("is not in the schema registry"), "{reasons:?}");
    // As they were: key, value and headers; and Kafka Connect's context
    // headers beside Sluice's, for tools that read Connect's dead letters.
    let json = &dead[0];
    assert_eq!(
        (json.key.as_deref(), json.value.as_slice()),
        (Some(b"AAPL".as_slice()), b"{\"symbol\":\"AAPL\"}".as_slice())
    );
    assert_eq!(json.header("trace-id").as_deref(), Some("t-1"), "{:?}", json.headers);
    assert!(json.headers.iter().any(|(k, _)| k == "empty"), "a null header is kept: {:?}", json.headers);
    assert_eq!(dead[1].key.as_deref(), Some(b"MSFT".as_slice()));
    for (r, partition) in dead.iter().zip(["0", "1"]) {
        let connect = |h: &str| r.header(&format!("__connect.errors.{h}")).unwrap_or_default();
        assert_eq!(connect("topic"), topic);
        assert_eq!(connect("stage"), "VALUE_CONVERTER");
        assert_eq!(connect("exception.message"), r.header("sluice.error.reason").unwrap());
        assert!(!connect("connector.name").is_empty() && !connect("task.id").is_empty(), "{:?}", r.headers);
        assert_eq!(connect("partition"), partition);
        assert_eq!(Some(connect("offset")), r.header("sluice.source.offset"));
    }
}

/// Keys written by confluent-kafka's AvroSerializer (a `TradeKey` record,
/// its schema under `<topic>-key`) read into key columns by field name
/// (`keyFormat: avro`, `keyFieldsPrefix: key_`): every trade's key
/// symbol equals its value's, and the totals grouped by the key's are
/// exact; a record whose key is not Avro is a dead letter saying so.
#[test]
fn avro_keys_are_read_into_key_columns_by_field_name() {
    let (topic, out, dlq) = (unique_name("avro-keyed"), unique_name("avro-keyed-out"), unique_name("avro-keyed-dlq"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    kafka::create_topic(&dlq, 1);
    produce_avro_keyed(&topic, "v1", 0, 1_000, &["avro-key"]);
    // A plain-text key beside an Avro value: written with a valid value of
    // the topic's schema, which only the key spoils.
    let first = kafka::consume_all(&topic, Duration::from_secs(30));
    let value = first.iter().find(|r| r.partition == 0).map(|r| r.value.clone()).unwrap();
    kafka::produce(&topic, &[(Some(b"AAPL".as_slice()), value.as_slice(), Some(0))]);
    let h = harness();
    let manifest = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: |
    SELECT key_symbol AS symbol, COUNT(*) AS n, SUM(quantity) AS qty, MIN(key_venue_id) AS venue
    FROM trades WHERE key_symbol = symbol GROUP BY key_symbol
  schemaRegistry: {{ url: "{registry}" }}
  sources:
    - name: trades
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: avro
      keyFormat: avro
      keyFieldsPrefix: key_
      schema:
        columns:
          - {{ name: key_symbol, type: string, required: true, metadata: key }}
          - {{ name: key_venue_id, type: bigint, metadata: key }}
          - {{ name: symbol, type: string, required: true }}
          - {{ name: quantity, type: bigint, required: true }}
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
  deadLetter:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {dlq} }}
"#,
        name = unique_name("avro-keyed"),
        registry = h.registry_url,
        bootstrap = h.bootstrap,
    );
    let m = write_temp("avro-keyed.yaml", &manifest);
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    let records = kafka::consume_all(&out, Duration::from_secs(60));
    assert_eq!(final_per_symbol(&records), expected(0..1_000), "every trade counted under its key's symbol");
    for r in &records {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        assert_eq!(v["venue"], 7, "the key's second field: {v}");
    }
    let dead = kafka::consume_all(&dlq, Duration::from_secs(30));
    let reasons: Vec<String> = dead.iter().map(|r| r.header("sluice.error.reason").unwrap_or_default()).collect();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].contains("the record's key") && reasons[0].contains("wire format"), "{reasons:?}");
}

/// A registry behind TLS and HTTP basic authentication (nginx in front of
/// Apicurio, as behind an ingress): with the password and the CA in
/// Secrets (here the folder the operator would mount them in), an Avro
/// source whose columns come from a subject and an Avro sink read and
/// register through it, every total exact. A wrong password is a clear
/// error naming the credentials, a CA the registry's certificate does not
/// chain to one naming the certificate — never a dead letter.
#[test]
fn a_registry_behind_tls_and_basic_auth_is_reached_with_the_secrets_credentials() {
    let h = harness();
    let (topic, out) = (unique_name("avro-tls"), unique_name("avro-tls-out"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    produce_avro(&topic, "v1", 0, 1_000);
    let secrets = std::env::temp_dir().join(unique_name("registry-secrets"));
    let write = |secret: &str, key: &str, value: &[u8]| {
        std::fs::create_dir_all(secrets.join(secret)).unwrap();
        std::fs::write(secrets.join(secret).join(key), value).unwrap();
    };
    let password = std::fs::read(h.registry_tls_dir.join("password")).unwrap();
    write("registry-user", "password", &password);
    write("registry-ca", "ca.crt", &std::fs::read(h.registry_tls_dir.join("ca.crt")).unwrap());
    write("wrong-user", "password", b"not-the-password\n");
    // Another CA: Kafka's, which did not sign the registry's certificate.
    let kafka_ca = std::path::PathBuf::from(std::env::var("SLUICE_KAFKA_TLS_DIR").unwrap()).join("ca.crt");
    write("other-ca", "ca.crt", &std::fs::read(kafka_ca).unwrap());
    let manifest = |password_secret: &str, ca_secret: &str| {
        format!(
            r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: SELECT symbol, COUNT(*) AS n, SUM(quantity) AS qty FROM trades GROUP BY symbol
  schemaRegistry:
    url: "{url}"
    authentication: {{ username: sluice, passwordSecret: {{ secretName: {password_secret}, key: password }} }}
    tls: {{ trustedCertificates: [ {{ secretName: {ca_secret}, certificate: ca.crt }} ] }}
  sources:
    - name: trades
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: avro
      schema: {{ registry: {{ subject: {topic}-value }} }}
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
    format: avro
"#,
            name = unique_name("avro-tls"),
            url = h.registry_secure_url,
            bootstrap = h.bootstrap,
        )
    };
    let secrets_dir = secrets.to_str().unwrap();
    let m = write_temp("avro-tls.yaml", &manifest("registry-user", "registry-ca"));
    let mut w =
        Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g"), "--secrets-dir", secrets_dir]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    let mut last: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for r in consume_avro(&out) {
        let v = &r["value"];
        last.insert(v["symbol"].as_str().unwrap().to_owned(), (v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap()));
    }
    assert_eq!(last, expected(0..1_000));
    for (password_secret, ca_secret, says) in
        [("wrong-user", "registry-ca", "refused the credentials"), ("registry-user", "other-ca", "certificate")]
    {
        let m = write_temp("avro-tls-bad.yaml", &manifest(password_secret, ca_secret));
        let out = Command::new(sluice_e2e::worker::worker_bin())
            .args(["validate", "-f", m.to_str().unwrap(), "--secrets-dir", secrets_dir])
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "{text}");
        assert!(text.contains(says), "want {says:?}: {text}");
        assert!(!text.contains("not-the-password"), "a password is never shown: {text}");
    }
}

/// A Protobuf topic written by confluent-kafka's `ProtobufSerializer`
/// (the schema registered as a serialized descriptor, the message at
/// index [1] of its file): fields by name, nested ones by path, proto3's
/// defaults for fields left out and NULL for an absent message — every
/// total equal to what is computed here; a record in another format is a
/// dead letter with its reason.
#[test]
fn a_protobuf_topic_reads_its_fields_by_name_and_path_with_protobufs_defaults() {
    let (topic, out, dlq) = (unique_name("pb-trades"), unique_name("pb-totals"), unique_name("pb-dlq"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    kafka::create_topic(&dlq, 1);
    let h = harness();
    let script = h.repo.join("tests/clients/protobuf_produce.py");
    let produced = Command::new(&h.clients_python)
        .arg(script)
        .args([&h.bootstrap, &h.registry_url, &topic, "0", "2000"])
        .output()
        .expect("run the Python producer");
    assert!(produced.status.success(), "protobuf_produce.py failed: {}", String::from_utf8_lossy(&produced.stderr));
    kafka::produce(&topic, &[(Some(b"AAPL".as_slice()), b"{\"symbol\":\"AAPL\"}".as_slice(), Some(0))]);
    let manifest = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: |
    SELECT symbol, COUNT(*) AS n, SUM(quantity) AS qty, SUM(price) AS value,
           COUNT("meta.venue") AS venues, MAX("meta.ts") AS last_ts, COUNT(*) FILTER (WHERE buy) AS buys
    FROM trades GROUP BY symbol
  schemaRegistry: {{ url: "{registry}" }}
  sources:
    - name: trades
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: protobuf
      schema:
        columns:
          - {{ name: symbol, type: string, required: true }}
          - {{ name: quantity, type: bigint, required: true }}
          - {{ name: price, type: double }}
          - {{ name: buy, type: boolean }}
          - {{ name: meta.ts, type: timestamp }}
          - {{ name: meta.venue, type: string }}
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
  deadLetter:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {dlq} }}
"#,
        name = unique_name("pb"),
        registry = h.registry_url,
        bootstrap = h.bootstrap,
    );
    let m = write_temp("pb.yaml", &manifest);
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    assert!(w.log().contains("records in: 2001"), "{}", w.log());
    // Computed here from the producer's rule for trade i.
    let mut expected: BTreeMap<String, (i64, i64, f64, i64, i64, i64)> = BTreeMap::new();
    for i in 0..2_000_i64 {
        let e = expected.entry(SYMBOLS[(i % 5) as usize].to_owned()).or_default();
        e.0 += 1;
        e.1 += i % 100 + 1;
        #[allow(clippy::cast_precision_loss)]
        let price = if i % 10 == 3 { 0.0 } else { 100.0 + (i % 7) as f64 * 0.5 };
        e.2 += price;
        if i % 10 != 7 {
            e.3 += 1;
            e.4 = e.4.max(1_700_000_000_000 + i * 1000);
        }
        e.5 += i64::from(i % 2 == 0);
    }
    let mut got = BTreeMap::new();
    for r in kafka::consume_all(&out, Duration::from_secs(60)) {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        let last = jiff::Timestamp::from_str(v["last_ts"].as_str().unwrap()).unwrap().as_millisecond();
        got.insert(
            v["symbol"].as_str().unwrap().to_owned(),
            (
                v["n"].as_i64().unwrap(),
                v["qty"].as_i64().unwrap(),
                v["value"].as_f64().unwrap(),
                v["venues"].as_i64().unwrap(),
                last,
                v["buys"].as_i64().unwrap(),
            ),
        );
    }
    assert_eq!(got, expected);
    let dead = kafka::consume_all(&dlq, Duration::from_secs(30));
    assert_eq!(dead.len(), 1, "the JSON record only");
    let reason = dead[0].header("sluice.error.reason").unwrap_or_default();
    assert!(reason.contains("protobuf: not in the Confluent wire format"), "{reason}");
}

/// A source whose columns come from the registry: `schema.registry`
/// names the subject the Python producer registered, and `sluice-worker
/// validate` and the run derive the same columns from it (nested and
/// logical types included) — a metadata column declared beside them; a
/// subject the registry does not have is refused naming it.
#[test]
fn an_avro_source_takes_its_columns_from_the_registry_subject() {
    let (topic, out) = (unique_name("avro-derived"), unique_name("avro-derived-out"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    produce_avro(&topic, "v1", 0, 2_000);
    let h = harness();
    let manifest = |subject: &str| {
        format!(
            r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: SELECT symbol, COUNT(*) AS n, SUM(quantity) AS qty, MAX(k) AS k FROM trades GROUP BY symbol
  schemaRegistry: {{ url: "{registry}" }}
  sources:
    - name: trades
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: avro
      schema:
        registry: {{ subject: {subject}, version: latest }}
        columns:
          - {{ name: k, type: string, metadata: key }}
      partitionKey: [symbol]
      eventTime: {{ column: trade_time, watermarkDelayMillis: 0 }}
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
"#,
            name = unique_name("avro-derived"),
            registry = h.registry_url,
            bootstrap = h.bootstrap,
        )
    };
    let good = write_temp("avro-derived.yaml", &manifest(&format!("{topic}-value")));
    let validated =
        Command::new(sluice_e2e::worker::worker_bin()).args(["validate", "-f"]).arg(&good).output().unwrap();
    let said = String::from_utf8_lossy(&validated.stdout).into_owned() + &String::from_utf8_lossy(&validated.stderr);
    assert!(validated.status.success(), "{said}");
    assert!(
        said.contains(&format!("source trades: columns from subject {topic}-value version 1 (schema id")),
        "{said}"
    );
    let mut w = Worker::run(&good, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    assert_eq!(final_per_symbol(&kafka::consume_all(&out, Duration::from_secs(60))), expected(0..2_000));
    let missing = write_temp("avro-missing.yaml", &manifest("no-such-subject-value"));
    let refused =
        Command::new(sluice_e2e::worker::worker_bin()).args(["validate", "-f"]).arg(&missing).output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(said.contains("subject no-such-subject-value") && said.contains("has no version latest"), "{said}");
}

/// `GET <registry>/<path>`'s answer, read with Python's standard library.
fn registry_get(path: &str) -> String {
    let h = harness();
    let url = format!("{}/{path}", h.registry_url);
    let out = Command::new(&h.clients_python)
        .args(["-c", "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())", &url])
        .output()
        .expect("run Python");
    assert!(out.status.success(), "GET {url}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Reads `topic` with `tests/clients/avro_consume.py`: confluent-kafka's
/// `AvroDeserializer`, the writer schema fetched by the id in each value.
fn consume_avro(topic: &str) -> Vec<serde_json::Value> {
    let h = harness();
    let out = Command::new(&h.clients_python)
        .arg(h.repo.join("tests/clients/avro_consume.py"))
        .args([&h.bootstrap, &h.registry_url, topic])
        .output()
        .expect("run the Python consumer");
    assert!(out.status.success(), "avro_consume.py failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Results written as Avro, keys too (`keyFormat: avro`): the writer
/// schemas derived from the query's output and key and registered under
/// the record names (RecordNameStrategy), read back by confluent-kafka's
/// `AvroDeserializer` — every symbol's final totals, equal to the JSON
/// job's, under a key record of its symbol; NULLs as Avro nulls.
#[test]
fn results_written_as_avro_are_read_back_by_confluent_kafkas_deserializer() {
    let (topic, out, name) = (unique_name("avro-in"), unique_name("avro-out"), unique_name("avro-out"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    produce_avro(&topic, "v1", 0, 2_000);
    let h = harness();
    let manifest = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: |
    SELECT symbol, COUNT(*) AS n, SUM(quantity) AS qty, MAX(trade_time) AS last_trade,
           MIN(trader_id) AS first_trader, AVG(price) > 0 AS priced,
           SUM(CAST(quantity AS DECIMAL(12, 2))) AS qty_decimal,
           SUM(CAST(quantity AS DECIMAL(38, 2))) * 100000000000000000000 AS qty_wide
    FROM trades GROUP BY symbol
  schemaRegistry: {{ url: "{registry}", subjectNameStrategy: RecordName }}
  sources:
    - name: trades
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: avro
      schema:
        columns:
          - {{ name: trader_id, type: string }}
          - {{ name: symbol, type: string, required: true }}
          - {{ name: price, type: double }}
          - {{ name: quantity, type: bigint, required: true }}
          - {{ name: trade_time, type: timestamp }}
      partitionKey: [symbol]
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
    format: avro
    keyFormat: avro
"#,
        registry = h.registry_url,
        bootstrap = h.bootstrap,
    );
    let m = write_temp("avro-out.yaml", &manifest);
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    // RecordNameStrategy: the subject is the record's full name, not the topic's.
    let subjects = registry_get("subjects");
    let record: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    assert!(subjects.contains(&format!("\"dev.sluice.{record}\"")), "{subjects}");
    assert!(subjects.contains(&format!("\"dev.sluice.{record}Key\"")), "{subjects}");
    assert!(!subjects.contains(&format!("\"{out}-value\"")), "{subjects}");
    let mut last: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for r in consume_avro(&out) {
        let symbol = r["value"]["symbol"].as_str().unwrap().to_owned();
        assert_eq!(r["key"], serde_json::json!({ "symbol": symbol }), "an Avro key record: {r}");
        last.insert(symbol, r["value"].clone());
    }
    let got: BTreeMap<String, (i64, i64)> =
        last.iter().map(|(k, v)| (k.clone(), (v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap()))).collect();
    assert_eq!(got, expected(0..2_000));
    for v in last.values() {
        assert_eq!(v["priced"], serde_json::Value::Bool(true), "{v}");
        // A DECIMAL is Avro's decimal logical type: fastavro reads it as a
        // Python Decimal of two places (printed as text), the exact sum.
        assert_eq!(v["qty_decimal"], serde_json::json!(format!("{}.00", v["qty"])), "{v}");
        // A 38-digit DECIMAL (i128 in Sluice): 16 bytes of two's
        // complement, every digit read back by the same deserializer.
        assert_eq!(v["qty_wide"], serde_json::json!(format!("{}00000000000000000000.00", v["qty"])), "{v}");
        // timestamp-millis comes back as a datetime, printed as text.
        assert!(v["last_trade"].as_str().is_some_and(|t| t.starts_with("2023-11-")), "{v}");
        assert!(v["first_trader"].as_str().is_some_and(|t| t.starts_with('T')), "{v}");
    }
}

/// Reads `topic` with `tests/clients/protobuf_consume.py`: each schema id
/// fetched from the registry, compiled by Google's protoc, and the records
/// read by confluent-kafka's `ProtobufDeserializer`.
fn consume_protobuf(topic: &str) -> Vec<serde_json::Value> {
    let h = harness();
    let out = Command::new(&h.clients_python)
        .arg(h.repo.join("tests/clients/protobuf_consume.py"))
        .args([&h.bootstrap, &h.registry_url, topic])
        .output()
        .expect("run the Python consumer");
    assert!(out.status.success(), "protobuf_consume.py failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Results written as Protobuf, keys too (`keyFormat: protobuf`): the
/// .proto schemas derived from the query's output and key, registered as
/// PROTOBUF under `<topic>-value` and `<topic>-key` (TopicNameStrategy),
/// compiled by protoc and read by confluent-kafka's deserializer — every
/// symbol's final totals, equal to the JSON job's, under a key message of
/// its symbol; a NULL an absent field, a present zero a field.
#[test]
fn results_written_as_protobuf_are_read_back_by_confluent_kafkas_deserializer() {
    let (topic, out, name) = (unique_name("pb-in"), unique_name("pb-out"), unique_name("pb-out"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    produce_avro(&topic, "v1", 0, 2_000);
    let h = harness();
    let manifest = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: |
    SELECT symbol, COUNT(*) AS n, SUM(quantity) AS qty, MAX(trade_time) AS last_trade,
           MIN(trader_id) AS first_trader, AVG(price) > 0 AS priced, SUM(quantity) - SUM(quantity) AS zero,
           MAX(CASE WHEN quantity < 0 THEN 1 END) AS never
    FROM trades GROUP BY symbol
  schemaRegistry: {{ url: "{registry}" }}
  sources:
    - name: trades
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: avro
      schema:
        columns:
          - {{ name: trader_id, type: string }}
          - {{ name: symbol, type: string, required: true }}
          - {{ name: price, type: double }}
          - {{ name: quantity, type: bigint, required: true }}
          - {{ name: trade_time, type: timestamp }}
      partitionKey: [symbol]
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
    format: protobuf
    keyFormat: protobuf
"#,
        registry = h.registry_url,
        bootstrap = h.bootstrap,
    );
    let m = write_temp("pb-out.yaml", &manifest);
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    for subject in [format!("{out}-value"), format!("{out}-key")] {
        let latest = registry_get(&format!("subjects/{subject}/versions/latest"));
        assert!(latest.contains(r#""schemaType":"PROTOBUF""#), "{subject}: {latest}");
    }
    let mut last: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for r in consume_protobuf(&out) {
        let symbol = r["value"]["symbol"].as_str().unwrap().to_owned();
        assert_eq!(r["key"], serde_json::json!({ "symbol": symbol }), "a Protobuf key message: {r}");
        last.insert(symbol, r["value"].clone());
    }
    // Protobuf's JSON mapping writes an int64 as a string.
    let int = |v: &serde_json::Value| v.as_str().unwrap().parse::<i64>().unwrap();
    let got: BTreeMap<String, (i64, i64)> =
        last.iter().map(|(k, v)| (k.clone(), (int(&v["n"]), int(&v["qty"])))).collect();
    assert_eq!(got, expected(0..2_000));
    for v in last.values() {
        assert_eq!(v["priced"], serde_json::Value::Bool(true), "{v}");
        // A google.protobuf.Timestamp, printed as RFC 3339.
        assert!(v["last_trade"].as_str().is_some_and(|t| t.starts_with("2023-11-") && t.ends_with('Z')), "{v}");
        assert!(v["first_trader"].as_str().is_some_and(|t| t.starts_with('T')), "{v}");
        // Present though zero; NULL left out.
        assert_eq!(v["zero"], "0", "{v}");
        assert!(v.get("never").is_none(), "{v}");
    }
}

/// A Debezium change event for `customers` (JSON converter, schemas on or
/// off as Debezium's users configure it).
fn change(op: &str, id: i64, name: Option<&str>, ts_ms: i64, schemas: bool) -> Vec<u8> {
    let row = |n: Option<&str>| serde_json::json!({ "id": id, "name": n });
    let (before, after) = match op {
        "c" | "r" => (serde_json::Value::Null, row(name)),
        "u" => (row(Some("old")), row(name)),
        _ => (serde_json::json!({ "id": id, "name": null }), serde_json::Value::Null),
    };
    let event = serde_json::json!({
        "before": before,
        "after": after,
        "source": { "connector": "postgresql", "db": "shop", "table": "customers", "ts_ms": ts_ms - 5 },
        "op": op,
        "ts_ms": ts_ms,
    });
    let value = if schemas { serde_json::json!({ "schema": { "type": "struct" }, "payload": event }) } else { event };
    serde_json::to_vec(&value).unwrap()
}

/// A Debezium CDC topic of a database table, with inserts, a snapshot read,
/// updates, a delete and the tombstone Debezium writes after it, as the
/// table side of an event-time (temporal) join: each order meets the
/// customer's row as it was at the order's time, a deleted customer meets
/// nothing — equal to what is computed here from the same changes.
#[test]
fn a_debezium_cdc_topic_is_a_table_an_event_time_join_reads_as_of_each_order() {
    cdc_join(false);
}

/// The same changes written as Debezium's Avro converter writes them (by
/// `tests/clients/debezium_avro_produce.py`, through confluent-kafka's
/// AvroSerializer and the registry: an Avro `Key` and `Envelope`, the
/// tombstone after the delete), read with `format: debezium-avro`.
#[test]
fn a_debezium_avro_cdc_topic_is_a_table_an_event_time_join_reads_as_of_each_order() {
    cdc_join(true);
}

/// Writes Debezium events for `customers` with the Python Avro producer:
/// `(key id, envelope or None for a tombstone)`.
fn produce_debezium_avro(topic: &str, events: &[(i64, Option<serde_json::Value>)]) {
    use std::io::Write;
    let h = harness();
    let mut child = Command::new(&h.clients_python)
        .arg(h.repo.join("tests/clients/debezium_avro_produce.py"))
        .args([&h.bootstrap, &h.registry_url, topic])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the Python producer");
    let mut stdin = child.stdin.take().unwrap();
    for (id, value) in events {
        let line = serde_json::json!({ "key": { "id": id }, "value": value });
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "debezium_avro_produce.py failed: {}", String::from_utf8_lossy(&out.stderr));
}

fn cdc_join(avro: bool) {
    let (customers, orders, out) = (unique_name("cdc-customers"), unique_name("cdc-orders"), unique_name("cdc-out"));
    kafka::create_topic(&customers, 1);
    kafka::create_topic(&orders, 2);
    kafka::create_topic(&out, 1);
    // (op, customer, name, time): customer 2 is deleted at 7,000.
    let changes = [
        ("r", 1, Some("Ann"), 1_000, false),
        ("c", 2, Some("Bob"), 1_000, true),
        ("c", 3, Some("Cid"), 1_500, false),
        ("u", 1, Some("Anne"), 5_000, true),
        ("d", 2, None, 7_000, false),
        ("u", 3, Some("Cyd"), 8_000, false),
    ];
    if avro {
        let mut events: Vec<(i64, Option<serde_json::Value>)> = changes
            .iter()
            .map(|&(op, id, name, ts, _)| (id, Some(serde_json::from_slice(&change(op, id, name, ts, false)).unwrap())))
            .collect();
        // Debezium's tombstone after the delete: the key and no value.
        events.insert(5, (2, None));
        produce_debezium_avro(&customers, &events);
    } else {
        let values: Vec<(Vec<u8>, Vec<u8>)> = changes
            .iter()
            .map(|&(op, id, name, ts, schemas)| {
                (format!("{{\"id\":{id}}}").into_bytes(), change(op, id, name, ts, schemas))
            })
            .collect();
        let mut records: Vec<kafka::Outgoing<'_>> =
            values.iter().map(|(k, v)| (Some(k.as_slice()), v.as_slice(), Some(0))).collect();
        // Debezium's tombstone after the delete: the key and no value.
        records.insert(5, (Some(b"{\"id\":2}".as_slice()), b"".as_slice(), Some(0)));
        kafka::produce(&customers, &records);
    }
    // (order, customer, time)
    let placed = [(10, 1, 2_000), (11, 2, 3_000), (12, 1, 6_000), (13, 2, 8_000), (14, 3, 9_000), (15, 4, 9_500)];
    let order_values: Vec<(Vec<u8>, Vec<u8>)> = placed
        .iter()
        .map(|(o, c, t)| {
            (c.to_string().into_bytes(), format!(r#"{{"id":{o},"customer_id":{c},"ts":{t}}}"#).into_bytes())
        })
        .collect();
    let order_records: Vec<kafka::Outgoing<'_>> = order_values
        .iter()
        .enumerate()
        .map(|(i, (k, v))| (Some(k.as_slice()), v.as_slice(), Some(i32::try_from(i % 2).unwrap())))
        .collect();
    kafka::produce(&orders, &order_records);
    let h = harness();
    let manifest = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: |
    SELECT o.id AS order_id, c.name AS customer, c.source.db AS db
    FROM orders o LEFT JOIN customers FOR SYSTEM_TIME AS OF o.ts AS c ON o.customer_id = c.id
  sources:
    - name: orders
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {orders} }}
      schema:
        columns:
          - {{ name: id, type: bigint, required: true }}
          - {{ name: customer_id, type: bigint, required: true }}
          - {{ name: ts, type: timestamp, required: true }}
      eventTime: {{ column: ts, watermarkDelayMillis: 0 }}
    - name: customers
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {customers} }}
      format: {format}
      table: {{ primaryKey: [id] }}
      schema:
        columns:
          - {{ name: id, type: bigint, required: true }}
          - {{ name: name, type: string }}
          - {{ name: source.db, type: string }}
          - {{ name: ts_ms, type: timestamp }}
      eventTime: {{ column: ts_ms, watermarkDelayMillis: 0 }}
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
  schemaRegistry: {{ url: "{registry}" }}
"#,
        name = unique_name("cdc"),
        bootstrap = h.bootstrap,
        registry = h.registry_url,
        format = if avro { "debezium-avro" } else { "debezium-json" },
    );
    let m = write_temp("cdc.yaml", &manifest);
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    // Computed here: each order's customer as of its time.
    let mut expected = BTreeMap::new();
    for &(order, customer, at) in &placed {
        let mut name: Option<&str> = None;
        for &(op, id, n, ts, _) in &changes {
            if id == customer && ts <= at {
                name = if op == "d" { None } else { n };
            }
        }
        expected.insert(order, name.map(str::to_owned));
    }
    let got: BTreeMap<i64, Option<String>> = kafka::consume_all(&out, Duration::from_secs(60))
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
            if v["customer"].is_string() {
                assert_eq!(v["db"], "shop", "source metadata as a column: {v}");
            }
            (v["order_id"].as_i64().unwrap(), v["customer"].as_str().map(str::to_owned))
        })
        .collect();
    assert_eq!(got, expected);
    assert!(w.log().contains("dead-lettered: 0"), "the tombstone is no dead letter:\n{}", w.log());
}

/// `(op, order, (customer, amount))`.
type OrderChange<'a> = (&'a str, i64, Option<(&'a str, i64)>);

/// A Debezium event for order `id` (schemas off): `row` is `(customer,
/// amount)`; `d` carries the key alone in `before`, as under Postgres's
/// default replica identity.
fn order_change(op: &str, id: i64, row: Option<(&str, i64)>) -> Vec<u8> {
    let image = |r: Option<(&str, i64)>| match r {
        Some((c, a)) => serde_json::json!({ "id": id, "customer": c, "amount": a }),
        None => serde_json::json!({ "id": id, "customer": null, "amount": null }),
    };
    let (before, after) =
        if op == "d" { (image(None), serde_json::Value::Null) } else { (serde_json::Value::Null, image(row)) };
    let source = serde_json::json!({ "connector": "postgresql", "db": "shop", "table": "orders", "ts_ms": 1 });
    serde_json::to_vec(&serde_json::json!({ "before": before, "after": after, "source": source, "op": op, "ts_ms": 2 }))
        .unwrap()
}

/// The records of `changes` (key, value, partition), each delete followed
/// by the tombstone Debezium writes after it for compaction.
fn with_tombstones(changes: &[(Vec<u8>, Vec<u8>, i32)]) -> Vec<kafka::Outgoing<'_>> {
    let mut records: Vec<kafka::Outgoing<'_>> = Vec::new();
    for (key, value, partition) in changes {
        records.push((Some(key.as_slice()), value.as_slice(), Some(*partition)));
        if value.windows(8).any(|w| w == br#""op":"d""#) {
            records.push((Some(key.as_slice()), b"".as_slice(), Some(*partition)));
        }
    }
    records
}

/// A job reading `orders`, a Debezium JSON topic of orders `(id,
/// customer, amount)` keyed by `id`, as a table, writing `sql`'s results
/// to `sink` in `format`; `extra` is appended to its spec.
fn cdc_orders_manifest(name: &str, sql: &str, orders: &str, sink: &str, format: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: {sql}
  sources:
    - name: orders
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {orders} }}
      format: debezium-json
      table: {{ primaryKey: [id] }}
      partitionKey: [id]
      schema:
        columns:
          - {{ name: id, type: bigint, required: true }}
          - {{ name: customer, type: string }}
          - {{ name: amount, type: bigint }}
  sink:
    format: {format}
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {sink} }}
{extra}"#,
        bootstrap = harness().bootstrap,
    )
}

/// Reads `topic` to its end as an upsert consumer does (a compacted topic
/// keeps the same): the last value per key, a tombstone — or, read as
/// Debezium events, a `d` — removing it.
fn materialize(topic: &str, debezium: bool) -> BTreeMap<String, (i64, i64)> {
    let mut table = BTreeMap::new();
    for r in kafka::consume_all(topic, Duration::from_secs(60)) {
        let key: serde_json::Value = serde_json::from_slice(r.key.as_deref().expect("a keyed result")).unwrap();
        let customer = key["customer"].as_str().unwrap().to_owned();
        let row = if r.tombstone {
            assert!(!debezium, "a Debezium sink writes `d` events, not tombstones");
            None
        } else {
            let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
            let row = if debezium {
                match v["op"].as_str() {
                    Some("u") => v["after"].clone(),
                    Some("d") => {
                        assert_eq!(v["before"], key, "a delete names its key");
                        serde_json::Value::Null
                    }
                    other => panic!("op {other:?} in {v}"),
                }
            } else {
                v
            };
            (!row.is_null()).then(|| (row["orders"].as_i64().unwrap(), row["total"].as_i64().unwrap()))
        };
        match row {
            Some(r) => table.insert(customer, r),
            None => table.remove(&customer),
        };
    }
    table
}

/// A Debezium CDC topic of orders aggregated per customer: updates move
/// orders between customers and change amounts, deletes (each followed by
/// Debezium's tombstone) take orders out, and every order of one customer
/// is deleted. The results, upserts keyed by the customer, go to a
/// compacted topic as JSON — a deleted customer a tombstone — and to a
/// second topic as Debezium events; each, read to its end as an upsert
/// consumer reads it, equals the totals computed here from the last
/// version of every order. A third job adds `HAVING SUM(amount) >= bar`,
/// the bar between one customer's total after the inserts and its total
/// at the end: its compacted topic must lose that customer (a tombstone
/// for a group that stopped passing HAVING) and hold the others over it.
#[test]
fn an_aggregate_over_a_cdc_topic_takes_updates_and_deletes_back_and_upserts_its_results() {
    let (orders, upserts, changes) = (unique_name("cdc-orders"), unique_name("cdc-totals"), unique_name("cdc-events"));
    kafka::create_topic(&orders, 2);
    kafka::create_topic_with(&upserts, 1, &[("cleanup.policy", "compact")]);
    kafka::create_topic_with(&changes, 1, &[("cleanup.policy", "compact")]);
    let customers = ["ann", "bob", "cy", "dee", "eve"];
    // (op, order, row): 300 orders, then 200 updates (some moving to
    // another customer), 60 deletes, and every order of "dee" deleted.
    let mut events: Vec<OrderChange<'_>> = Vec::new();
    for id in 0..300 {
        events.push((if id % 7 == 0 { "r" } else { "c" }, id, Some((customers[(id % 5) as usize], id % 50 + 1))));
    }
    for i in 0..200 {
        let id = (i * 13) % 300;
        events.push(("u", id, Some((customers[((id + i) % 4) as usize], i % 30 + 5))));
    }
    for i in 0..60 {
        events.push(("d", (i * 17 + 3) % 300, None));
    }
    let mut latest: BTreeMap<i64, Option<(&str, i64)>> = BTreeMap::new();
    for &(op, id, row) in &events {
        latest.insert(id, if op == "d" { None } else { row });
    }
    for (&id, row) in &latest.clone() {
        if row.is_some_and(|(c, _)| c == "dee") {
            events.push(("d", id, None));
            latest.insert(id, None);
        }
    }
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (customer, amount) in latest.values().flatten() {
        let e = expected.entry((*customer).to_owned()).or_default();
        e.0 += 1;
        e.1 += amount;
    }
    assert!(!expected.contains_key("dee") && expected.len() == 4, "{expected:?}");
    // A third job keeps the customers whose total reaches a bar: one
    // customer over it after the inserts and under it at the end, so its
    // row must be taken back out of the compacted topic.
    let mut inserted: BTreeMap<&str, i64> = BTreeMap::new();
    for &(_, _, row) in &events[..300] {
        if let Some((customer, amount)) = row {
            *inserted.entry(customer).or_default() += amount;
        }
    }
    let (fallen, bar) = expected
        .iter()
        .map(|(c, &(_, total))| (c.clone(), total + 1))
        .filter(|(c, bar)| inserted[c.as_str()] >= *bar)
        .max_by_key(|(c, bar)| inserted[c.as_str()] - bar)
        .expect("a customer whose total fell");
    let over_bar: BTreeMap<String, (i64, i64)> =
        expected.iter().filter(|(_, t)| t.1 >= bar).map(|(c, t)| (c.clone(), *t)).collect();
    assert!(!over_bar.contains_key(&fallen) && !over_bar.is_empty(), "{over_bar:?}");
    let encoded: Vec<(Vec<u8>, Vec<u8>, i32)> = events
        .iter()
        .map(|&(op, id, row)| {
            (format!("{{\"id\":{id}}}").into_bytes(), order_change(op, id, row), i32::try_from(id % 2).unwrap())
        })
        .collect();
    let having = unique_name("cdc-over-bar");
    kafka::create_topic_with(&having, 1, &[("cleanup.policy", "compact")]);
    let all = "SELECT customer, COUNT(*) AS orders, SUM(amount) AS total FROM orders GROUP BY customer".to_owned();
    let jobs = [
        (&upserts, "json", unique_name("g"), all.clone()),
        (&changes, "debezium-json", unique_name("g"), all.clone()),
        (&having, "json", unique_name("g"), format!("{all} HAVING SUM(amount) >= {bar}")),
    ];
    // The inserts, then (the jobs restarted from their checkpoints) the
    // updates and deletes: every customer's totals are out before any of
    // them is taken back.
    for (round, part) in [&encoded[..300], &encoded[300..]].into_iter().enumerate() {
        kafka::produce(&orders, &with_tombstones(part));
        for (sink, format, group, sql) in &jobs {
            let manifest = cdc_orders_manifest("cdc-agg", sql, &orders, sink, format, "");
            let m = write_temp("cdc-agg.yaml", &manifest);
            let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", group]);
            assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
            assert!(w.log().contains("dead-lettered: 0"), "Debezium's tombstones are no dead letters:\n{}", w.log());
            if round == 0 {
                let shown = materialize(sink, *format != "json");
                assert!(shown.contains_key("dee") || *sink == &having, "{format}");
                assert!(shown.contains_key(&fallen), "{sql}: {fallen} passed the bar after the inserts");
            }
        }
    }
    for (sink, format, _, _) in &jobs[..2] {
        assert_eq!(materialize(sink, *format != "json"), expected, "{format}");
    }
    assert_eq!(materialize(&having, false), over_bar, "HAVING SUM(amount) >= {bar}: {fallen} fell under it");
    let tombstones = kafka::consume_all(&upserts, Duration::from_secs(60)).iter().filter(|r| r.tombstone).count();
    assert!(tombstones >= 1, "dee's deletion is a tombstone");
}

/// An aggregate over a CDC table larger than its memory: 60,000 orders of
/// 20,000 customers under a 1 MiB state limit (their last rows, the
/// changelog stage's state, take several times that, and the totals
/// more than it), with a volume (`--state-dir`) — each stage moves cold
/// keys there and reads each back when a version or a delete of it
/// comes, an order's or a customer's. The inserts in one bounded run,
/// then updates (moving orders between customers) and deletes in a
/// second, restored from the first's checkpoint with its pages past the
/// budget going straight to disk: the totals, read to the end of the
/// compacted topic, are those of every order's last version.
#[test]
fn an_aggregate_over_a_cdc_table_larger_than_its_memory_spills_and_stays_exact() {
    const ORDERS: i64 = 60_000;
    let (orders, totals) = (unique_name("cdc-big-orders"), unique_name("cdc-big-totals"));
    kafka::create_topic(&orders, 1);
    kafka::create_topic_with(&totals, 1, &[("cleanup.policy", "compact")]);
    // 20,000 customers: the totals, too, take more than the limit.
    let customers: Vec<String> = (0..20_000).map(|c| format!("c{c}")).collect();
    let mut inserts: Vec<OrderChange<'_>> = Vec::new();
    for id in 0..ORDERS {
        inserts.push(("c", id, Some((customers[(id % 20_000) as usize].as_str(), id % 90 + 1))));
    }
    let mut changes: Vec<OrderChange<'_>> = Vec::new();
    for i in 0..20_000 {
        let id = (i * 7_919) % ORDERS;
        changes.push(("u", id, Some((customers[((id + i) % 15_000) as usize].as_str(), i % 40 + 3))));
    }
    for i in 0..5_000 {
        changes.push(("d", (i * 104_729 + 11) % ORDERS, None));
    }
    let mut latest: BTreeMap<i64, Option<(&str, i64)>> = BTreeMap::new();
    for &(op, id, row) in inserts.iter().chain(&changes) {
        latest.insert(id, if op == "d" { None } else { row });
    }
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (customer, amount) in latest.values().flatten() {
        let e = expected.entry((*customer).to_owned()).or_default();
        e.0 += 1;
        e.1 += amount;
    }
    let sql = "SELECT customer, COUNT(*) AS orders, SUM(amount) AS total FROM orders GROUP BY customer";
    let engine = "  engine:\n    stateMemoryLimit: 1Mi\n    batchMaxRecords: 256\n";
    let manifest = cdc_orders_manifest("cdc-big", sql, &orders, &totals, "json", engine);
    let m = write_temp("cdc-big.yaml", &manifest);
    let (group, dir) = (unique_name("g"), std::env::temp_dir().join(unique_name("sluice-cdc-volume")));
    let encode = |part: &[OrderChange<'_>]| -> Vec<(Vec<u8>, Vec<u8>, i32)> {
        part.iter()
            .map(|&(op, id, row)| (format!("{{\"id\":{id}}}").into_bytes(), order_change(op, id, row), 0))
            .collect()
    };
    for part in [&inserts, &changes] {
        kafka::produce(&orders, &with_tombstones(&encode(part)));
        let args = ["--bounded", "--cores", "1", "--group", &group, "--state-dir", dir.to_str().unwrap()];
        let mut w = Worker::run(&m, &args);
        assert!(w.wait(Duration::from_secs(180)).success(), "worker failed:\n{}", w.log());
        // In memory the orders' rows take several times the limit (the
        // core would stop at it); spilling, the state stays under it.
        let log = w.log();
        let peak: f64 = log
            .split("peak state: ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|mib| mib.parse().ok())
            .unwrap_or_else(|| panic!("no peak state in the run's summary:\n{log}"));
        assert!(peak < 1.0, "the state stayed under its 1 MiB limit: {peak} MiB\n{log}");
    }
    assert_eq!(materialize(&totals, false), expected);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `format: raw`: each value as it is (log lines, not JSON) in one string
/// column, the record's key beside it; a value that is not UTF-8 is a
/// dead letter.
#[test]
fn raw_values_are_one_text_column_beside_the_records_key() {
    let (logs, out, dlq) = (unique_name("raw-logs"), unique_name("raw-out"), unique_name("raw-dlq"));
    kafka::create_topic(&logs, 1);
    kafka::create_topic(&out, 1);
    kafka::create_topic(&dlq, 1);
    let lines: Vec<(String, String)> = (0..50)
        .map(|i| {
            (
                format!("host-{}", i % 3),
                format!("{} {{job {i}}}, \"quoted\"", if i % 5 == 0 { "ERROR" } else { "INFO" }),
            )
        })
        .collect();
    let mut records: Vec<kafka::Outgoing<'_>> =
        lines.iter().map(|(k, v)| (Some(k.as_bytes()), v.as_bytes(), Some(0))).collect();
    records.push((Some(b"host-9".as_slice()), [b'E', 0xff].as_slice(), Some(0)));
    kafka::produce(&logs, &records);
    let h = harness();
    let manifest = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: SELECT host, line FROM logs WHERE line LIKE 'ERROR%'
  sources:
    - name: logs
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {logs} }}
      format: raw
      schema:
        columns:
          - {{ name: line, type: string, required: true }}
          - {{ name: host, type: string, metadata: key }}
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
  deadLetter:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {dlq} }}
"#,
        name = unique_name("raw"),
        bootstrap = h.bootstrap,
    );
    let m = write_temp("raw.yaml", &manifest);
    let mut w = Worker::run(&m, &["--bounded", "--cores", "1", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    let got: Vec<(String, String)> = kafka::consume_all(&out, Duration::from_secs(60))
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
            (v["host"].as_str().unwrap().to_owned(), v["line"].as_str().unwrap().to_owned())
        })
        .collect();
    let want: Vec<(String, String)> = lines.into_iter().filter(|(_, l)| l.starts_with("ERROR")).collect();
    assert_eq!(got, want);
    let dead = kafka::consume_all(&dlq, Duration::from_secs(30));
    assert_eq!(dead.len(), 1);
    assert!(dead[0].header("sluice.error.reason").unwrap().contains("not UTF-8"), "{:?}", dead[0].headers);
}

/// CSV values written by Python's `csv` module (quoting where a field
/// holds a comma, a quote or a line break; `\r\n` line ends) read into
/// typed columns in declared order, the key beside them; an empty field
/// is NULL; a row with a field too few, or a price that is not a number,
/// is a dead letter naming it.
#[test]
fn csv_values_written_by_pythons_csv_module_fill_columns_in_order() {
    let (orders, out, dlq) = (unique_name("csv-orders"), unique_name("csv-out"), unique_name("csv-dlq"));
    kafka::create_topic(&orders, 1);
    kafka::create_topic(&out, 1);
    kafka::create_topic(&dlq, 1);
    let h = harness();
    let mut rows = String::new();
    for i in 0..40 {
        let item = match i % 4 {
            0 => format!("bolt, M{i}"),
            1 => format!("the \"{i}\" nut"),
            2 => format!("washer\nline {i}"),
            _ => format!("plain {i}"),
        };
        let note = if i % 3 == 0 { serde_json::Value::Null } else { format!("n{i}").into() };
        let (region, ts) = (["eu", "us"][i % 2], 1_700_000_000_000 + i);
        let row = serde_json::json!({"key": region, "row": [i, item, format!("{i}.25"), ts, note]});
        rows.push_str(&format!("{row}\n"));
    }
    rows.push_str("{\"key\": \"eu\", \"row\": [90, \"short\", \"1.5\", 1700000000000]}\n");
    rows.push_str("{\"key\": \"eu\", \"row\": [91, \"x\", \"cheap\", 1700000000000, \"\"]}\n");
    let mut child = Command::new(&h.clients_python)
        .arg(h.repo.join("tests/clients/csv_produce.py"))
        .args([&h.bootstrap, &orders])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the Python producer");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), rows.as_bytes()).unwrap();
    let produced = child.wait_with_output().unwrap();
    assert!(produced.status.success(), "csv_produce.py: {}", String::from_utf8_lossy(&produced.stderr));
    let manifest = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: SELECT region, id, item, price * 2 AS double_price, ts, note FROM orders WHERE id % 5 <> 4
  sources:
    - name: orders
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {orders} }}
      format: csv
      schema:
        columns:
          - {{ name: id, type: bigint, required: true }}
          - {{ name: item, type: string, required: true }}
          - {{ name: price, type: double }}
          - {{ name: ts, type: timestamp }}
          - {{ name: note, type: string }}
          - {{ name: region, type: string, metadata: key }}
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
  deadLetter:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {dlq} }}
"#,
        name = unique_name("csv"),
        bootstrap = h.bootstrap,
    );
    let m = write_temp("csv.yaml", &manifest);
    let mut w = Worker::run(&m, &["--bounded", "--cores", "1", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    let got: Vec<serde_json::Value> = kafka::consume_all(&out, Duration::from_secs(60))
        .iter()
        .map(|r| serde_json::from_slice(&r.value).unwrap())
        .collect();
    let want: Vec<serde_json::Value> = (0..40_i64)
        .filter(|i| i % 5 != 4)
        .map(|i| {
            let item = match i % 4 {
                0 => format!("bolt, M{i}"),
                1 => format!("the \"{i}\" nut"),
                2 => format!("washer\nline {i}"),
                _ => format!("plain {i}"),
            };
            let note = if i % 3 == 0 { serde_json::Value::Null } else { format!("n{i}").into() };
            let ts = format!("2023-11-14T22:13:20.{i:03}Z");
            let region = ["eu", "us"][usize::try_from(i % 2).unwrap()];
            let price = (f64::from(u32::try_from(i).unwrap()) + 0.25) * 2.0;
            serde_json::json!({"region": region, "id": i, "item": item, "double_price": price, "ts": ts, "note": note})
        })
        .collect();
    assert_eq!(got, want);
    let dead = kafka::consume_all(&dlq, Duration::from_secs(30));
    let reasons: Vec<String> = dead.iter().map(|d| d.header("sluice.error.reason").unwrap()).collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].contains("4 fields, the source declares 5"), "{reasons:?}");
    assert!(reasons[1].contains("field `price`: expected double, got \"cheap\""), "{reasons:?}");
}

/// Forwards connections accepted on `listener` to the Schema Registry, one
/// thread per direction, until the test ends.
fn forward_to_registry(listener: std::net::TcpListener) {
    let url = &harness().registry_url;
    let target = url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = std::net::TcpStream::connect(&target) else { continue };
            for (mut from, mut to) in [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server.try_clone().unwrap(), client.try_clone().unwrap()),
            ] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
}

/// A job counting trades per symbol from Avro `topic` into `out`, its
/// schema registry the harness's reached at 127.0.0.1:`port` (where a test
/// puts a proxy, or nothing), dead letters to `dlq`.
fn trades_through_registry_at(port: u16, name: &str, (topic, out, dlq): (&str, &str, &str)) -> String {
    let h = harness();
    let path = h.registry_url.splitn(4, '/').nth(3).unwrap_or_default();
    format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: SELECT symbol, COUNT(*) AS n, SUM(quantity) AS qty FROM trades GROUP BY symbol
  schemaRegistry: {{ url: "http://127.0.0.1:{port}/{path}" }}
  sources:
    - name: trades
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: avro
      schema:
        columns:
          - {{ name: symbol, type: string, required: true }}
          - {{ name: quantity, type: bigint, required: true }}
      partitionKey: [symbol]
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
  deadLetter:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {dlq} }}
"#,
        name = unique_name(name),
        bootstrap = h.bootstrap,
    )
}

/// A registry that does not answer is the infrastructure's fault, not the
/// records': the core restarts with backoff (and `/readyz` says so after
/// three restarts in a row), nothing is dead-lettered or skipped, and once
/// the registry answers, every total is exact.
#[test]
fn a_registry_outage_dead_letters_nothing_and_the_job_catches_up_when_it_answers() {
    let (topic, out, dlq) = (unique_name("outage-in"), unique_name("outage-out"), unique_name("outage-dlq"));
    kafka::create_topic(&topic, 1);
    kafka::create_topic(&out, 1);
    kafka::create_topic(&dlq, 1);
    produce_avro(&topic, "v1", 0, 500);
    // The job's registry: a port nothing listens on yet.
    let port = sluice_e2e::worker::free_port();
    let manifest = trades_through_registry_at(port, "outage", (&topic, &out, &dlq));
    let m = write_temp("outage.yaml", &manifest);
    let w = Worker::run(&m, &["--cores", "1", "--group", &unique_name("g")]);
    // Three failed fetches of ~3 s each, restarts 1 s and 2 s apart.
    let degraded = (0..300).find_map(|_| {
        std::thread::sleep(Duration::from_millis(100));
        w.get("/readyz").filter(|(_, body)| body.contains("schema registry")).map(|(_, body)| body)
    });
    let degraded = degraded.unwrap_or_else(|| panic!("/readyz never named the registry:\n{}", w.log()));
    assert!(degraded.contains("degraded") && degraded.contains(&port.to_string()), "{degraded}");
    assert!(kafka::consume_all(&dlq, Duration::from_secs(2)).is_empty(), "nothing dead-lettered for an outage");
    // The registry answers again at that address.
    forward_to_registry(std::net::TcpListener::bind(("127.0.0.1", port)).unwrap());
    let want = expected(0..500);
    let mut got = BTreeMap::new();
    for _ in 0..120 {
        got = final_per_symbol(&kafka::consume_all(&out, Duration::from_secs(1)));
        if got == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(got, want, "caught up:\n{}", w.log());
    assert!(kafka::consume_all(&dlq, Duration::from_secs(2)).is_empty(), "nothing dead-lettered for an outage");
}

/// Writes `events` (`key`, value or `None` for a tombstone, CreateTime)
/// with `tests/clients/avro_upsert_produce.py`: Avro `long` keys and Avro
/// values by confluent-kafka's serializers, tombstones with null values.
fn produce_avro_upserts(topic: &str, events: &[(i64, Option<serde_json::Value>, i64)]) {
    use std::io::Write;
    let h = harness();
    let mut child = Command::new(&h.clients_python)
        .arg(h.repo.join("tests/clients/avro_upsert_produce.py"))
        .args([&h.bootstrap, &h.registry_url, topic])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the Python producer");
    let mut stdin = child.stdin.take().unwrap();
    for (key, value, ts) in events {
        writeln!(stdin, "{}", serde_json::json!({ "key": key, "value": value, "ts": ts })).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "avro_upsert_produce.py failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// A table source in Avro with Avro keys, written by confluent-kafka's
/// serializers, whose deletions are tombstones (a key, a null value): as
/// the table of an aggregate, a deleted row's values leave the totals; as
/// the table of an event-time join, an order after a deletion finds no
/// row. No tombstone is a dead letter (each once was, and the row stayed).
#[test]
fn tombstones_of_an_avro_table_delete_its_rows_in_an_aggregate_and_a_join() {
    let (customers, orders) = (unique_name("avro-upserts"), unique_name("avro-upsert-orders"));
    let (totals, joined, dlq) =
        (unique_name("avro-upsert-totals"), unique_name("avro-upsert-joined"), unique_name("avro-upsert-dlq"));
    kafka::create_topic(&customers, 1);
    kafka::create_topic(&orders, 2);
    for t in [&totals, &joined, &dlq] {
        kafka::create_topic(t, 1);
    }
    let row = |id: i64, name: &str, v: i64, at: i64| {
        Some(serde_json::json!({ "id": id, "name": name, "v": v, "updated": at }))
    };
    // Customer 1 is deleted at 5,000 and customer 2 at 7,000.
    let events = [
        (1, row(1, "Ann", 10, 1_000), 1_000),
        (2, row(2, "Bob", 20, 1_000), 1_000),
        (3, row(3, "Cid", 30, 1_500), 1_500),
        (1, None, 5_000),
        (3, row(3, "Cyd", 35, 6_000), 6_000),
        (2, None, 7_000),
    ];
    produce_avro_upserts(&customers, &events);
    // (order, customer, time)
    let placed = [(10, 1, 2_000), (11, 2, 3_000), (12, 1, 6_000), (13, 2, 8_000), (14, 3, 9_000)];
    let values: Vec<Vec<u8>> =
        placed.iter().map(|(o, c, t)| format!(r#"{{"id":{o},"customer_id":{c},"ts":{t}}}"#).into_bytes()).collect();
    let records: Vec<kafka::Outgoing<'_>> =
        values.iter().enumerate().map(|(i, v)| (None, v.as_slice(), Some(i32::try_from(i % 2).unwrap()))).collect();
    kafka::produce(&orders, &records);
    let h = harness();
    let manifest = |name: &str, sql: &str, out: &str| {
        format!(
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
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {orders} }}
      schema:
        columns:
          - {{ name: id, type: bigint, required: true }}
          - {{ name: customer_id, type: bigint, required: true }}
          - {{ name: ts, type: timestamp, required: true }}
      eventTime: {{ column: ts, watermarkDelayMillis: 0 }}
    - name: customers
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {customers} }}
      format: avro
      keyFormat: avro
      table: {{ primaryKey: [id] }}
      schema:
        columns:
          - {{ name: id, type: bigint, required: true }}
          - {{ name: name, type: string }}
          - {{ name: v, type: bigint }}
          - {{ name: updated, type: timestamp, required: true }}
      eventTime: {{ column: updated, watermarkDelayMillis: 0 }}
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
  deadLetter:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {dlq} }}
"#,
            name = unique_name(name),
            registry = h.registry_url,
            bootstrap = h.bootstrap,
        )
    };
    let run = |yaml: &str| {
        let m = write_temp("avro-upserts.yaml", yaml);
        let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
        assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
        assert!(w.log().contains("dead-lettered: 0"), "no tombstone is a dead letter:\n{}", w.log());
    };
    run(&manifest("avro-upsert-totals", "SELECT COUNT(*) AS n, SUM(v) AS s FROM customers", &totals));
    let last = kafka::consume_all(&totals, Duration::from_secs(60)).pop().expect("the totals");
    let last: serde_json::Value = serde_json::from_slice(&last.value).unwrap();
    assert_eq!(last, serde_json::json!({ "n": 1, "s": 35 }), "only customer 3 is left, at its last version");

    let sql = "SELECT o.id AS order_id, c.name AS customer FROM orders o \
               LEFT JOIN customers FOR SYSTEM_TIME AS OF o.ts AS c ON o.customer_id = c.id";
    run(&manifest("avro-upsert-join", sql, &joined));
    let mut expected = BTreeMap::new();
    for &(order, customer, at) in &placed {
        let mut name = None;
        for (key, value, ts) in &events {
            if *key == customer && *ts <= at {
                name = value.as_ref().map(|v| v["name"].as_str().unwrap().to_owned());
            }
        }
        expected.insert(order, name);
    }
    let got: BTreeMap<i64, Option<String>> = kafka::consume_all(&joined, Duration::from_secs(60))
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
            (v["order_id"].as_i64().unwrap(), v["customer"].as_str().map(str::to_owned))
        })
        .collect();
    assert_eq!(got, expected, "an order after its customer's tombstone finds no customer");
    assert!(kafka::consume_all(&dlq, Duration::from_secs(5)).is_empty(), "no dead letters");
}

/// The columns of a subject whose schema references a shared type,
/// written by confluent-kafka's AvroSerializer with the client's own
/// schema references, under three versions interleaved across partitions:
/// a field renamed with an alias (`units` → `quantity`) and a field added
/// with a default. Every quantity is read whichever name wrote it, the
/// shared type's fields are columns, a record written before `venue`
/// existed reads its default — every total exact, no dead letter.
#[test]
fn a_subject_with_references_aliases_and_defaults_derives_columns_that_read_every_version() {
    const N: i64 = 6_000;
    let (topic, out) = (unique_name("avro-refs"), unique_name("avro-refs-out"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    let h = harness();
    let produced = Command::new(&h.clients_python)
        .arg(h.repo.join("tests/clients/avro_references_produce.py"))
        .args([&h.bootstrap, &h.registry_url, &topic, &N.to_string()])
        .output()
        .expect("run the Python producer");
    assert!(produced.status.success(), "avro_references_produce.py: {}", String::from_utf8_lossy(&produced.stderr));
    let manifest = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: |
    SELECT venue, COUNT(*) AS n, SUM(quantity) AS qty, SUM("total.units") AS units,
           COUNT(quantity) AS with_quantity, MIN("total.currency") AS currency
    FROM orders GROUP BY venue
  schemaRegistry: {{ url: "{registry}" }}
  sources:
    - name: orders
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: avro
      schema:
        registry: {{ subject: {topic}-value }}
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
"#,
        name = unique_name("avro-refs"),
        registry = h.registry_url,
        bootstrap = h.bootstrap,
    );
    let m = write_temp("avro-refs.yaml", &manifest);
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    assert!(w.log().contains("dead-lettered: 0"), "{}", w.log());
    let mut expected: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    for i in 0..N {
        let venue = if i % 3 == 2 { "XLON" } else { "XNAS" };
        let e = expected.entry(venue.to_owned()).or_default();
        e.0 += 1;
        e.1 += i % 10 + 1;
        e.2 += i;
    }
    let mut got: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    for r in kafka::consume_all(&out, Duration::from_secs(60)) {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        assert_eq!(v["with_quantity"], v["n"], "no quantity read as NULL: {v}");
        assert_eq!(v["currency"], "EUR", "the referenced type's field: {v}");
        got.insert(
            v["venue"].as_str().unwrap().to_owned(),
            (v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap(), v["units"].as_i64().unwrap()),
        );
    }
    assert_eq!(got, expected, "v1 and v2 records read venue's default; every quantity by name or alias");
}

/// An ingress in front of the registry that answers its own HTML 404
/// (a registry node not serving yet, a route not there yet) for the first
/// requests, then passes them through: an outage, retried — not "no such
/// schema". Every record is read once the registry answers, none
/// dead-lettered. (Once, one such 404 made every later record of the id a
/// dead letter until the worker restarted.)
#[test]
fn a_404_page_from_an_ingress_is_an_outage_not_an_unknown_schema() {
    use std::io::{Read, Write};
    let (topic, out, dlq) = (unique_name("ingress-in"), unique_name("ingress-out"), unique_name("ingress-dlq"));
    kafka::create_topic(&topic, 1);
    kafka::create_topic(&out, 1);
    kafka::create_topic(&dlq, 1);
    produce_avro(&topic, "v1", 0, 300);
    let ingress = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = ingress.local_addr().unwrap().port();
    // The first four requests (more than a core's three tries) get the
    // ingress's page; the rest go through.
    let pages = ingress.try_clone().unwrap();
    let forward = std::thread::spawn(move || {
        for _ in 0..4 {
            let (mut conn, _) = pages.accept().unwrap();
            let mut request = Vec::new();
            let mut chunk = [0; 4096];
            while !String::from_utf8_lossy(&request).contains("\r\n\r\n") {
                let n = conn.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&chunk[..n]);
            }
            let page = "<html><body><h1>404 Not Found</h1>nginx</body></html>";
            let _ = write!(
                conn,
                "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
        forward_to_registry(pages);
    });
    let manifest = trades_through_registry_at(port, "ingress", (&topic, &out, &dlq));
    let m = write_temp("ingress.yaml", &manifest);
    let mut w = Worker::run(&m, &["--bounded", "--cores", "1", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    forward.join().unwrap();
    assert_eq!(final_per_symbol(&kafka::consume_all(&out, Duration::from_secs(60))), expected(0..300));
    assert!(kafka::consume_all(&dlq, Duration::from_secs(2)).is_empty(), "nothing dead-lettered:\n{}", w.log());
}
