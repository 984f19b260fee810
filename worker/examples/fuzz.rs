//! A deterministic mutation fuzzer for the places untrusted input enters:
//! the JSON, Avro and Protobuf decoders (every record of every source) and the SQL
//! front end (every StreamJob's query, planned by the operator too). Run by
//! `bench/fuzz.sh` at volume; not a CI step.
//!
//! ```text
//! cargo run --release -p sluice-worker --example fuzz -- json 10000000 [seed]
//! cargo run --release -p sluice-worker --example fuzz -- sql 10000000 [seed]
//! cargo run --release -p sluice-worker --example fuzz -- avro 10000000 [seed]
//! cargo run --release -p sluice-worker --example fuzz -- protobuf 10000000 [seed]
//! cargo run --release -p sluice-worker --example fuzz -- debezium 10000000 [seed]
//! cargo run --release -p sluice-worker --example fuzz -- sql 1 24301 695720   # input 695720 alone
//! ```
//!
//! Input `i` is a pure function of (target, seed, i): valid seeds mutated by
//! byte flips, insertions from a dictionary of tokens and extreme literals,
//! deletions, duplications, splices, and long runs of one token (operator
//! chains and nesting up to 20,000 deep: the trees that once overflowed a
//! planning stack and aborted the process). Each input must end in `Ok` or
//! a clean error (an abort ends the run, so a finished run had none):
//! - a panic is caught and counted, with the input printed;
//! - an input slower than the over-long limit (100 ms) is counted;
//! - a watchdog ends the run when one input takes 10 s (a hang), naming it.
//!
//! `json` also runs every input through both decoder paths (the fast path
//! and the serde visitor) and counts disagreements: same rows, same values,
//! same dead-letter reason. `avro` decodes valid datums of writer schemas
//! with every construct, mutated, and counts a record that leaves the batch
//! other than one whole row or untouched; `protobuf` does the same with
//! messages of a schema with every construct, and `debezium` with change
//! events of every kind (mutated as JSON is). `sql` runs every query that plans over records
//! holding extreme values, through the engine, to its end. `registry-schema`
//! derives columns from registry schemas (`sluice_crds::avro_columns_with`,
//! what the operator runs for every tenant) and compiles them as a
//! decoder's writer schemas: schemas with every construct, references,
//! aliases and defaults, and the hostile shapes (records whose fields
//! double at each level, chains of definitions, deep nesting), mutated;
//! a "disagreement" is a derivation past its column limit.
//! `registry-proto` does the same for Protobuf schemas
//! (`sluice_formats::registry_columns::protobuf_columns`, which the
//! operator runs too).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

use sluice_crds::ColumnType;
use sluice_formats::decode::{Encoding, JsonDecoder};
use sluice_plan::Plan;
use sluice_sql::plan_query;

const OVER_LONG: Duration = Duration::from_millis(100);
const HANG: Duration = Duration::from_secs(10);

/// xorshift64*: fast, and every input is reproducible from (seed, index).
struct Rng(u64);

impl Rng {
    fn new(seed: u64, index: u64) -> Self {
        let mut s = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for _ in 0..3 {
            s ^= s >> 33;
            s = s.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        }
        Self(s | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n.max(1) as u64)).unwrap_or(0)
    }
}

/// One input: a seed mutated 1–8 times.
fn mutate<S: AsRef<[u8]>, T: AsRef<[u8]>>(seeds: &[S], dictionary: &[T], chains: &[T], rng: &mut Rng) -> Vec<u8> {
    let mut v = seeds[rng.below(seeds.len())].as_ref().to_vec();
    // Half the inputs carry one mutation (most still parse, reaching the
    // planner and the engine), the rest up to eight (the parser's edges).
    let mutations = if rng.below(2) == 0 { 1 } else { 1 + rng.below(8) };
    for _ in 0..mutations {
        let at = rng.below(v.len() + 1);
        match rng.below(8) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => v.insert(at, u8::try_from(rng.below(256)).unwrap_or(0)),
            2 | 3 => {
                let token = dictionary[rng.below(dictionary.len())].as_ref();
                v.splice(at..at, token.iter().copied());
            }
            4 if !v.is_empty() => {
                let end = (at + 1 + rng.below(12)).min(v.len());
                v.drain(at.min(end)..end);
            }
            // A long run of one token (an operator chain, nested
            // parentheses): deep trees are what overflowed the stack.
            6 => {
                let token = chains[rng.below(chains.len())].as_ref();
                let most = if rng.below(4) == 0 { 20_000 } else { 600 };
                let times = 1 + rng.below(most);
                let run: Vec<u8> = token.iter().copied().cycle().take(token.len() * times).collect();
                v.splice(at..at, run);
            }
            5 if !v.is_empty() => {
                let start = rng.below(v.len());
                let end = (start + 1 + rng.below(16)).min(v.len());
                let piece: Vec<u8> = v[start..end].to_vec();
                v.splice(at..at, piece);
            }
            _ => {
                let other = seeds[rng.below(seeds.len())].as_ref();
                let from = rng.below(other.len());
                v.truncate(at);
                v.extend_from_slice(&other[from..]);
            }
        }
    }
    v
}

/// Avro's building blocks: small varints (union branches, lengths,
/// counts), a negative block count, over-long and 64-bit-edge varints.
const AVRO_DICTIONARY: &[&[u8]] = &[
    &[0x00],
    &[0x01],
    &[0x02],
    &[0x03],
    &[0x04],
    &[0x7f],
    &[0x80, 0x01],
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    &[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x7f],
];
/// Runs of union branch 1 (a recursive record nesting again) and of
/// array blocks.
const AVRO_CHAINS: &[&[u8]] = &[&[0x02], &[0x02, 0x02], &[0x7f, 0x00]];

/// Field keys of each wire type, lengths and extreme varints.
const PROTOBUF_DICTIONARY: &[&[u8]] = &[
    &[0x08],
    &[0x11],
    &[0x1a],
    &[0x22],
    &[0x32],
    &[0x3b],
    &[0x4d],
    // The repeated, map and packed fields (11, 12, 13) and an entry's key.
    &[0x5a],
    &[0x62],
    &[0x6a],
    &[0x68],
    &[0x0a, 0x01, b'k'],
    &[0x00],
    &[0x7f],
    &[0x80, 0x01],
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
];
/// Runs of a nested message opening inside the last (the recursive `N`).
const PROTOBUF_CHAINS: &[&[u8]] = &[&[0x1a, 0x7f], &[0x32, 0x02], &[0x5a, 0x02], &[0x80]];

const JSON_SEEDS: &[&str] = &[
    r#"{"id":1,"price":2.5,"name":"x","ts":1700000000000,"flag":true,"unread":5,"note":"n"}"#,
    r#"{"id":-0,"price":-0,"name":"x","ts":"2024-01-15T00:00:00Z","flag":true,"unread":5,"other":"y"}"#,
    r#" { "id" : 7 , "price" : 2.5e-3 , "name" : "été" , "ts" : 1700000000000 , "flag" : false } "#,
    r#"{"id":1,"price":123456789012345678901234567890,"note":"n"}"#,
    r#"{"id":9223372036854775807,"name":"a\"b\\c\u00e9","nested":{"a":[1,2,{"b":null}]},"ts":-8640000000000000}"#,
    r#"{"id":2,"price":null,"name":null,"ts":null,"flag":null}"#,
    r#"{"id":3,"id":4,"price":"1.5","flag":"true"}"#,
    r#"[1,2,3]"#,
];

const JSON_DICTIONARY: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "\"",
    "\\",
    "\\u",
    "\\ud800",
    "null",
    "true",
    "false",
    "-",
    "0",
    "1e400",
    "-0.0",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    "8640000000000001",
    "1.7976931348623157e308",
    "\"id\":",
    "\"ts\":",
    "\"price\":",
    "\"name\":",
    "\"flag\":",
    "\"2024-02-30T25:61:00Z\"",
    "\"\u{1F600}\"",
    "\u{0}",
    " ",
    "\t",
    "\n",
    "\u{FEFF}",
];

/// What the chain mutation repeats in JSON: nesting.
const JSON_CHAINS: &[&str] = &["[", "{\"a\":", "]", "}", ",1", "[{\"id\":1,\"n\":"];

/// What the chain mutation repeats in SQL: binary operators with an
/// operand, parentheses and prefix operators.
const SQL_CHAINS: &[&str] =
    &["+n", " * d", " AND n > 1", " OR s = 'a'", " || s", "(", "(n+", ")", "-", "NOT ", "COALESCE(", ",n)", " IS NULL"];

const SQL_SEEDS: &[&str] = &[
    "SELECT s, d, n FROM t WHERE n > 100",
    "SELECT s, COUNT(*) AS c, SUM(n) AS total, AVG(d) AS a FROM t GROUP BY s",
    "SELECT s, window_start, window_end, COUNT(*) AS c FROM t GROUP BY s WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)",
    "SELECT s, window_start, MAX(d) AS m FROM t GROUP BY s WINDOW HOPPING (ts, INTERVAL '10' SECOND, INTERVAL '1' SECOND) EMIT CHANGES",
    "SELECT s, window_end, MIN(n) AS m FROM t GROUP BY s WINDOW SESSION (ts, INTERVAL '5' SECOND) EMIT FINAL",
    "SELECT s, window_start, SUM(m) AS t FROM t GROUP BY s, HOP(ts AT TIME ZONE 'Europe/Paris', INTERVAL '1' HOUR, INTERVAL '1' DAY)",
    "SELECT s, d, AVG(d) OVER (ROWS WINDOW BUFFER 100 ROWS PARTITION BY s ORDER BY ts) AS a FROM t",
    "SELECT s, SUM(n) OVER (PARTITION BY s ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS r FROM t",
    "SELECT UPPER(s) AS u, CASE WHEN n BETWEEN 1 AND 9 THEN 'a' ELSE CONCAT(s, 'b') END AS k, CAST(d AS BIGINT) AS c FROM t WHERE s LIKE '%a_' AND b IS NOT NULL",
    "SELECT s, COUNT(DISTINCT n) AS v FROM t GROUP BY s HAVING COUNT(*) > 1",
    "SELECT ROUND(d, 2) AS r, ABS(n) % 7 AS m, EXTRACT(HOUR FROM ts) AS h, COALESCE(s, 'none') AS c FROM t",
    "SELECT REGEXP_REPLACE(s, '(a+)(.)', '${2}$1') AS r, MD5(s) AS m, SHA1(s) AS h1, SHA256(s) AS h2, \
     TIMESTAMPADD(MONTH, n, ts) AS t1, TIMESTAMPADD('day', -n, ts) AS t2, SPLIT_PART(s, ',', n) AS p, \
     REPEAT(s, n) AS rep, JSON_QUERY(s, '$.a[0]') AS j FROM t",
    "SELECT ts AT TIME ZONE 'Europe/Paris' AS p, TO_UTC_TIMESTAMP(ts, '-08:00') AS u, \
     CONVERT_TZ(ts, 'America/New_York', 'Australia/Lord_Howe') AS c, TIMESTAMPDIFF(MONTH, ts, TIMESTAMPADD(DAY, n, ts)) AS m, \
     TIMESTAMPDIFF('hour', ts, ts) AS h, INITCAP(s) AS i FROM t",
    "SELECT s, SUM(m) AS t, AVG(m) AS a, MAX(m * 1.1) AS x, ROUND(m / CAST(n AS DECIMAL(18, 2)), 3) AS r, \
     CAST(CAST(s AS DECIMAL(5, 2)) AS STRING) AS c FROM t GROUP BY s HAVING MIN(m) > 0.01",
    "SELECT w, SUM(w) AS t, AVG(w) AS a, MIN(w * m) AS x, ROUND(w / m, 3) AS r, CAST(w AS BIGINT) AS b, \
     CAST(CAST(s AS DECIMAL(38, 2)) AS STRING) AS c FROM t GROUP BY w HAVING MAX(w) > 123456789012345678901234567890",
];

const SQL_DICTIONARY: &[&str] = &[
    "SELECT ",
    "REGEXP_REPLACE(",
    "MD5(",
    "SHA256(",
    "SHA2(",
    "TIMESTAMPADD(",
    "TIMESTAMPDIFF(",
    " AT TIME ZONE ",
    "'Europe/Paris'",
    "CONVERT_TZ(",
    "TO_UTC_TIMESTAMP(",
    "INITCAP(",
    " AS DECIMAL(18, 4))",
    " AS DECIMAL(3, 3))",
    " AS DECIMAL(38, 10))",
    " AS DECIMAL(38, 38))",
    "m",
    "w",
    "MONTH, ",
    "YEAR, ",
    "QUARTER, ",
    " FROM ",
    " t",
    " WHERE ",
    " GROUP BY ",
    " HAVING ",
    " AS ",
    ", ",
    "(",
    ")",
    "*",
    " + ",
    " - ",
    " / ",
    " % ",
    " = ",
    " <> ",
    " AND ",
    " OR ",
    " NOT ",
    " IS NULL",
    " CASE WHEN ",
    " THEN ",
    " ELSE ",
    " END",
    "CAST(",
    " AS DOUBLE)",
    "COUNT(",
    "SUM(",
    "MIN(",
    "MAX(",
    "AVG(",
    "STDDEV(",
    "DISTINCT ",
    " OVER (",
    "PARTITION BY ",
    " ORDER BY ",
    " ROWS ",
    " PRECEDING",
    " UNBOUNDED",
    " WINDOW ",
    " TUMBLING ",
    " HOPPING ",
    " SESSION ",
    "INTERVAL '0' SECOND",
    "INTERVAL '-1' MINUTE",
    "INTERVAL '9223372036854775807' SECOND",
    " EMIT CHANGES",
    " EMIT FINAL",
    " BUFFER ",
    "window_start",
    "window_end",
    "s",
    "d",
    "n",
    "b",
    "ts",
    "0",
    "-1",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "'",
    "''",
    "\"",
    ";",
    ".",
    "t.n",
    "--",
    "/*",
    "\u{e9}",
    "::",
    "[",
    "]",
    "(SELECT s FROM t)",
    " JOIN t u ON ",
    " UNION ",
    "WITH x AS (",
    "NULL",
    "TRUE",
];

fn decoder_plan() -> Plan {
    match plan_query(fixtures::DECODER_SQL, &[fixtures::decoder_source()]) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("the decoder's plan does not plan: {e}");
            std::process::exit(2);
        }
    }
}

/// What one input did.
enum Verdict {
    Fine,
    Disagreement(String),
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let target = args.get(1).map_or("json", String::as_str).to_owned();
    let inputs: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let seed: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(0x5EED);
    // Inputs `first..first + inputs`: one input reported again, alone.
    let first: u64 = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(0);
    if ![
        "json",
        "json-nested",
        "sql",
        "avro",
        "protobuf",
        "debezium",
        "debezium-avro",
        "registry-schema",
        "registry-proto",
    ]
    .contains(&target.as_str())
    {
        eprintln!(
            "usage: fuzz json|json-nested|sql|avro|protobuf|debezium|debezium-avro|registry-schema|registry-proto \
             [inputs] [seed] [first input]"
        );
        std::process::exit(2);
    }
    // Panics are caught and reported with their input; keep the default
    // hook's backtrace noise out of the run's output.
    std::panic::set_hook(Box::new(|_| {}));
    let current = Arc::new(AtomicU64::new(u64::MAX));
    let started_at = Arc::new(AtomicU64::new(0));
    let clock = Instant::now();
    {
        let (current, started_at, target) = (Arc::clone(&current), Arc::clone(&started_at), target.clone());
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let i = current.load(Ordering::Acquire);
                let since =
                    u64::try_from(clock.elapsed().as_millis()).unwrap_or(u64::MAX) - started_at.load(Ordering::Acquire);
                if i != u64::MAX && since > u64::try_from(HANG.as_millis()).unwrap_or(u64::MAX) {
                    eprintln!("HANG: {target} input #{i} (seed {seed}) ran over {HANG:?}");
                    std::process::exit(3);
                }
            }
        });
    }

    let decoder_plan = decoder_plan();
    let schema_seeds = schema_seeds();
    let proto_seeds = proto_schema_seeds();
    let plans = [fixtures::all_types_source(ColumnType::Timestamp), fixtures::all_types_source(ColumnType::Bigint)];
    let (mut fast, mut reference) = (JsonDecoder::new(&decoder_plan), JsonDecoder::new(&decoder_plan));
    let (mut a, mut b) = (fast.new_batch(4), reference.new_batch(4));
    let avro_seeds = fixtures::avro_seeds();
    let mut avro = fixtures::avro_decoder();
    let mut avro_batch = avro.new_batch(4);
    let mut nested = fixtures::nested_json_decoder();
    let mut nested_batch = nested.new_batch(4);
    let protobuf_seeds = fixtures::protobuf_seeds();
    let mut protobuf = fixtures::protobuf_decoder();
    let mut protobuf_batch = protobuf.new_batch(4);
    let mut debezium = fixtures::debezium_decoder();
    let mut debezium_batch = debezium.new_batch(4);
    let debezium_avro_seeds = fixtures::debezium_avro_seeds();
    let mut debezium_avro = fixtures::debezium_avro_decoder();
    let (mut panics, mut over_long, mut disagreements, mut planned) = (0u64, 0u64, 0u64, 0u64);
    let mut slowest = Duration::ZERO;
    let run_started = Instant::now();
    for i in first..first.saturating_add(inputs) {
        let mut rng = Rng::new(
            seed ^ u64::from(target == "sql")
                ^ (u64::from(target == "avro") << 1)
                ^ (u64::from(target == "protobuf") << 2)
                ^ (u64::from(target == "debezium") << 3)
                ^ (u64::from(target == "debezium-avro") << 4)
                ^ (u64::from(target == "registry-schema") << 5)
                ^ (u64::from(target == "json-nested") << 6),
            i,
        );
        let input = match target.as_str() {
            "json" => mutate(JSON_SEEDS, JSON_DICTIONARY, JSON_CHAINS, &mut rng),
            "json-nested" => mutate(fixtures::NESTED_JSON_SEEDS, JSON_DICTIONARY, JSON_CHAINS, &mut rng),
            "avro" => {
                let mut v = mutate(&avro_seeds, AVRO_DICTIONARY, AVRO_CHAINS, &mut rng);
                // Mostly a known schema id: the datum is what is fuzzed.
                if v.len() >= 5 && rng.below(8) != 0 {
                    v[..5].copy_from_slice(&avro_seeds[rng.below(avro_seeds.len())][..5]);
                }
                v
            }
            "protobuf" => {
                let mut v = mutate(&protobuf_seeds, PROTOBUF_DICTIONARY, PROTOBUF_CHAINS, &mut rng);
                // Mostly a known schema and message: the message is what is fuzzed.
                if v.len() >= 7 && rng.below(8) != 0 {
                    v[..7].copy_from_slice(&protobuf_seeds[0][..7]);
                }
                v
            }
            "debezium" => mutate(fixtures::DEBEZIUM_EVENTS, JSON_DICTIONARY, JSON_CHAINS, &mut rng),
            "debezium-avro" => {
                let mut v = mutate(&debezium_avro_seeds, AVRO_DICTIONARY, AVRO_CHAINS, &mut rng);
                // Mostly the known schema id: the datum is what is fuzzed.
                if v.len() >= 5 && rng.below(8) != 0 {
                    v[..5].copy_from_slice(&debezium_avro_seeds[0][..5]);
                }
                v
            }
            "registry-schema" => mutate(&schema_seeds, JSON_DICTIONARY, SCHEMA_CHAINS, &mut rng),
            "registry-proto" => mutate(&proto_seeds, PROTO_SCHEMA_DICTIONARY, PROTO_SCHEMA_CHAINS, &mut rng),
            _ => mutate(SQL_SEEDS, SQL_DICTIONARY, SQL_CHAINS, &mut rng),
        };
        started_at.store(u64::try_from(clock.elapsed().as_millis()).unwrap_or(0), Ordering::Release);
        current.store(i, Ordering::Release);
        let t = Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if target == "registry-schema" {
                let text = String::from_utf8_lossy(&input);
                let references = [("shared.Money".to_owned(), MONEY.to_owned())];
                let derived = sluice_crds::avro_columns_with(&text, &references);
                if derived.as_ref().is_ok_and(|c| c.len() > sluice_crds::REGISTRY_MAX_COLUMNS) {
                    return Verdict::Disagreement(format!("{} columns", derived.map_or(0, |c| c.len())));
                }
                // The same text as a writer schema, compiled against a
                // source's columns (what every core does per schema id).
                avro.add_schema_with(1, &text, &references);
                return Verdict::Fine;
            }
            if target == "registry-proto" {
                let text = String::from_utf8_lossy(&input);
                let derived = sluice_formats::registry_columns::protobuf_columns(&text, &[], None);
                if derived.as_ref().is_ok_and(|c| c.len() > sluice_crds::REGISTRY_MAX_COLUMNS) {
                    return Verdict::Disagreement(format!("{} columns", derived.map_or(0, |c| c.len())));
                }
                // The same text as a writer schema, compiled against the
                // nested columns (what every core does per schema id).
                protobuf.add_schema(3, &text);
                return Verdict::Fine;
            }
            if target == "json-nested" {
                nested_batch.clear();
                return match fixtures::decode_whole_row_or_none(&mut nested_batch, |b| nested.decode(&input, b)) {
                    Ok(()) => Verdict::Fine,
                    Err(why) => Verdict::Disagreement(why),
                };
            }
            if target == "avro" {
                avro_batch.clear();
                return match fixtures::decode_whole_row_or_none(&mut avro_batch, |b| avro.decode(&input, b)) {
                    Ok(()) => Verdict::Fine,
                    Err(why) => Verdict::Disagreement(why),
                };
            }
            if target == "protobuf" {
                protobuf_batch.clear();
                return match fixtures::decode_whole_row_or_none(&mut protobuf_batch, |b| protobuf.decode(&input, b)) {
                    Ok(()) => Verdict::Fine,
                    Err(why) => Verdict::Disagreement(why),
                };
            }
            if target == "debezium" || target == "debezium-avro" {
                debezium_batch.clear();
                let meta = sluice_formats::decode::RecordMeta::default();
                return match fixtures::decode_whole_row_or_none(&mut debezium_batch, |b| {
                    if target == "debezium" {
                        debezium.decode_record(&input, &meta, b)
                    } else {
                        debezium_avro.decode_record(&input, &meta, b)
                    }
                }) {
                    Ok(()) => Verdict::Fine,
                    Err(why) => Verdict::Disagreement(why),
                };
            }
            if target == "json" {
                a.clear();
                b.clear();
                let got = fast.decode(&input, &mut a);
                let want = reference.decode_with_serde(&input, &mut b);
                if got != want || a.len != b.len || fixtures::cells(&a) != fixtures::cells(&b) {
                    return Verdict::Disagreement(format!("fast path {got:?}, visitor {want:?}"));
                }
                Verdict::Fine
            } else {
                let sql = String::from_utf8_lossy(&input);
                let Ok(plan) = plan_query(&sql, std::slice::from_ref(&plans[usize::from(i % 2 == 1)])) else {
                    return Verdict::Fine;
                };
                planned += 1;
                fixtures::run_on_extreme_records(plan);
                Verdict::Fine
            }
        }));
        let took = t.elapsed();
        slowest = slowest.max(took);
        if took > OVER_LONG {
            over_long += 1;
            eprintln!("OVER-LONG ({took:?}): {target} input #{i}: {:?}", String::from_utf8_lossy(&input));
        }
        match outcome {
            Ok(Verdict::Fine) => {}
            Ok(Verdict::Disagreement(what)) => {
                disagreements += 1;
                if disagreements <= 10 {
                    eprintln!("DISAGREEMENT: input #{i}: {:?}: {what}", String::from_utf8_lossy(&input));
                }
            }
            Err(_) => {
                panics += 1;
                if panics <= 10 {
                    eprintln!("PANIC: {target} input #{i}: {:?}", String::from_utf8_lossy(&input));
                }
                // A panic mid-decode can leave the decoders half way: start afresh.
                avro = fixtures::avro_decoder();
                avro_batch = avro.new_batch(4);
                nested = fixtures::nested_json_decoder();
                nested_batch = nested.new_batch(4);
                protobuf = fixtures::protobuf_decoder();
                protobuf_batch = protobuf.new_batch(4);
                debezium = fixtures::debezium_decoder();
                debezium_batch = debezium.new_batch(4);
                fast = JsonDecoder::new(&decoder_plan);
                reference = JsonDecoder::new(&decoder_plan);
                a = fast.new_batch(4);
                b = reference.new_batch(4);
            }
        }
    }
    current.store(u64::MAX, Ordering::Release);
    let elapsed = run_started.elapsed();
    let extra = if target == "sql" { format!(", {planned} planned and run") } else { String::new() };
    println!(
        "{target}: {inputs} inputs (seed {seed}){extra}: {panics} panics, {over_long} over {OVER_LONG:?}, 0 hangs, \
         {disagreements} disagreements; slowest {slowest:?}; {:.1}s",
        elapsed.as_secs_f64()
    );
    if panics + over_long + disagreements > 0 {
        std::process::exit(1);
    }
}

/// A shared type other schemas reference (`shared.Money`).
const MONEY: &str = r#"{"type":"record","name":"Money","namespace":"shared","fields":[
    {"name":"units","type":"long"},{"name":"currency","type":"string","default":"EUR"}]}"#;

/// Runs of one token that build the shapes a schema's size hides: nested
/// records, unions and arrays opened and never closed.
/// Protobuf schema text: keywords, types, braces, the constructs of a
/// message.
const PROTO_SCHEMA_DICTIONARY: &[&str] = &[
    "message ",
    "repeated ",
    "map<string, ",
    "map<int64, ",
    "optional ",
    "oneof o { ",
    "enum E { A = 0; } ",
    "google.protobuf.Timestamp ",
    "import \"google/protobuf/timestamp.proto\"; ",
    "bytes ",
    "string ",
    "int64 ",
    "double ",
    " = 1; ",
    " = 536870911; ",
    "{ ",
    "} ",
    "; ",
    "M ",
    ".M ",
    "syntax = \"proto2\"; ",
];
/// Messages opening inside the last, and fields of the message itself.
const PROTO_SCHEMA_CHAINS: &[&str] = &["message N { N n = 1; ", "message K { repeated K k = 1; map<string, K> m = 2; "];

const SCHEMA_CHAINS: &[&str] = &[
    r#"{"type":"record","name":"N","fields":[{"name":"f","type":"#,
    r#"{"type":"array","items":"#,
    r#"["null","#,
    r#"{"name":"x","type":"long","aliases":["a","b"],"default":1},"#,
];

/// Registry schemas to mutate: every construct, a reference, aliases and
/// defaults, and the hostile shapes at sizes that stay under the limits
/// until mutated past them.
/// Protobuf schemas with every construct column derivation meets, and the
/// hostile shapes: messages whose fields double at each level, deep
/// nesting, recursion through repeated and map fields.
fn proto_schema_seeds() -> Vec<Vec<u8>> {
    let mut doubling = String::from("syntax = \"proto3\";\nmessage M0 { int64 a = 1; int64 b = 2; }\n");
    for i in 1..20 {
        doubling.push_str(&format!("message M{i} {{ M{} x = 1; M{} y = 2; }}\n", i - 1, i - 1));
    }
    let mut deep = String::from("syntax = \"proto3\";\n");
    for i in 0..40 {
        deep.push_str(&format!("message D{i} {{ repeated int64 v = 1; "));
    }
    deep.push_str(&"}".repeat(40));
    let shop = r#"syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  message LineItem { string sku = 1; int32 qty = 2; double price = 3; optional string note = 4; bytes b = 5; }
  int64 id = 1;
  repeated LineItem items = 2;
  map<string, string> attrs = 3;
  map<int64, LineItem> by_line = 4;
  repeated sint64 packed = 5;
  google.protobuf.Timestamp at = 6;
  Node tree = 7;
  oneof pick { string a = 8; int64 b = 9; }
}
message Node { string name = 1; repeated Node children = 2; map<string, Node> named = 3; }
"#;
    [fixtures::PROTOBUF_SCHEMA, shop, &doubling, &deep].iter().map(|s| s.as_bytes().to_vec()).collect()
}

fn schema_seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = fixtures::AVRO_SCHEMAS.iter().map(|(_, s)| s.as_bytes().to_vec()).collect();
    seeds.push(
        br#"{"type":"record","name":"Order","namespace":"shop","fields":[
        {"name":"id","type":"long"},{"name":"quantity","type":"long","aliases":["units"]},
        {"name":"venue","type":["string","null"],"default":"XNAS"},{"name":"total","type":"shared.Money"},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#
            .to_vec(),
    );
    // Records whose two fields are the record before: 2^levels columns.
    let doubling = |levels: usize| {
        let mut fields = String::from(r#"{"type":"record","name":"R0","fields":[{"name":"v","type":"long"}]}"#);
        for l in 1..=levels {
            fields = format!(
                r#"{{"type":"record","name":"R{l}","fields":[{{"name":"a","type":{fields}}},{{"name":"b","type":"R{}"}}]}}"#,
                l - 1
            );
        }
        fields.into_bytes()
    };
    seeds.push(doubling(8));
    seeds.push(doubling(13));
    // A chain of definitions, each a field of the next.
    let mut chain = String::from(r#"{"type":"record","name":"C0","fields":[{"name":"v","type":"long"}]}"#);
    for i in 1..60 {
        chain = format!(r#"{{"type":"record","name":"C{i}","fields":[{{"name":"c","type":{chain}}}]}}"#);
    }
    seeds.push(chain.into_bytes());
    seeds
}
