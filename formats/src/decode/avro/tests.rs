//! The Avro decoder against values encoded here by the specification's
//! rules (the end-to-end tests read what Python's `confluent-kafka`
//! serializer writes).

use sluice_crds::{ColumnType, SourceSpec};
use sluice_plan::{Batch, Scalar};

use super::AvroDecoder;
use crate::decode::Encoding;

/// Builds one datum in Avro's binary encoding.
#[derive(Default, Clone)]
pub(in crate::decode) struct Datum(pub(in crate::decode) Vec<u8>);

#[allow(dead_code)]
impl Datum {
    pub(in crate::decode) fn framed(id: u32) -> Self {
        let mut d = Self(vec![0]);
        d.0.extend_from_slice(&id.to_be_bytes());
        d
    }
    pub(in crate::decode) fn long(mut self, v: i64) -> Self {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        loop {
            let b = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                self.0.push(b);
                return self;
            }
            self.0.push(b | 0x80);
        }
    }
    pub(in crate::decode) fn string(self, s: &str) -> Self {
        self.bytes(s.as_bytes())
    }
    pub(in crate::decode) fn bytes(self, b: &[u8]) -> Self {
        let mut d = self.long(i64::try_from(b.len()).unwrap());
        d.0.extend_from_slice(b);
        d
    }
    pub(in crate::decode) fn double(mut self, v: f64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(in crate::decode) fn float(mut self, v: f32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(in crate::decode) fn boolean(mut self, v: bool) -> Self {
        self.0.push(u8::from(v));
        self
    }
    pub(in crate::decode) fn raw(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
}

fn decoder(columns: &[(&str, ColumnType, bool)]) -> AvroDecoder {
    let source = SourceSpec::table("t", columns);
    let names: Vec<String> = columns.iter().map(|(n, ..)| format!("\"{n}\"")).collect();
    let plan = sluice_sql::plan_query(&format!("SELECT {} FROM t", names.join(", ")), &[source]).unwrap();
    AvroDecoder::new(&plan)
}

fn row(batch: &Batch, r: usize) -> Vec<Scalar> {
    batch.columns.iter().map(|c| c.scalar(r)).collect()
}

const BID_V1: &str = r#"{"type":"record","name":"Bid","fields":[
    {"name":"auction","type":"long"},
    {"name":"bidder","type":["null","string"],"default":null},
    {"name":"price","type":"double"},
    {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}}
]}"#;

/// V1 with a field added (with a default) and `bidder` removed: a
/// compatible evolution under BACKWARD and FORWARD.
const BID_V2: &str = r#"{"type":"record","name":"Bid","fields":[
    {"name":"channel","type":"string","default":""},
    {"name":"auction","type":"long"},
    {"name":"price","type":"float"},
    {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}}
]}"#;

fn bid_columns() -> Vec<(&'static str, ColumnType, bool)> {
    vec![
        ("auction", ColumnType::Bigint, true),
        ("bidder", ColumnType::String, false),
        ("price", ColumnType::Double, false),
        ("at", ColumnType::Timestamp, false),
    ]
}

#[test]
fn records_of_two_compatible_writer_schemas_read_into_the_same_columns() {
    let mut d = decoder(&bid_columns());
    let v1 = Datum::framed(7).long(1001).long(1).string("alice").double(12.5).long(1_700_000_000_000);
    let v1_null = Datum::framed(7).long(1002).long(0).double(3.0).long(5);
    let v2 = Datum::framed(9).string("web").long(1003).float(2.5).long(1_700_000_000_123_456);
    for (id, schema) in [(7, BID_V1), (9, BID_V2)] {
        assert_eq!(d.needs_schema(&Datum::framed(id).0), Some(id));
        d.add_schema(id, schema);
        assert_eq!(d.needs_schema(&Datum::framed(id).0), None);
    }
    let mut batch = d.new_batch(4);
    for v in [&v1, &v1_null, &v2] {
        d.decode(&v.0, &mut batch).unwrap();
    }
    assert_eq!(batch.len, 3);
    assert_eq!(
        row(&batch, 0),
        [
            Scalar::Bigint(1001),
            Scalar::String("alice".into()),
            Scalar::Double(12.5),
            Scalar::Timestamp(1_700_000_000_000)
        ]
    );
    assert_eq!(row(&batch, 1), [Scalar::Bigint(1002), Scalar::Null, Scalar::Double(3.0), Scalar::Timestamp(5)]);
    assert_eq!(
        row(&batch, 2),
        [Scalar::Bigint(1003), Scalar::Null, Scalar::Double(2.5), Scalar::Timestamp(1_700_000_000_123)],
        "the added field is skipped, the removed one NULL, micros read as millis"
    );
}

#[test]
fn nested_records_enums_dates_decimals_and_skipped_arrays_and_maps() {
    let schema = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"customer","type":["null",{"type":"record","name":"Customer","fields":[
            {"name":"id","type":"int"},
            {"name":"tier","type":{"type":"enum","name":"Tier","symbols":["GOLD","SILVER"]}}]}]},
        {"name":"attrs","type":{"type":"map","values":"long"}},
        {"name":"day","type":{"type":"int","logicalType":"date"}},
        {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
        {"name":"total","type":{"type":"fixed","name":"Money","size":3,"logicalType":"decimal","scale":1}},
        {"name":"ok","type":"boolean"}
    ]}"#;
    let mut d = decoder(&[
        ("customer.id", ColumnType::Bigint, false),
        ("customer.tier", ColumnType::String, false),
        ("day", ColumnType::Timestamp, true),
        ("amount", ColumnType::String, true),
        ("total", ColumnType::Double, true),
        ("ok", ColumnType::Boolean, true),
    ]);
    d.add_schema(1, schema);
    let with_customer = Datum::framed(1)
        .long(2)
        .string("a")
        .string("b")
        .long(0)
        .long(1)
        .long(42)
        .long(1)
        .long(-1)
        .long(9)
        .string("k")
        .long(5)
        .long(0)
        .long(19_000)
        .bytes(&(-12_345i32).to_be_bytes()[1..])
        .raw(&[0x00, 0x01, 0x00])
        .boolean(true);
    let without =
        Datum::framed(1).long(0).long(0).long(0).long(0).bytes(&[0x05]).raw(&[0xff, 0xff, 0xff]).boolean(false);
    let mut batch = d.new_batch(2);
    d.decode(&with_customer.0, &mut batch).unwrap();
    d.decode(&without.0, &mut batch).unwrap();
    assert_eq!(
        row(&batch, 0),
        [
            Scalar::Bigint(42),
            Scalar::String("SILVER".into()),
            Scalar::Timestamp(19_000 * 86_400_000),
            Scalar::String("-123.45".into()),
            Scalar::Double(25.6),
            Scalar::Boolean(true),
        ]
    );
    assert_eq!(
        row(&batch, 1),
        [
            Scalar::Null,
            Scalar::Null,
            Scalar::Timestamp(0),
            Scalar::String("0.05".into()),
            Scalar::Double(-0.1),
            Scalar::Boolean(false)
        ]
    );
}

#[test]
fn what_cannot_be_read_is_rejected_with_a_reason_and_leaves_the_batch_as_it_was() {
    let mut d = decoder(&bid_columns());
    d.add_schema(7, BID_V1);
    d.add_schema(8, r#"{"type":"record","name":"Bid","fields":[{"name":"price","type":"double"}]}"#);
    d.add_schema(10, r#"{"type":"record","name":"Bid","fields":[{"name":"auction","type":"string"}]}"#);
    d.add_schema(11, "{");
    d.add_unknown(12, "schema id 12 is not in the registry".into());
    let good = Datum::framed(7).long(1).long(0).double(1.0).long(1);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{\"auction\":1}".to_vec(), "not in the Confluent wire format"),
        (vec![0, 0, 0], "shorter than the wire format's 5-byte header"),
        (vec![], "empty value"),
        (Datum::framed(7).long(1).long(0).double(1.0).0, "ends at byte"),
        (good.clone().raw(&[1, 2]).0, "2 bytes after the value"),
        (Datum::framed(7).long(1).long(5).0, "union branch 5 of 2"),
        (Datum::framed(7).long(1).long(1).bytes(&[0xff]).0, "not UTF-8"),
        (Datum::framed(7).raw(&[0xff; 11]).0, "longer than"),
        (Datum::framed(7).long(1).long(0).double(1.0).long(i64::MAX).0, "outside"),
        (Datum::framed(8).double(1.0).0, "no field for required column `auction`"),
        (Datum::framed(10).string("x").0, "column `auction` is bigint, but the writer's field `auction` is string"),
        (Datum::framed(11).0, "schema id 11 is not a valid Avro schema"),
        (Datum::framed(12).0, "not in the registry"),
        (Datum::framed(13).0, "schema id 13 was not fetched"),
    ];
    let mut batch = d.new_batch(4);
    d.decode(&good.0, &mut batch).unwrap();
    for (payload, why) in cases {
        let e = d.decode(&payload, &mut batch).unwrap_err();
        assert!(e.0.contains(why), "{payload:?}: {e}");
        assert_eq!(batch.len, 1);
        assert!(batch.columns.iter().all(|c| c.len() == 1), "{payload:?}: rolled back");
    }
}

/// A few bytes of array counts claiming billions of null items, or a
/// recursive type nested past the limit, are refused, not looped over.
#[test]
fn item_counts_and_nesting_beyond_the_bytes_are_refused() {
    let mut d = decoder(&[("n", ColumnType::Bigint, false)]);
    d.add_schema(1, r#"{"type":"record","name":"R","fields":[{"name":"xs","type":{"type":"array","items":"null"}}]}"#);
    let mut bomb = Datum::framed(1);
    for _ in 0..1000 {
        bomb = bomb.long(i64::from(i32::MAX));
    }
    let e = d.decode(&bomb.long(0).0, &mut d.new_batch(1)).unwrap_err();
    assert!(e.0.contains("array or map items in a value"), "{e}");
    d.add_schema(2, r#"{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}"#);
    let mut deep = Datum::framed(2);
    for _ in 0..100 {
        deep = deep.long(1);
    }
    let e = d.decode(&deep.long(0).0, &mut d.new_batch(1)).unwrap_err();
    assert!(e.0.contains("nested more than 64"), "{e}");
    let mut shallow = Datum::framed(2);
    for _ in 0..10 {
        shallow = shallow.long(1);
    }
    let mut batch = d.new_batch(1);
    d.decode(&shallow.long(0).0, &mut batch).unwrap();
    assert_eq!(row(&batch, 0), [Scalar::Null], "no field `n`: NULL");
}

/// Flat records of values and nullable values take the flat path; nested
/// records, arrays and unions of more kinds the tree.
#[test]
fn flat_records_take_the_flat_path() {
    let mut d = decoder(&bid_columns());
    d.add_schema(7, BID_V1);
    d.add_schema(9, BID_V2);
    d.add_schema(1, r#"{"type":"record","name":"R","fields":[{"name":"auction","type":"long"},{"name":"xs","type":{"type":"array","items":"long"}}]}"#);
    let flat = |d: &AvroDecoder, id: u32| {
        let p = d.programs[&id].as_ref().unwrap();
        super::flatten(&p.root, p).is_some()
    };
    assert!(flat(&d, 7) && flat(&d, 9));
    assert!(!flat(&d, 1), "an array is skipped by the tree");
    // Unions no column reads, as most real schemas have (an optional
    // string, a union of three kinds), keep the flat path; and it reads
    // what the tree reads, each branch skipped by its own width.
    let unions = r#"{"type":"record","name":"R","fields":[
        {"name":"note","type":["null","string"],"default":null},
        {"name":"auction","type":"long"},
        {"name":"any","type":["null","long","double"]},
        {"name":"price","type":"double"}]}"#;
    d.add_schema(2, unions);
    assert!(flat(&d, 2), "unread unions are skipped on the flat path");
    let held = d.cache_bytes();
    d.add_unknown(3, "no such id".into());
    assert_eq!(d.cache_bytes(), held + "no such id".len(), "every schema counted, an unknown id's reason too");
    d.forget_unknown();
    assert_eq!(d.cache_bytes(), held);
    let records = [
        Datum::framed(2).long(1).string("a note").long(5).long(1).long(-3).double(2.5),
        Datum::framed(2).long(0).long(6).long(2).double(1.0).double(3.5),
        Datum::framed(2).long(0).long(7).long(0).double(4.5),
    ];
    let (mut flat_rows, mut tree_rows) = (d.new_batch(4), d.new_batch(4));
    for r in &records {
        d.decode(&r.0, &mut flat_rows).unwrap();
        d.decode_by_tree(&r.0, &mut tree_rows).unwrap();
    }
    let all = |b: &Batch| (0..b.len).map(|r| row(b, r)).collect::<Vec<_>>();
    assert_eq!(all(&flat_rows), all(&tree_rows));
    assert_eq!(flat_rows.columns[0].scalar(2), Scalar::Bigint(7));
    let bad_branch = Datum::framed(2).long(0).long(8).long(3).double(1.0);
    let e = d.decode(&bad_branch.0, &mut flat_rows).unwrap_err().0;
    assert!(e.contains("union"), "the tree names the branch: {e}");
}

/// A record naming an id the decoder was never given, between records of
/// a known one: refused, and still asked for; the known id's flat program
/// is not run on it.
#[test]
fn an_unknown_id_between_known_ones_is_still_reported_missing() {
    let mut d = decoder(&bid_columns());
    d.add_schema(7, BID_V1);
    let good = Datum::framed(7).long(1).long(0).double(1.0).long(1);
    let mut batch = d.new_batch(4);
    d.decode(&good.0, &mut batch).unwrap();
    let stranger = Datum::framed(8).long(1).long(0).double(1.0).long(1);
    assert_eq!(d.needs_schema(&stranger.0), Some(8));
    assert!(d.decode(&stranger.0, &mut batch).unwrap_err().0.contains("schema id 8 was not fetched"));
    assert_eq!(d.needs_schema(&stranger.0), Some(8), "still missing after a refused record");
    assert_eq!(d.needs_schema(&good.0), None);
    d.decode(&good.0, &mut batch).unwrap();
    assert_eq!(batch.len, 2);
}

/// A decimal's two's complement of up to 16 bytes, or longer where the
/// extra bytes only extend the sign (a `fixed(20)`); past that it is too
/// wide for 38 digits.
#[test]
fn decimal_bytes_read_up_to_sixteen_significant_bytes() {
    let max = sluice_plan::decimal::pow10(38) - 1;
    assert_eq!(super::values::unscaled(&max.to_be_bytes()), Some(max));
    let mut fixed20 = vec![0xff; 4];
    fixed20.extend_from_slice(&(-max).to_be_bytes());
    assert_eq!(super::values::unscaled(&fixed20), Some(-max));
    assert_eq!(super::values::unscaled(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x05]), Some(5));
    let mut too_wide = vec![0x01];
    too_wide.extend_from_slice(&[0; 16]);
    assert_eq!(super::values::unscaled(&too_wide), None, "2^128 fits no i128");
    // A dropped 0x00 whose next byte has the top bit set: the value is
    // 2^127 or more, not negative.
    let mut top = vec![0x00, 0x80];
    top.extend_from_slice(&[0; 15]);
    assert_eq!(super::values::unscaled(&top), None);
    assert_eq!(super::values::unscaled(&[0xff, 0x7f]), Some(-129));
}

/// Avro's schema resolution against the reader's aliases and defaults:
/// three writer versions of one record, interleaved — v1 writes `units`,
/// v2 renamed it `quantity` (alias `units`), v3 added `venue` (default
/// `XNAS`). Every record reads its quantity, whichever name wrote it, and
/// a record written before `venue` existed reads the default, not NULL.
/// (Once, 3,991 of 6,000 such records read NULL and every total was wrong.)
#[test]
fn a_renamed_field_is_read_by_its_alias_and_a_missing_one_takes_its_default() {
    use sluice_crds::ColumnSpec;
    let v1 = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},{"name":"units","type":"long"}]}"#;
    let v2 = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},{"name":"quantity","type":"long","aliases":["units"]}]}"#;
    let v3 = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},{"name":"quantity","type":"long","aliases":["units"]},
        {"name":"venue","type":"string","default":"XNAS"}]}"#;
    let mut source = SourceSpec::table(
        "t",
        &[
            ("id", ColumnType::Bigint, true),
            ("quantity", ColumnType::Bigint, true),
            ("venue", ColumnType::String, true),
        ],
    );
    source.schema.columns[1] = ColumnSpec { aliases: vec!["units".into()], ..source.schema.columns[1].clone() };
    source.schema.columns[2] = ColumnSpec { default: Some("XNAS".into()), ..source.schema.columns[2].clone() };
    let plan = sluice_sql::plan_query("SELECT id, quantity, venue FROM t", std::slice::from_ref(&source)).unwrap();
    let mut d = AvroDecoder::new(&plan);
    d.resolve_with(&source).unwrap();
    for (id, schema) in [(1, v1), (2, v2), (3, v3)] {
        d.add_schema(id, schema);
    }
    let mut batch = d.new_batch(8);
    let records = [
        Datum::framed(1).long(1).long(10),
        Datum::framed(3).long(2).long(20).string("XLON"),
        Datum::framed(2).long(3).long(30),
        Datum::framed(1).long(4).long(40),
        Datum::framed(3).long(5).long(50).string("XNYS"),
    ];
    for r in &records {
        d.decode(&r.0, &mut batch).unwrap();
    }
    let s = |v: &str| Scalar::String(v.into());
    let got: Vec<Vec<Scalar>> = (0..batch.len).map(|r| row(&batch, r)).collect();
    assert_eq!(
        got,
        [
            vec![Scalar::Bigint(1), Scalar::Bigint(10), s("XNAS")],
            vec![Scalar::Bigint(2), Scalar::Bigint(20), s("XLON")],
            vec![Scalar::Bigint(3), Scalar::Bigint(30), s("XNAS")],
            vec![Scalar::Bigint(4), Scalar::Bigint(40), s("XNAS")],
            vec![Scalar::Bigint(5), Scalar::Bigint(50), s("XNYS")],
        ]
    );
    // The tree agrees with the flat path.
    let mut tree = d.new_batch(8);
    for r in &records {
        d.decode_by_tree(&r.0, &mut tree).unwrap();
    }
    assert_eq!((0..tree.len).map(|r| row(&tree, r)).collect::<Vec<_>>(), got);
    // Without the alias, a v1 record has no field for required `quantity`.
    let mut bare = AvroDecoder::new(&plan);
    bare.add_schema(1, v1);
    let e = bare.decode(&records[0].0, &mut d.new_batch(1)).unwrap_err().0;
    assert!(e.contains("no field for required column `quantity`"), "{e}");
    // A default that is no value of its column's type is named.
    let mut wrong = source.clone();
    wrong.schema.columns[0].default = Some("one".into());
    let e = AvroDecoder::new(&plan).resolve_with(&wrong).unwrap_err();
    assert!(e.contains("column `id`") && e.contains("not a bigint"), "{e}");
}

/// A schema whose field's type is defined under another subject (a schema
/// reference, as Confluent's serializers register shared types): read
/// with the referenced schema's named types; without them, the type is
/// unknown.
#[test]
fn a_type_defined_in_a_referenced_schema_is_read() {
    let money = r#"{"type":"record","name":"Money","namespace":"shared","fields":[
        {"name":"units","type":"long"},{"name":"currency","type":"string"}]}"#;
    let order = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
        {"name":"id","type":"long"},{"name":"total","type":"shared.Money"}]}"#;
    let source = SourceSpec::table(
        "t",
        &[
            ("id", ColumnType::Bigint, true),
            ("total.units", ColumnType::Bigint, false),
            ("total.currency", ColumnType::String, false),
        ],
    );
    let plan =
        sluice_sql::plan_query(r#"SELECT id, "total.units", "total.currency" FROM t"#, std::slice::from_ref(&source))
            .unwrap();
    let mut d = AvroDecoder::new(&plan);
    d.add_schema_with(4, order, &[("shared.Money".to_owned(), money.to_owned())]);
    let mut batch = d.new_batch(2);
    d.decode(&Datum::framed(4).long(1).long(250).string("EUR").0, &mut batch).unwrap();
    assert_eq!(row(&batch, 0), [Scalar::Bigint(1), Scalar::Bigint(250), Scalar::String("EUR".into())]);
    d.add_schema(5, order);
    let e = d.decode(&Datum::framed(5).long(1).long(250).string("EUR").0, &mut batch).unwrap_err().0;
    assert!(e.contains("unknown type `shared.Money`"), "{e}");
}
