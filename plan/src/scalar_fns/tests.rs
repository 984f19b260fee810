//! The scalar kernels, value by value: NULLs, edge cases, multi-byte text.

use super::*;
use crate::DigestKind;
use crate::LikeToken::{AnyOne, AnyRun, Literal};

#[test]
fn general_like_matches_sql_semantics() {
    let p = |v: Vec<LikeToken>| v;
    let a_x_b = p(vec![Literal("a".into()), AnyOne, Literal("b".into()), AnyRun]);
    assert!(like_general("axb", &a_x_b));
    assert!(like_general("aébzz", &a_x_b));
    assert!(!like_general("ab", &a_x_b));
    let mid = p(vec![AnyRun, Literal("ab".into()), AnyRun, Literal("c".into())]);
    assert!(like_general("xxabyyc", &mid));
    assert!(like_general("abababc", &mid));
    assert!(!like_general("abcx", &mid));
}

fn strs(values: &[&str]) -> Column {
    let mut d = StrData::with_capacity(values.len(), 64);
    for v in values {
        d.push(v);
    }
    Column::new(DataType::String, ColumnData::Str(d), None)
}

fn texts(c: &Column) -> Vec<Option<String>> {
    (0..c.len()).map(|i| c.is_valid(i).then(|| c.str_data().unwrap().get(i).to_owned())).collect()
}

fn call(func: &ScalarFunc, arg: Column) -> Column {
    let n = arg.len();
    eval_function(func, &[std::borrow::Cow::Owned(arg)], DataType::String, n).unwrap()
}

#[test]
fn split_index_is_zero_based_and_null_past_the_end() {
    let url = strs(&["https://www.nexmark.com/a/b/item.htm", "x"]);
    let piece = |index| texts(&call(&ScalarFunc::SplitIndex { sep: "/".into(), index }, url.clone()));
    assert_eq!(piece(0), vec![Some("https:".into()), Some("x".into())]);
    assert_eq!(piece(1), vec![Some(String::new()), None]);
    assert_eq!(piece(3), vec![Some("a".into()), None]);
    assert_eq!(piece(6), vec![None, None]);
    assert_eq!(piece(-1), vec![None, None]);
    // A separator of several characters (and a multi-byte one).
    let text = strs(&["a::b::c", "x→y→z"]);
    let split = |sep: &str, index| texts(&call(&ScalarFunc::SplitIndex { sep: sep.into(), index }, text.clone()));
    assert_eq!(split("::", 1), vec![Some("b".into()), None]);
    assert_eq!(split("→", 2), vec![None, Some("z".into())]);
    assert_eq!(split("", 0), vec![None, None]);
}

#[test]
fn regexp_extract_is_null_without_a_match() {
    let urls = strs(&["https://n.com/x?query=1&channel_id=42&y=1", "https://n.com/x?query=1"]);
    let pattern = "(&|^)channel_id=([^&]*)".to_owned();
    let got = call(&ScalarFunc::RegexpExtract { pattern: pattern.clone(), group: 2 }, urls.clone());
    assert_eq!(texts(&got), vec![Some("42".into()), None]);
    let whole = call(&ScalarFunc::RegexpExtract { pattern, group: 0 }, urls);
    assert_eq!(texts(&whole), vec![Some("&channel_id=42".into()), None]);
}

#[test]
fn count_char_and_date_format() {
    let counted = eval_function(
        &ScalarFunc::CountChar('c'),
        &[std::borrow::Cow::Owned(strs(&["abcabc", "", "ccc"]))],
        DataType::Bigint,
        3,
    )
    .unwrap();
    assert_eq!(counted.data, ColumnData::Int(vec![2, 0, 3]));
    // 2015-07-15T13:04:05.007Z, and a time before the epoch.
    let ts = Column::ints(DataType::Timestamp, vec![1_436_965_445_007, -1]);
    let format = |p: &str| {
        texts(
            &eval_function(
                &ScalarFunc::DateFormat(p.into()),
                &[std::borrow::Cow::Owned(ts.clone())],
                DataType::String,
                2,
            )
            .unwrap(),
        )
    };
    assert_eq!(format("yyyy-MM-dd"), vec![Some("2015-07-15".into()), Some("1969-12-31".into())]);
    assert_eq!(format("HH:mm"), vec![Some("13:04".into()), Some("23:59".into())]);
    assert_eq!(
        format("yyyy-MM-dd'T'HH:mm:ss.SSS"),
        vec![Some("2015-07-15T13:04:05.007".into()), Some("1969-12-31T23:59:59.999".into())]
    );
}

/// Calls `func` on several argument columns.
fn call_n(func: &ScalarFunc, args: Vec<Column>, data_type: DataType) -> Column {
    let n = args[0].len();
    let args: Vec<_> = args.into_iter().map(std::borrow::Cow::Owned).collect();
    eval_function(func, &args, data_type, n).unwrap()
}

/// A string column with NULLs where `values` has `None`.
fn opt_strs(values: &[Option<&str>]) -> Column {
    let mut c = strs(&values.iter().map(|v| v.unwrap_or("")).collect::<Vec<_>>());
    c.validity = Some(values.iter().map(Option::is_some).collect());
    c
}

fn ints_with_nulls(data_type: DataType, values: &[Option<i64>]) -> Column {
    let mut c = Column::ints(data_type, values.iter().map(|v| v.unwrap_or(0)).collect());
    c.validity = Some(values.iter().map(Option::is_some).collect());
    c
}

fn some(values: &[&str]) -> Vec<Option<String>> {
    values.iter().map(|v| Some((*v).to_owned())).collect()
}

#[test]
fn replace_every_occurrence_left_to_right() {
    let text = opt_strs(&[Some("a.b.c"), Some("aaa"), Some("héllo wörld"), Some(""), None, Some("x.y")]);
    let got =
        |from: Column, to: Column| texts(&call_n(&ScalarFunc::Replace, vec![text.clone(), from, to], DataType::String));
    let six = |s: &str| strs(&[s; 6]);
    assert_eq!(
        got(six("."), six("--")),
        vec![
            Some("a--b--c".into()),
            Some("aaa".into()),
            Some("héllo wörld".into()),
            Some(String::new()),
            None,
            Some("x--y".into())
        ]
    );
    // Matches do not overlap; the replacement may be empty or longer.
    assert_eq!(got(six("aa"), six("b"))[1], Some("ba".into()));
    assert_eq!(got(six("ö"), six(""))[2], Some("héllo wrld".into()));
    assert_eq!(got(six("l"), six("LL"))[2], Some("héLLLLo wörLLd".into()));
    // An empty `from` leaves the text as it is.
    assert_eq!(got(six(""), six("!"))[0], Some("a.b.c".into()));
    // A different `from` on each row, and NULL `from` or `to`.
    let from = opt_strs(&[Some("b"), Some("a"), None, Some("x"), Some("y"), Some("y")]);
    let to = opt_strs(&[Some("B"), None, Some("z"), Some("z"), Some("z"), Some("Y")]);
    assert_eq!(got(from, to), vec![Some("a.B.c".into()), None, None, Some(String::new()), None, Some("x.Y".into())]);
}

#[test]
fn concat_ws_skips_null_arguments_and_a_null_separator_is_null() {
    let sep = opt_strs(&[Some(", "), Some("-"), None, Some("")]);
    let a = opt_strs(&[Some("a"), None, Some("a"), Some("a")]);
    let b = opt_strs(&[Some("b"), None, Some("b"), None]);
    let c = opt_strs(&[None, Some("ç"), Some("c"), Some("c")]);
    let got = call_n(&ScalarFunc::ConcatWs, vec![sep.clone(), a, b, c], DataType::String);
    assert_eq!(texts(&got), vec![Some("a, b".into()), Some("ç".into()), None, Some("ac".into())]);
    // Only NULLs to join, or nothing at all: the empty string.
    let nulls = opt_strs(&[None; 4]);
    let got = call_n(&ScalarFunc::ConcatWs, vec![sep.clone(), nulls], DataType::String);
    assert_eq!(texts(&got), vec![Some(String::new()), Some(String::new()), None, Some(String::new())]);
    assert_eq!(texts(&call_n(&ScalarFunc::ConcatWs, vec![sep], DataType::String))[0], Some(String::new()));
}

#[test]
fn lpad_and_rpad_count_characters_and_truncate() {
    let pad = |func: &ScalarFunc, s: &str, len: i64, fill: &str| {
        let args = vec![strs(&[s]), Column::ints(DataType::Bigint, vec![len]), strs(&[fill])];
        texts(&call_n(func, args, DataType::String)).remove(0)
    };
    let (l, r) = (ScalarFunc::Lpad, ScalarFunc::Rpad);
    // Flink's examples.
    assert_eq!(pad(&l, "hi", 4, "??"), Some("??hi".into()));
    assert_eq!(pad(&l, "hi", 1, "??"), Some("h".into()));
    assert_eq!(pad(&r, "hi", 4, "??"), Some("hi??".into()));
    assert_eq!(pad(&r, "hi", 1, "??"), Some("h".into()));
    // The pad repeats and is cut to fit; longer inputs keep their start.
    assert_eq!(pad(&l, "x", 6, "abc"), Some("abcabx".into()));
    assert_eq!(pad(&r, "x", 6, "abc"), Some("xabcab".into()));
    assert_eq!(pad(&r, "hello", 3, "-"), Some("hel".into()));
    assert_eq!(pad(&l, "hello", 5, "-"), Some("hello".into()));
    // Lengths are in characters, not bytes.
    assert_eq!(pad(&l, "héllo", 7, "ü"), Some("üühéllo".into()));
    assert_eq!(pad(&r, "日本", 3, "語"), Some("日本語".into()));
    assert_eq!(pad(&l, "héllo", 2, "ü"), Some("hé".into()));
    assert_eq!(pad(&r, "", 2, "éa"), Some("éa".into()));
    assert_eq!(pad(&l, "abc", 0, "x"), Some(String::new()));
    // NULL for a negative length, an empty pad (even where nothing is
    // padded) and a length past the limit.
    assert_eq!(pad(&l, "abc", -1, "x"), None);
    assert_eq!(pad(&r, "abc", 1, ""), None);
    assert_eq!(pad(&l, "abc", 5, ""), None);
    assert_eq!(pad(&r, "abc", MAX_PAD_CHARS + 1, "x"), None);
    assert_eq!(pad(&r, "", MAX_PAD_CHARS, "x").map(|s| s.len()), Some(1 << 20));
    // NULL in, NULL out, per argument.
    let args = vec![
        opt_strs(&[None, Some("a"), Some("a"), Some("a")]),
        ints_with_nulls(DataType::Bigint, &[Some(3), None, Some(3), Some(3)]),
        opt_strs(&[Some("x"), Some("x"), None, Some("x")]),
    ];
    assert_eq!(texts(&call_n(&l, args, DataType::String)), vec![None, None, None, Some("xxa".into())]);
}

#[test]
fn greatest_and_least_are_null_if_any_argument_is() {
    let a = ints_with_nulls(DataType::Bigint, &[Some(1), Some(5), None, Some(-3)]);
    let b = ints_with_nulls(DataType::Bigint, &[Some(2), Some(4), Some(0), None]);
    let c = Column::ints(DataType::Bigint, vec![0, 9, 1, 1]);
    let got = call_n(&ScalarFunc::Greatest, vec![a.clone(), b.clone(), c.clone()], DataType::Bigint);
    assert_eq!(
        (got.scalar(0), got.scalar(1), got.scalar(2), got.scalar(3)),
        (Scalar::Bigint(2), Scalar::Bigint(9), Scalar::Null, Scalar::Null)
    );
    let got = call_n(&ScalarFunc::Least, vec![a, b, c], DataType::Bigint);
    assert_eq!((got.scalar(0), got.scalar(1)), (Scalar::Bigint(0), Scalar::Bigint(4)));
    // Doubles: NaN is above every number.
    let x = Column::floats(vec![1.5, f64::NAN, -0.0]);
    let y = Column::floats(vec![-2.0, f64::INFINITY, 0.0]);
    let got = call_n(&ScalarFunc::Greatest, vec![x.clone(), y.clone()], DataType::Double);
    let ColumnData::Float(v) = &got.data else { panic!() };
    assert!(v[0] == 1.5 && v[1].is_nan() && v[2] == 0.0 && v[2].is_sign_positive(), "{v:?}");
    let got = call_n(&ScalarFunc::Least, vec![x, y], DataType::Double);
    let ColumnData::Float(v) = &got.data else { panic!() };
    assert!(v[0] == -2.0 && v[1] == f64::INFINITY && v[2].is_sign_negative(), "{v:?}");
    // Strings compare by code point; a single argument is itself.
    let s = opt_strs(&[Some("b"), Some("é"), Some("")]);
    let t = opt_strs(&[Some("ab"), Some("z"), None]);
    assert_eq!(
        texts(&call_n(&ScalarFunc::Greatest, vec![s.clone(), t.clone()], DataType::String)),
        vec![Some("b".into()), Some("é".into()), None]
    );
    assert_eq!(
        texts(&call_n(&ScalarFunc::Least, vec![s.clone(), t], DataType::String)),
        vec![Some("ab".into()), Some("z".into()), None]
    );
    assert_eq!(texts(&call_n(&ScalarFunc::Least, vec![s], DataType::String)), some(&["b", "é", ""]));
    // Timestamps stay timestamps.
    let ts = Column::ints(DataType::Timestamp, vec![10, 20]);
    let us = Column::ints(DataType::Timestamp, vec![15, 5]);
    let got = call_n(&ScalarFunc::Greatest, vec![ts, us], DataType::Timestamp);
    assert_eq!((got.scalar(0), got.scalar(1)), (Scalar::Timestamp(15), Scalar::Timestamp(20)));
}

#[test]
fn date_trunc_keeps_nulls() {
    let ts = ints_with_nulls(DataType::Timestamp, &[Some(1_436_965_445_007), None, Some(-1)]);
    let got = call_n(&ScalarFunc::DateTrunc(TimePart::Hour), vec![ts], DataType::Timestamp);
    assert_eq!(got.data_type, DataType::Timestamp);
    assert_eq!(
        (got.scalar(0), got.scalar(1), got.scalar(2)),
        (Scalar::Timestamp(1_436_965_200_000), Scalar::Null, Scalar::Timestamp(-3_600_000))
    );
}

#[test]
fn to_timestamp_reads_a_date_format_pattern() {
    let read = |format: &str, values: &[Option<&str>]| {
        let got = call_n(&ScalarFunc::ToTimestamp(format.into()), vec![opt_strs(values)], DataType::Timestamp);
        (0..got.len()).map(|i| got.scalar(i)).collect::<Vec<_>>()
    };
    let ts = |s: &str| Scalar::Timestamp(parse_timestamp_ms(s).unwrap());
    assert_eq!(
        read(
            "yyyy-MM-dd HH:mm:ss",
            &[Some("2015-07-15 13:04:05"), None, Some("2015-07-15"), Some("2015-07-15 13:04:05 ")]
        ),
        vec![ts("2015-07-15T13:04:05Z"), Scalar::Null, Scalar::Null, Scalar::Null]
    );
    assert_eq!(
        read("dd/MM/yyyy'T'HH:mm:ss.SSS", &[Some("31/12/1969T23:59:59.999"), Some("1/12/1969T23:59:59.999")]),
        vec![Scalar::Timestamp(-1), Scalar::Null]
    );
    // Missing fields are those of the epoch; impossible dates and times are NULL.
    assert_eq!(
        read("yyyyMMdd", &[Some("20240229"), Some("20230229"), Some("2024-02-2")]),
        vec![ts("2024-02-29"), Scalar::Null, Scalar::Null]
    );
    assert_eq!(
        read("HH:mm", &[Some("01:30"), Some("24:00"), Some("01:60")]),
        vec![Scalar::Timestamp(5_400_000), Scalar::Null, Scalar::Null]
    );
}

#[test]
fn json_value_over_a_column() {
    let docs = opt_strs(&[
        Some(r#"{"user": {"name": "Zoë", "tags": ["a", "b"]}}"#),
        None,
        Some("not json"),
        Some(r#"{"user": {"name": null}}"#),
    ]);
    let path = |p: &str| ScalarFunc::JsonValue(crate::parse_json_path(p).unwrap());
    assert_eq!(texts(&call(&path("$.user.name"), docs.clone())), vec![Some("Zoë".into()), None, None, None]);
    assert_eq!(texts(&call(&path("$.user.tags[1]"), docs.clone())), vec![Some("b".into()), None, None, None]);
    assert_eq!(texts(&call(&path("$.user.tags"), docs)), vec![None; 4]);
}

#[test]
fn round_half_away_from_zero() {
    assert_eq!(round_to(2.345, 2), 2.35);
    assert_eq!(round_to(-2.5, 0), -3.0);
    assert_eq!(round_to(1234.5, -2), 1200.0);
}

#[test]
fn round_bigint_to_tens_is_symmetric() {
    let c = Column::ints(DataType::Bigint, vec![15, -15, -5, 14, -14]);
    let d = Column::ints(DataType::Bigint, vec![-1; 5]);
    let out = numeric(&ScalarFunc::Round, &c, Some(&d), DataType::Bigint).unwrap();
    assert_eq!(out.data, ColumnData::Int(vec![20, -20, -10, 10, -10]));
}

/// REPEAT is bounded by what it would produce, not by the count: an empty
/// string any number of times is empty at once (a count near i64::MAX
/// once looped that many times), a long result is NULL.
#[test]
fn repeat_is_bounded_by_its_result_not_its_count() {
    let s = strs(&["", "ab", "ab"]);
    let k = ints_with_nulls(DataType::Bigint, &[Some(i64::MAX), Some(3), Some(i64::MAX)]);
    let out = call_n(&ScalarFunc::Repeat, vec![s, k], DataType::String);
    assert_eq!(texts(&out), vec![Some(String::new()), Some("ababab".into()), None]);
}

/// SHA2's lengths against the "abc" examples of FIPS 180-2 (Appendices
/// B, C, D) and its SHA-224 addendum: the oracle, DuckDB, has only SHA-256.
#[test]
fn sha2_lengths_match_the_fips_examples() {
    let digest = |kind| texts(&call(&ScalarFunc::Digest(kind), strs(&["abc"])))[0].clone().unwrap();
    assert_eq!(digest(DigestKind::Sha224), "23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7");
    assert_eq!(digest(DigestKind::Sha256), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_eq!(
        digest(DigestKind::Sha384),
        "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7"
    );
    assert_eq!(
        digest(DigestKind::Sha512),
        "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd\
         454d4423643ce80e2a9ac94fa54ca49f"
    );
}
