#!/usr/bin/env python3
"""Expected results for Sluice's golden SQL cases, computed without Sluice.

Why this exists: a golden test is only worth something when its expected
output does not come from the code under test. This script reads every case
in ``cases/*.yaml``, validates and decodes the case's input records itself
(following docs/sql.md, "Types and JSON" -- it deliberately shares no code
and no logic with the Rust decoder), loads the valid rows into DuckDB, and
runs the case's ``oracle`` query -- an ordinary SQL query, written by hand,
that states what the Sluice query must produce -- to write
``expected/<case>.json``. The Rust runner (``worker/tests/golden.rs``) then
checks the engine against those files.

What an oracle query sees: a table ``input`` with the source's declared
columns (bigint -> BIGINT, double -> DOUBLE, string -> VARCHAR, boolean ->
BOOLEAN, timestamp -> BIGINT epoch milliseconds; nested ones as
array<T> -> T[], map<K, V> -> MAP(K, V), row<a T, ...> -> STRUCT(a T, ...),
timestamps inside them BIGINT too, so an oracle writes ``ts_text`` of
them where Sluice writes a timestamp's text), plus

* ``_partition`` (INTEGER): the Kafka partition the record came from;
* ``_seq`` (BIGINT): 0-based arrival index among the valid records of that
  partition;
* ``_deleted`` (BOOLEAN, only for a source declared as a table): the record
  deletes the row with its primary key (its ``__deleted`` field is true);
* ``_watermark`` (BIGINT, only when the source declares eventTime): the
  partition's watermark just before the record arrived, i.e. the largest
  event time of the preceding valid records of the partition minus
  ``watermarkDelayMillis`` (the smallest BIGINT when there is none);

a macro ``initcap(s)`` (PostgreSQL's, which DuckDB lacks: each letter or
digit after one that is neither upper case, the others lower case), and
``first_instant(local, zone)`` (the instant a zone's clock reads a
timestamp without zone, the first of two where the clock repeats it, as
Sluice reads it), ``ts_text(ms)`` that renders epoch milliseconds the way Sluice
writes timestamps (``2024-01-15T09:30:00.000Z``), and ``wrap_bigint(h)``
that wraps a HUGEINT into bigint range as Sluice's bigint arithmetic does on
overflow. An optional
``oracle_late`` query returns one integer: how many records are late.

Nested values are decoded by the rules of Sluice's JSON reader: an array
from a JSON array, a map from a JSON object (a bigint key from its text),
a row from a JSON object (fields by exact name, else ignoring ASCII case;
other keys ignored; a field given twice, or any other shape, fails the
record), each element read as a column of its type. The oracle's nested
results are written as Sluice writes them: a list as a JSON array, a row
or a map (dicts in DuckDB's Python API) as an object, keys as text.

Usage (deps: duckdb and pyyaml, see requirements.txt):

    python3 -m venv ~/.cache/sluice/venv-golden
    ~/.cache/sluice/venv-golden/bin/pip install -r worker/tests/golden/requirements.txt
    ~/.cache/sluice/venv-golden/bin/python worker/tests/golden/oracle.py           # write all expected files
    ~/.cache/sluice/venv-golden/bin/python worker/tests/golden/oracle.py NAME ...  # only these cases
    ~/.cache/sluice/venv-golden/bin/python worker/tests/golden/oracle.py --check   # CI: fail if any file is stale
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import sys
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, getcontext
from pathlib import Path

import duckdb
import yaml

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases"
EXPECTED = HERE / "expected"

# Room for every digit of a DECIMAL(38, s) value and more: Python's
# default context keeps 28 significant digits and would round them.
getcontext().prec = 100

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1

SQL_TYPES = {
    "bigint": "BIGINT",
    "double": "DOUBLE",
    "string": "VARCHAR",
    "boolean": "BOOLEAN",
    "timestamp": "BIGINT",
}

# decimal(p,s) columns: exact, as DuckDB's DECIMAL(p,s).
_DECIMAL_TYPE = re.compile(r"^decimal\( *(\d+) *(?:, *(\d+) *)?\)$")
# The text Sluice reads as a decimal (docs/sql.md, "Types and JSON").
_DECIMAL_TEXT = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")


def decimal_type(col_type: str):
    """(precision, scale) of a decimal column type, or None."""
    m = _DECIMAL_TYPE.match(col_type)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def parse_type(text: str):
    """A manifest's column type -> a flat type's name (`bigint`,
    `decimal(9,2)`), or ("array", T), ("map", K, V), ("row", [(name, T)])."""
    pos = 0

    def space():
        nonlocal pos
        while pos < len(text) and text[pos].isspace():
            pos += 1

    def eat(token: str) -> bool:
        nonlocal pos
        space()
        if text.startswith(token, pos):
            pos += len(token)
            return True
        return False

    def expect(token: str):
        if not eat(token):
            raise SystemExit(f"column type {text!r}: expected {token!r} at {pos}")

    def word() -> str:
        nonlocal pos
        space()
        m = re.compile(r"[A-Za-z0-9_]*").match(text, pos)
        pos = m.end()
        return m.group(0)

    def field_name() -> str:
        nonlocal pos
        space()
        if not text.startswith('"', pos):
            name = word()
            if not name:
                raise SystemExit(f"column type {text!r}: expected a field name at {pos}")
            return name
        name, pos = "", pos + 1
        while True:
            end = text.find('"', pos)
            if end < 0:
                raise SystemExit(f"column type {text!r}: unterminated field name")
            name += text[pos:end]
            pos = end + 1
            if text.startswith('"', pos):  # "" is a quote
                name += '"'
                pos += 1
            else:
                return name

    def one():
        w = word()
        if w in SQL_TYPES:
            return w
        if w == "decimal":
            expect("(")
            p, s = word(), "0"
            if eat(","):
                s = word()
            expect(")")
            if not (p.isdigit() and s.isdigit()):
                raise SystemExit(f"column type {text!r}: bad decimal")
            return f"decimal({int(p)},{int(s)})"
        if w == "array":
            expect("<")
            t = one()
            expect(">")
            return ("array", t)
        if w == "map":
            expect("<")
            k = one()
            expect(",")
            v = one()
            expect(">")
            if k not in ("string", "bigint"):
                raise SystemExit(f"column type {text!r}: a map key is string or bigint")
            return ("map", k, v)
        if w == "row":
            expect("<")
            fields = []
            while True:
                name = field_name()
                fields.append((name, one()))
                if not eat(","):
                    break
            expect(">")
            return ("row", fields)
        raise SystemExit(f"unknown column type {text!r}")

    t = one()
    space()
    if pos != len(text):
        raise SystemExit(f"column type {text!r}: unexpected {text[pos:]!r}")
    return t


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_type(col_type) -> str:
    """DuckDB's type for a column type (its text or parse_type's tree):
    array<T> -> T[], map<K, V> -> MAP(K, V), row<a T> -> STRUCT("a" T)."""
    t = parse_type(col_type) if isinstance(col_type, str) else col_type
    if isinstance(t, tuple):
        if t[0] == "array":
            return f"{sql_type(t[1])}[]"
        if t[0] == "map":
            return f"MAP({sql_type(t[1])}, {sql_type(t[2])})"
        return "STRUCT(" + ", ".join(f"{_quote(n)} {sql_type(ft)}" for n, ft in t[1]) + ")"
    d = decimal_type(t)
    if d:
        return f"DECIMAL({d[0]},{d[1]})"
    return SQL_TYPES[t]


def to_decimal(value, precision: int, scale: int) -> Decimal:
    """A JSON number or string -> a decimal rounded half away from zero to
    `scale` places; Invalid when it is no number or needs more digits."""
    if isinstance(value, bool):
        raise Invalid("boolean where a decimal is expected")
    if isinstance(value, str):
        if not _DECIMAL_TEXT.match(value):
            raise Invalid(f"{value!r} is not a decimal")
        value = Decimal(value.strip())
    elif isinstance(value, (int, Decimal)):
        value = Decimal(value)
    else:
        raise Invalid(f"{value!r} is not a number")
    try:
        q = value.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    except InvalidOperation:
        raise Invalid(f"{value!r} does not fit") from None
    if abs(q) >= Decimal(10) ** (precision - scale):
        raise Invalid(f"{value!r} does not fit decimal({precision},{scale})")
    return q

# ts_text: Sluice's timestamp text (UTC, millisecond precision, literal T and Z).
# wrap_bigint: a HUGEINT wrapped into bigint range (two's complement), as
# Sluice's bigint arithmetic wraps on overflow where DuckDB raises an error.
MACROS = [
    """CREATE MACRO ts_text(ms) AS
         strftime(make_timestamp(CAST(ms AS BIGINT) * 1000), '%Y-%m-%dT%H:%M:%S.%g') || 'Z'""",
    r"""CREATE MACRO initcap(s) AS CASE WHEN s IS NOT NULL THEN array_to_string(list_transform(
         range(1, length(s) + 1),
         lambda i: CASE WHEN regexp_matches(substr(s, i, 1), '[\pL\pN]')
                    AND (i = 1 OR NOT regexp_matches(substr(s, i - 1, 1), '[\pL\pN]'))
                   THEN upper(substr(s, i, 1)) ELSE lower(substr(s, i, 1)) END), '') END""",
    # The instant a zone's wall clock reads `local`, the first of two
    # where the clock repeats it (java.time's and Sluice's rule; DuckDB's
    # AT TIME ZONE gives the second). Clock changes of an hour.
    """CREATE MACRO first_instant(local, zone) AS CASE
         WHEN ((local AT TIME ZONE zone) - INTERVAL 1 HOUR) AT TIME ZONE zone = local
         THEN (local AT TIME ZONE zone) - INTERVAL 1 HOUR
         ELSE local AT TIME ZONE zone END""",
    # A decimal's unscaled digits (DuckDB prints every place of its scale).
    """CREATE MACRO unscaled(x) AS CAST(replace(CAST(x AS VARCHAR), '.', '') AS HUGEINT)""",
    # a / b for a of scale sa and b of scale sb, at scale 6, rounded half
    # away from zero: Sluice's decimal quotient (DuckDB's is a DOUBLE).
    """CREATE MACRO dec_div6(a, sa, b, sb) AS CASE WHEN unscaled(b) = 0 THEN NULL ELSE
         CAST(sign(unscaled(a)) * sign(unscaled(b))
              * ((abs(unscaled(a)) * CAST(pow(10, 6 - sa + sb) AS HUGEINT) * 2 + abs(unscaled(b)))
                 // (2 * abs(unscaled(b)))) AS DECIMAL(38,0))
         * CAST('0.000001' AS DECIMAL(7,6)) END""",
    """CREATE MACRO wrap_bigint(h) AS CAST(
         ((CAST(h AS HUGEINT) + 9223372036854775808) % 18446744073709551616 + 18446744073709551616)
         % 18446744073709551616 - 9223372036854775808 AS BIGINT)""",
]


def dec_mul(a, b, scale):
    """a * b as decimal text (DuckDB's DECIMAL text in and out), exact and
    rounded half away from zero to `scale` places: a product whose exact
    form passes 38 digits, which DuckDB's DECIMAL multiplication refuses
    and Sluice computes in 256 bits."""
    if a is None or b is None:
        return None
    product = Decimal(a) * Decimal(b)
    return str(product.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP))


class Invalid(Exception):
    """A record that goes to the dead-letter output."""


# ---------------------------------------------------------------------------
# Decoding (docs/sql.md, "Types and JSON")
# ---------------------------------------------------------------------------


def _reject_duplicates(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise Invalid(f"field {k!r} repeated")
        obj[k] = v
    return obj


def _reject_constant(name):
    # Python's json accepts NaN / Infinity / -Infinity; JSON does not.
    raise Invalid(f"{name} is not JSON")


def _integral(v) -> int:
    """An int, or a float with an integral value, as an int in i64 range."""
    if isinstance(v, bool):
        raise Invalid("boolean where a number is expected")
    if isinstance(v, int):
        n = v
    elif isinstance(v, (float, Decimal)):
        if not v.is_finite() if isinstance(v, Decimal) else not math.isfinite(v):
            raise Invalid(f"{v!r} is not an integer")
        if v != math.floor(v):
            raise Invalid(f"{v!r} is not an integer")
        n = int(v)
    else:
        raise Invalid(f"{v!r} is not a number")
    if not I64_MIN <= n <= I64_MAX:
        raise Invalid(f"{v!r} is out of range")
    return n


_TS_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})"
    r"(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
    r"(Z|z|[+-]\d{2}:\d{2})?$"
)


def parse_timestamp_text(s: str) -> int:
    """RFC 3339 or `YYYY-MM-DD[ HH:MM[:SS[.fff]]][Z|+-HH:MM]` -> epoch ms (UTC when no offset)."""
    m = _TS_RE.match(s)
    if not m:
        raise Invalid(f"{s!r} is not a timestamp")
    year, month, day, hh, mm, ss, frac, zone = m.groups()
    try:
        t = dt.datetime(
            int(year), int(month), int(day), int(hh or 0), int(mm or 0), int(ss or 0), tzinfo=dt.timezone.utc
        )
    except ValueError as e:
        raise Invalid(f"{s!r}: {e}") from None
    ms = int((t - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)).total_seconds()) * 1000
    if frac:
        ms += int((frac + "00")[:3])  # milliseconds; finer digits are cut
    if zone and zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        zh, zm = int(zone[1:3]), int(zone[4:6])
        if zh > 23 or zm > 59:
            raise Invalid(f"{s!r}: bad offset")
        ms -= sign * (zh * 3600 + zm * 60) * 1000
    return ms


_MAP_BIGINT_KEY = re.compile(r"[+-]?[0-9]+")


def _ascii_lower(name: str) -> str:
    return "".join(c.lower() if c.isascii() else c for c in name)


def convert_nested(value, t):
    """A JSON value -> an array (a list), a map (DuckDB's {"key": [...],
    "value": [...]}, entries in JSON order) or a row (a dict of every field,
    in declared order); each element, value or field read as a column of
    its type is. Invalid when the JSON has another shape."""
    kind = t[0]
    if kind == "array":
        if not isinstance(value, list):
            raise Invalid(f"{value!r} is not an array")
        return [convert(v, t[1]) for v in value]
    if not isinstance(value, dict):
        raise Invalid(f"{value!r} is not an object")
    if kind == "map":
        keys, values = [], []
        for k, v in value.items():
            if t[1] == "bigint":
                if not _MAP_BIGINT_KEY.fullmatch(k) or not I64_MIN <= int(k) <= I64_MAX:
                    raise Invalid(f"map key {k!r} is not a bigint")
                k = int(k)
            keys.append(k)
            values.append(convert(v, t[2]))
        return {"key": keys, "value": values}
    # A row: each key names the field of that exact name, else the first
    # whose name matches it ignoring case; other keys are ignored.
    fields = t[1]
    out = {name: None for name, _ in fields}
    seen = set()
    for k, v in value.items():
        f = next((i for i, (n, _) in enumerate(fields) if n == k), None)
        if f is None:
            f = next((i for i, (n, _) in enumerate(fields) if _ascii_lower(n) == _ascii_lower(k)), None)
        if f is None:
            continue
        if f in seen:
            raise Invalid(f"field {fields[f][0]!r} given twice")
        seen.add(f)
        out[fields[f][0]] = convert(v, fields[f][1])
    return out


def convert(value, col_type):
    """A JSON value -> the Python value of a column of `col_type` (its text
    or parse_type's tree; None for NULL)."""
    if value is None:
        return None
    if isinstance(col_type, tuple):
        return convert_nested(value, col_type)
    if col_type == "bigint":
        return _integral(value)
    d = decimal_type(col_type)
    if d:
        return to_decimal(value, *d)
    if col_type == "double":
        if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
            raise Invalid(f"{value!r} is not a number")
        f = float(value)
        if not math.isfinite(f):
            raise Invalid(f"{value!r} is out of range")
        return f
    if col_type == "string":
        if not isinstance(value, str):
            raise Invalid(f"{value!r} is not a string")
        return value
    if col_type == "boolean":
        if not isinstance(value, bool):
            raise Invalid(f"{value!r} is not a boolean")
        return value
    if col_type == "timestamp":
        if isinstance(value, str):
            return parse_timestamp_text(value)
        return _integral(value)
    raise SystemExit(f"unknown column type {col_type!r}")


def field(obj: dict, name: str):
    """The value a column names: `bid.price` is obj["bid"]["price"]; a null or
    absent object has null fields, anything else in its place is invalid."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        obj = obj.get(part)
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise Invalid(f"{'.'.join(parts[: i + 1])} is not an object")
    return obj.get(parts[-1])


def decode(payload: str, columns, required) -> list:
    """One record -> a row of column values, or Invalid."""
    try:
        # Numbers with a point or exponent as Decimal: a decimal column
        # keeps every digit (a double column converts it, correctly rounded).
        obj = json.loads(
            payload, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant, parse_float=Decimal
        )
    except ValueError as e:
        raise Invalid(f"malformed JSON: {e}") from None
    if not isinstance(obj, dict):
        raise Invalid("not a JSON object")
    row = []
    for col, req in zip(columns, required):
        v = convert(field(obj, col["name"]), parse_type(col["type"]))
        if v is None and req:
            raise Invalid(f"required column {col['name']!r} is missing or null")
        row.append(v)
    return row


# ---------------------------------------------------------------------------
# Running a case
# ---------------------------------------------------------------------------


def partitions(text: str):
    """`<partition> <payload>` lines -> [(partition, payload)] in input order."""
    out = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        p, _, payload = line.partition(" ")
        out.append((int(p), payload))
    return out


def nested_json_value(v):
    """json_value inside an array, map or row: a decimal of scale 0 as a
    JSON integer, as Sluice writes it (elsewhere a float: the runner
    compares top-level numbers approximately, array elements exactly)."""
    if isinstance(v, Decimal) and v.is_finite() and v.as_tuple().exponent >= 0:
        return int(v)
    return json_value(v)


def json_value(v):
    if v is None or isinstance(v, (bool, str, int)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Decimal):
        return json_value(float(v))
    # Nested results: an array as a JSON array; a row (a dict) and a map (a
    # dict from DuckDB's Python API) as a JSON object, keys as text.
    if isinstance(v, (list, tuple)):
        return [nested_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): nested_json_value(x) for k, x in v.items()}
    raise SystemExit(f"oracle returned a {type(v).__name__} ({v!r}): cast it to a number or a string (ts_text)")


def load(con, table: str, source: dict, text: str) -> int:
    """Decodes a source's input lines into `table`; returns the dead letters."""
    columns = source["columns"]
    for c in columns:
        sql_type(c["type"])
    event_time = source.get("eventTime")
    as_table = source.get("table")
    required = [bool(c.get("required", False)) for c in columns]
    if as_table:
        # A table's deletion carries only its key: the other columns may be
        # absent (docs/sql.md, "Stream-table joins").
        key = set(as_table["primaryKey"])
        required = [r and c["name"] in key for r, c in zip(required, columns)]
    et_index = None
    delay = 0
    if event_time:
        names = [c["name"].lower() for c in columns]
        et_index = names.index(event_time["column"].lower())
        required[et_index] = True  # the event-time column is always required
        delay = max(0, int(event_time.get("watermarkDelayMillis", 0)))

    rows = []
    dead_letter = 0
    seq: dict[int, int] = {}
    max_event: dict[int, int] = {}
    for partition, payload in partitions(text):
        try:
            values = decode(payload, columns, required)
        except Invalid:
            dead_letter += 1
            continue
        s = seq.get(partition, 0)
        seq[partition] = s + 1
        extra = [partition, s]
        if as_table:
            extra.append(json.loads(payload).get("__deleted") is True)
        if et_index is not None:
            before = max_event.get(partition)
            extra.append(I64_MIN if before is None else before - delay)
            ts = values[et_index]
            max_event[partition] = ts if before is None else max(before, ts)
        rows.append(values + extra)

    defs = [f'"{c["name"]}" {sql_type(c["type"])}' for c in columns]
    defs += ["_partition INTEGER", "_seq BIGINT"]
    if as_table:
        defs.append("_deleted BOOLEAN")
    if et_index is not None:
        defs.append("_watermark BIGINT")
    con.execute(f"CREATE TABLE {table} ({', '.join(defs)})")
    if rows:
        placeholders = ", ".join("?" for _ in defs)
        con.executemany(f"INSERT INTO {table} VALUES ({placeholders})", rows)
    return dead_letter


def deletion_as_written(row: dict) -> dict:
    """An oracle's `__deleted` column: true makes the row a deletion, which
    the sink writes as its key alone (`{"__deleted":true,<key>}`), so the
    NULLs beside the key are left out; NULL makes it an ordinary row."""
    if "__deleted" not in row:
        return row
    if row["__deleted"] is True:
        return {k: v for k, v in row.items() if v is not None}
    return {k: v for k, v in row.items() if k != "__deleted"}


def compute(case: dict) -> dict:
    con = duckdb.connect(":memory:")
    con.execute("SET threads = 1")  # deterministic floating-point sums
    con.execute("SET TimeZone = 'UTC'")
    for macro in MACROS:
        con.execute(macro)
    con.create_function("dec_mul", dec_mul, ["VARCHAR", "VARCHAR", "INTEGER"], "VARCHAR", null_handling="special")
    dead_letter = load(con, "input", case["source"], case.get("input", ""))
    # A case over two sources (UNION ALL, joins) has the second as table
    # input2; a join of a join, the third as input3.
    if case.get("second_source"):
        dead_letter += load(con, "input2", case["second_source"], case.get("second_input", ""))
    if case.get("third_source"):
        dead_letter += load(con, "input3", case["third_source"], case.get("third_input", ""))

    cur = con.execute(case["oracle"])
    names = [d[0] for d in cur.description]
    out_rows = [deletion_as_written({n: json_value(v) for n, v in zip(names, r)}) for r in cur.fetchall()]
    out_rows.sort(key=lambda r: json.dumps(r, sort_keys=True))
    late = 0
    if case.get("oracle_late"):
        result = con.execute(case["oracle_late"]).fetchall()
        if len(result) != 1 or len(result[0]) != 1:
            raise SystemExit("oracle_late must return one row with one integer")
        late = int(result[0][0] or 0)
    con.close()
    return {"rows": out_rows, "dead_letter": dead_letter, "late": late}


def render(expected: dict) -> str:
    return json.dumps(expected, indent=2, ensure_ascii=False) + "\n"


def same(a, b) -> bool:
    """Equal, with floats compared to 1e-12 (relative), so --check does not
    depend on the last bit of a DuckDB version's floating-point sums."""
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            return False
        return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b), 1.0)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="recompute and fail if any expected file differs")
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    args = ap.parse_args()

    files = sorted(CASES.glob("*.yaml"))
    if args.cases:
        wanted = set(args.cases)
        files = [f for f in files if f.stem in wanted]
        missing = wanted - {f.stem for f in files}
        if missing:
            print(f"no such case: {', '.join(sorted(missing))}", file=sys.stderr)
            return 2
    EXPECTED.mkdir(exist_ok=True)
    problems = []
    with_oracle = set()
    for f in files:
        name = f.stem
        case = yaml.safe_load(f.read_text(encoding="utf-8"))
        # Long generated inputs (the Nexmark events) live in files beside
        # the cases: `input_file: nexmark/bid.txt` is `input:` with that text.
        for field in ("input", "second_input", "third_input"):
            if case.get(f"{field}_file"):
                case[field] = (HERE / case[f"{field}_file"]).read_text(encoding="utf-8")
        out = EXPECTED / f"{name}.json"
        if not case.get("oracle"):
            if not case.get("expect_error"):
                problems.append(f"{name}: neither oracle nor expect_error")
            continue
        with_oracle.add(name)
        try:
            expected = compute(case)
        except (duckdb.Error, KeyError, ValueError) as e:
            problems.append(f"{name}: {type(e).__name__}: {e}")
            continue
        if args.check:
            if not out.exists():
                problems.append(f"{name}: {out.relative_to(HERE)} is missing")
            elif not same(json.loads(out.read_text(encoding="utf-8")), expected):
                problems.append(f"{name}: {out.relative_to(HERE)} differs from the oracle's result")
        else:
            text = render(expected)
            if not out.exists() or out.read_text(encoding="utf-8") != text:
                out.write_text(text, encoding="utf-8")
                print(f"wrote {out.relative_to(HERE)}")
    if not args.cases:
        for stale in sorted(EXPECTED.glob("*.json")):
            if stale.stem not in with_oracle:
                problems.append(f"{stale.stem}: {stale.relative_to(HERE)} has no case with an oracle")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s)" + ("; run oracle.py to regenerate" if args.check else ""), file=sys.stderr)
        return 1
    if args.check:
        print(f"{len(with_oracle)} expected files are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
