//! JSON record bytes → columns.
//!
//! A schema-directed `serde` visitor reads each record's object straight into
//! the batch's column vectors: keys are matched to columns without hashing
//! (records of a topic almost always list fields in the same order, so the
//! column that followed the previous key is tried first), values are parsed
//! into the column's type, strings are appended to the column's shared
//! buffer. Nothing is allocated per record. Fields the query does not use are
//! type-checked but not materialised; undeclared fields are skipped.
//!
//! A record that is not a JSON object, lacks a required field, or holds a
//! value of the wrong type is rejected with a reason naming the field; the
//! batch is left exactly as before it.

mod flat;
mod nested;
mod value;

use nested::NestedSeed;
use value::NestedPath;
use value::shorten;
pub(crate) use value::{FieldName, ValueSeed};

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use sluice_plan::Batch;
use sluice_plan::{ColumnOrigin, Plan};

use super::columns::SourceColumns;
use super::encoding::Encoding;
use super::error::DecodeError;

/// A JSON source's decoder: the columns it fills, and the objects they
/// are read from.
#[derive(Debug, Clone)]
pub struct JsonDecoder {
    pub(super) columns: SourceColumns,
    /// The JSON objects the columns are read from: the record's at 0, then
    /// each nested object some column is a field of.
    pub(super) levels: Vec<Level>,
    /// No column is nested, so every entry of level 0 is a column and the
    /// flat fast path applies (metadata columns are filled after it).
    pub(super) flat: bool,
    /// Where a nested column's value is being read, for errors.
    path: NestedPath,
}

/// One JSON object's keys and what each holds.
#[derive(Debug, Clone, Default)]
pub(super) struct Level {
    /// The object's path, for messages (`bid`; empty for the record).
    path: String,
    keys: Vec<Box<[u8]>>,
    targets: Vec<Target>,
    /// Entry predicted for the key after a given entry (or at the start).
    next_after: Vec<u16>,
    /// Per key: whether its name can be matched against raw record bytes
    /// ([`JsonDecoder::predicted`]).
    in_place: Vec<bool>,
}

/// What a key of an object holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    Column(usize),
    /// The nested object at this level.
    Object(usize),
}

const NONE: u16 = u16::MAX;

impl JsonDecoder {
    pub fn new(plan: &Plan) -> Self {
        let mut levels = vec![Level::default()];
        for i in 0..plan.source.schema.fields.len() {
            match plan.source.origin(i) {
                ColumnOrigin::Field(path) => {
                    let mut level = 0;
                    for (depth, key) in path.iter().enumerate() {
                        if depth + 1 == path.len() {
                            levels[level].push(key, Target::Column(i));
                            break;
                        }
                        let existing =
                            levels[level].keys.iter().zip(&levels[level].targets).find_map(|(k, t)| match t {
                                Target::Object(l) if **k == *key.as_bytes() => Some(*l),
                                _ => None,
                            });
                        level = match existing {
                            Some(l) => l,
                            None => {
                                let nested = levels.len();
                                let path = path[..=depth].join(".");
                                levels.push(Level { path, ..Level::default() });
                                levels[level].push(key, Target::Object(nested));
                                nested
                            }
                        };
                    }
                }
                ColumnOrigin::Metadata { .. } => {}
            }
        }
        for level in &mut levels {
            level.next_after = vec![NONE; level.keys.len() + 1];
            level.in_place =
                level.keys.iter().map(|k| k.iter().all(|&b| b != b'"' && b != b'\\' && b >= 0x20)).collect();
        }
        let columns = SourceColumns::new(plan);
        let flat =
            levels.len() == 1 && !columns.types.iter().zip(&columns.used).any(|(t, used)| *used && t.is_nested());
        Self { columns, levels, flat, path: NestedPath::default() }
    }

    pub fn new_batch(&self, capacity: usize) -> Batch {
        self.columns.new_batch(capacity)
    }

    /// Appends `payload` as one row of `batch`, or explains why it cannot.
    ///
    /// Flat objects of scalars take the fast path (`flat.rs`); any
    /// record it does not handle is rolled back and decoded by the serde
    /// visitor, which gives the same result for what both accept.
    pub fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        let rows = batch.len;
        self.columns.reset_seen();
        if self.flat && self.decode_flat(payload, batch) && self.columns.finish_row(batch).is_ok() {
            batch.len = rows + 1;
            return Ok(());
        }
        self.columns.rollback(batch, rows);
        self.decode_with_serde(payload, batch)
    }

    /// The serde visitor alone, without the fast path: what `decode` falls
    /// back to, and the reference the fast path is tested and benchmarked
    /// against.
    #[doc(hidden)]
    pub fn decode_with_serde(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        let rows = batch.len;
        self.columns.reset_seen();
        let mut de = serde_json::Deserializer::from_slice(payload);
        let result = RecordSeed { dec: self, batch, level: 0 }
            .deserialize(&mut de)
            .and_then(|()| de.end())
            .map_err(|e| DecodeError(describe(&e)))
            .and_then(|()| self.columns.finish_row(batch));
        match result {
            Ok(()) => {
                batch.len = rows + 1;
                Ok(())
            }
            Err(e) => {
                self.columns.rollback(batch, rows);
                Err(e)
            }
        }
    }

    /// The entry of `level` named `key`, trying first the one that followed
    /// entry `previous` last time (`previous` = the level's key count at
    /// the start of an object).
    #[inline]
    pub(super) fn lookup(&mut self, level: usize, key: &[u8], previous: usize) -> Option<usize> {
        let level = &mut self.levels[level];
        let guess = level.next_after[previous];
        if guess != NONE && same_key(&level.keys[guess as usize], key) {
            return Some(guess as usize);
        }
        let found = level.keys.iter().position(|n| same_key(n, key))?;
        level.next_after[previous] = u16::try_from(found).unwrap_or(NONE);
        Some(found)
    }

    /// The entry predicted after entry `previous` (as for
    /// [`JsonDecoder::lookup`]) and its name — if that name can be matched
    /// against a record's raw bytes: a JSON key holding `"`, `\` or a
    /// control character has them escaped, so its raw bytes never equal
    /// the name, and such a name is never offered.
    #[inline]
    pub(super) fn predicted(&self, level: usize, previous: usize) -> Option<(usize, &[u8])> {
        let level = &self.levels[level];
        let guess = usize::from(level.next_after[previous]);
        let key = level.keys.get(guess)?;
        level.in_place[guess].then_some((guess, &**key))
    }

    /// How many keys `level` has: the "start of an object" slot of
    /// [`JsonDecoder::lookup`].
    pub(super) fn start(&self, level: usize) -> usize {
        self.levels[level].keys.len()
    }

    pub(super) fn target(&self, level: usize, entry: usize) -> Target {
        self.levels[level].targets[entry]
    }
}

impl Level {
    fn push(&mut self, key: &str, target: Target) {
        self.keys.push(key.as_bytes().into());
        self.targets.push(target);
    }
}

/// Field names are short: comparing them inline beats a call to `memcmp`
/// (measured: the call was 6 % of decoding), and comparing them a word at
/// a time beats a byte at a time (the byte loop was the hottest spot of
/// the decoder's profile). Words may overlap: 4 to 8 bytes are two 4-byte
/// words, the first and the last; longer names, 8-byte words and the last 8.
#[inline]
pub(super) fn same_key(name: &[u8], key: &[u8]) -> bool {
    fn word<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
        let mut w = [0; N];
        w.copy_from_slice(&s[at..at + N]);
        w
    }
    let n = name.len();
    if n != key.len() {
        return false;
    }
    match n {
        0..4 => name.iter().zip(key).all(|(a, b)| a == b),
        4..=8 => word::<4>(name, 0) == word::<4>(key, 0) && word::<4>(name, n - 4) == word::<4>(key, n - 4),
        _ => {
            let mut at = 0;
            while at + 8 < n {
                if word::<8>(name, at) != word::<8>(key, at) {
                    return false;
                }
                at += 8;
            }
            word::<8>(name, n - 8) == word::<8>(key, n - 8)
        }
    }
}

/// serde_json errors carry "at line 1 column 17"; keep the message short.
pub(super) fn describe(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let text = e.to_string();
    match e.classify() {
        Category::Data => text.split(" at line").next().unwrap_or(&text).to_owned(),
        Category::Syntax | Category::Eof => format!("malformed JSON: {text}"),
        Category::Io => format!("read error: {text}"),
    }
}

/// Reads the object at `level` (the record itself at 0).
struct RecordSeed<'a> {
    dec: &'a mut JsonDecoder,
    batch: &'a mut Batch,
    level: usize,
}

impl<'de> DeserializeSeed<'de> for RecordSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.level == 0 { d.deserialize_map(self) } else { d.deserialize_any(self) }
    }
}

impl<'de> Visitor<'de> for RecordSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let level = self.level;
        let mut previous = self.dec.start(level); // "start of object" slot
        while let Some(entry) = map.next_key_seed(KeySeed { dec: self.dec, level, previous })? {
            let Some(entry) = entry else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            previous = entry;
            let col = match self.dec.target(level, entry) {
                Target::Column(col) => col,
                Target::Object(nested) => {
                    map.next_value_seed(RecordSeed { dec: self.dec, batch: self.batch, level: nested })?;
                    continue;
                }
            };
            if std::mem::replace(&mut self.dec.columns.seen[col], true) {
                return Err(de::Error::custom(format_args!(
                    "duplicate field `{}`",
                    String::from_utf8_lossy(&self.dec.columns.names[col])
                )));
            }
            let data_type = self.dec.columns.types[col];
            if data_type.is_nested() {
                if !self.dec.columns.used[col] {
                    // A nested value the query never reads costs a skip.
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                self.dec.path.start(&self.dec.columns.names[col]);
                let seed = NestedSeed {
                    path: &mut self.dec.path,
                    column: &mut self.batch.columns[col],
                    required: self.dec.columns.required[col],
                };
                map.next_value_seed(seed)?;
                continue;
            }
            let field = ValueSeed {
                name: FieldName::Column(&self.dec.columns.names[col]),
                data_type: self.dec.columns.types[col],
                required: self.dec.columns.required[col],
                time_bounded: self.dec.columns.time_bounded[col],
                column: if self.dec.columns.used[col] { Some(&mut self.batch.columns[col]) } else { None },
            };
            map.next_value_seed(field)?;
        }
        Ok(())
    }

    // A nested object that is null or absent: its fields are missing.
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        Err(self.not_an_object(format_args!("boolean {v}")))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        Err(self.not_an_object(format_args!("number {v}")))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        Err(self.not_an_object(format_args!("number {v}")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        Err(self.not_an_object(format_args!("number {v}")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        let shown = shorten(v);
        Err(self.not_an_object(format_args!("string {shown:?}")))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _seq: A) -> Result<(), A::Error> {
        Err(self.not_an_object(format_args!("an array")))
    }
}

impl RecordSeed<'_> {
    fn not_an_object<E: de::Error>(&self, got: fmt::Arguments<'_>) -> E {
        E::custom(format_args!("field `{}`: expected an object, got {got}", self.dec.levels[self.level].path))
    }
}

/// Resolves a key to a column index without allocating (escaped keys
/// arrive as temporary strings and are compared on the spot).
struct KeySeed<'a> {
    dec: &'a mut JsonDecoder,
    level: usize,
    previous: usize,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<usize>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_bytes(self)
    }
}

impl Visitor<'_> for KeySeed<'_> {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.dec.lookup(self.level, v.as_bytes(), self.previous))
    }
    /// Keys arrive as raw bytes (escapes resolved, UTF-8 not yet checked):
    /// a key equal to a column name is valid UTF-8 by construction, so only
    /// unknown keys need the check.
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Option<usize>, E> {
        match self.dec.lookup(self.level, v, self.previous) {
            Some(entry) => Ok(Some(entry)),
            None if std::str::from_utf8(v).is_ok() => Ok(None),
            None => Err(E::custom("field name is not valid UTF-8")),
        }
    }
}

impl Encoding for JsonDecoder {
    fn columns(&self) -> &SourceColumns {
        &self.columns
    }

    fn columns_mut(&mut self) -> &mut SourceColumns {
        &mut self.columns
    }

    fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        JsonDecoder::decode(self, payload, batch)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::test_plan as plan;
    use sluice_plan::Scalar;

    #[test]
    fn decodes_types_nulls_and_any_field_order() {
        let p = plan("SELECT id, name, price, ts, flag FROM t");
        let mut d = JsonDecoder::new(&p);
        let mut b = d.new_batch(4);
        d.decode(
            br#"{"id":1,"name":"a\"b","price":2,"ts":"2024-01-15T00:00:00Z","flag":true,"extra":[1,{"x":2}]}"#,
            &mut b,
        )
        .unwrap();
        // Escaped keys are resolved before matching.
        d.decode(br#"{"flag":false,"ts":1700000000000,"\u0070rice":1.5,"id":2.0}"#, &mut b).unwrap();
        assert_eq!(b.len, 2);
        assert_eq!(b.columns[1].scalar(0), Scalar::String("a\"b".into()));
        assert_eq!(b.columns[1].scalar(1), Scalar::Null);
        assert_eq!(b.columns[2].scalar(0), Scalar::Double(2.0));
        assert_eq!(b.columns[2].scalar(1), Scalar::Double(1.5));
        assert_eq!(b.columns[3].scalar(0), Scalar::Timestamp(1_705_276_800_000));
        assert_eq!(b.columns[0].scalar(1), Scalar::Bigint(2));
    }

    /// Every length from 0 to 40 bytes, equal and differing at each byte.
    #[test]
    fn keys_compare_equal_exactly_when_their_bytes_are() {
        for n in 0..=40usize {
            let name: Vec<u8> = (0..n).map(|i| b'a' + u8::try_from(i % 26).unwrap()).collect();
            assert!(same_key(&name, &name.clone()), "{n} bytes");
            for at in 0..n {
                let mut other = name.clone();
                other[at] = b'_';
                assert!(!same_key(&name, &other), "{n} bytes, differing at {at}");
            }
            assert!(!same_key(&name, &name[..n.saturating_sub(1)]) || n == 0, "{n} bytes against one fewer");
        }
    }

    /// A key is first compared in place with the one that came next last
    /// time: only the whole key, closing quote included, is taken for it.
    #[test]
    fn a_predicted_key_is_taken_only_when_the_whole_key_matches() {
        let p = plan("SELECT id, name FROM t");
        let mut d = JsonDecoder::new(&p);
        let mut b = d.new_batch(8);
        d.decode(br#"{"id":1,"name":"a"}"#, &mut b).unwrap(); // learns: `name` after `id`
        d.decode(br#"{"id":2,"names":"x","name":"b"}"#, &mut b).unwrap(); // longer: undeclared
        d.decode(br#"{"id":3,"nam":"x","name":"c"}"#, &mut b).unwrap(); // shorter: undeclared
        d.decode(br#"{"id":4,"name":"d"}"#, &mut b).unwrap();
        let names: Vec<Scalar> = (0..b.len).map(|r| b.columns[1].scalar(r)).collect();
        let want: Vec<Scalar> = ["a", "b", "c", "d"].iter().map(|s| Scalar::String((*s).into())).collect();
        assert_eq!(names, want);
        // The predicted name with no closing quote is malformed JSON, not `name`.
        let e = d.decode(br#"{"id":5,"namex:"e"}"#, &mut b).unwrap_err();
        assert!(e.0.contains("malformed JSON"), "{e:?}");
        assert_eq!(b.len, 4, "the bad record left no row");
    }

    /// Reasons are logged and sent in dead letters' headers: a value in one
    /// is cut short, however long the field (a 3,000-character timestamp
    /// once made a 3,320-character log line).
    #[test]
    fn a_long_value_is_cut_short_in_its_reason() {
        let p = plan("SELECT id, name, price, ts FROM t");
        let long = "9".repeat(3_000);
        for field in ["ts", "price"] {
            let mut d = JsonDecoder::new(&p);
            let mut b = d.new_batch(1);
            let record = format!(r#"{{"id":1,"{field}":"{long}x"}}"#);
            let e = d.decode(record.as_bytes(), &mut b).unwrap_err();
            assert!(e.0.len() < 200 && e.0.contains(&format!("field `{field}`")), "{} chars: {:.300}", e.0.len(), e.0);
        }
    }

    #[test]
    fn bad_records_explain_themselves_and_leave_the_batch_intact() {
        let p = plan("SELECT id, name, price FROM t");
        let mut d = JsonDecoder::new(&p);
        let mut b = d.new_batch(4);
        d.decode(br#"{"id":1,"name":"ok","price":1}"#, &mut b).unwrap();
        let cases: [(&[u8], &str); 9] = [
            (br#"{"name":"x","price":1}"#, "missing required field `id`"),
            (b"{\"id\":1,\"\xff\":1}", "field name is not valid UTF-8"),
            (b"{\"id\":1,\"name\":\"\xff\"}", "malformed JSON"),
            (br#"{"id":null}"#, "required field `id` is null"),
            (br#"{"id":1,"price":"abc"}"#, "field `price`: expected double, got string \"abc\""),
            (br#"{"id":1.5}"#, "field `id`: expected bigint, got number 1.5"),
            (br#"{"id":1,"id":2}"#, "duplicate field `id`"),
            (br#"{"id":1,"name":"x""#, "malformed JSON"),
            (br#"[1,2]"#, "expected a JSON object"),
        ];
        for (input, reason) in cases {
            let e = d.decode(input, &mut b).unwrap_err();
            assert!(e.0.contains(reason), "{}: {e}", String::from_utf8_lossy(input));
            assert_eq!(b.len, 1);
            for c in &b.columns[..3] {
                assert_eq!(c.len(), 1, "rolled back after {}", String::from_utf8_lossy(input));
            }
        }
        d.decode(br#"{"id":3}"#, &mut b).unwrap();
        assert_eq!(b.columns[0].scalar(1), Scalar::Bigint(3));
        assert_eq!(b.columns[2].scalar(1), Scalar::Null);
    }

    #[test]
    fn timestamps_beyond_273_000_years_are_dead_letters() {
        let p = plan("SELECT id, ts FROM t");
        let mut d = JsonDecoder::new(&p);
        let mut b = d.new_batch(4);
        d.decode(br#"{"id":1,"ts":8640000000000000}"#, &mut b).unwrap();
        d.decode(br#"{"id":2,"ts":-8640000000000000}"#, &mut b).unwrap();
        for input in [
            &br#"{"id":3,"ts":8640000000000001}"#[..],
            br#"{"id":3,"ts":-9223372036854775808}"#,
            br#"{"id":3,"ts":18446744073709551615}"#,
            br#"{"id":3,"ts":9e15}"#,
        ] {
            let e = d.decode(input, &mut b).unwrap_err();
            assert!(e.0.contains("field `ts`: expected timestamp, got"), "{e}");
        }
        assert_eq!(b.len, 2);
    }
}
