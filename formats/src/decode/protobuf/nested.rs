//! Repeated, map and message fields into `array`, `map` and `row`
//! columns.
//!
//! While a record is read, a nested column's field only marks the column
//! as set ([`super::wire::Slot::Seen`]); when the record ends, the value
//! is read from every occurrence of the field, straight into the
//! column's child columns. Reading late keeps Protobuf's merge rules
//! exact without buffering anything: a repeated field's elements may be
//! written apart, packed or one by one (parsers take both); a message
//! field written twice is one message with the fields of both; a map key
//! written twice keeps its last value.
//!
//! A value that does not fit fails the record with the path to it
//! (`items[3].price`); the record's rollback takes back what it pushed.

use std::cmp::Ordering;

use sluice_plan::{Column, ColumnData};

use super::super::nested_path::{Path, Step, render};
use super::cell::{push_default_into, push_into};
use super::program::{Default, Elem, FieldKind, FieldRead, Read, RowRead};
use super::wire::{Slot, skip, take, value, varint};

/// The messages a row's fields are read from: one message's bytes, or
/// every occurrence of field `number` in the messages of a parent.
#[derive(Clone, Copy)]
pub(super) enum Spans<'s> {
    One(usize, usize),
    Field(&'s Spans<'s>, u32),
}

/// A map entry being read: its bytes, its key, and whether a later entry
/// has the same key (Protobuf keeps the last).
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    start: usize,
    end: usize,
    key: Slot,
    kept: bool,
}

/// Scratch the decoder keeps between records, so reading nested values
/// allocates nothing once it has grown.
#[derive(Debug, Clone, Default)]
pub(super) struct Scratch {
    pub path: Path,
    /// The entries of the maps being read, innermost last.
    entries: Vec<Entry>,
    order: Vec<usize>,
}

/// Reads one record's nested values.
pub(super) struct Reader<'a> {
    pub payload: &'a [u8],
    pub enums: &'a [Vec<(i32, String)>],
    /// The column's name, for errors.
    pub name: &'a [u8],
    pub scratch: &'a mut Scratch,
}

impl Reader<'_> {
    fn at(&self) -> String {
        render(self.name, &self.scratch.path)
    }

    fn wrong_wire(&self, wire: u8) -> String {
        format!(
            "`{}`: wire type {wire}, not the schema's (the writer's schema disagrees with the registry's?)",
            self.at()
        )
    }

    /// The value of `field`, read from `spans`, into `column`.
    pub fn field(&mut self, field: &FieldRead, spans: &Spans<'_>, column: &mut Column) -> Result<(), String> {
        let payload = self.payload;
        let number = field.number;
        match &field.kind {
            FieldKind::Scalar { read, default } => self.scalar(number, *read, default.as_ref(), spans, column),
            FieldKind::Message(row) => {
                let mut seen = false;
                each(payload, spans, number, &mut |wire, at, end| {
                    if wire != 2 {
                        return Err(self.wrong_wire(wire));
                    }
                    seen = true;
                    skip(&payload[..end], at, wire, end)
                })?;
                if seen {
                    self.row(row, &Spans::Field(spans, number), column)
                } else {
                    column.push_null();
                    Ok(())
                }
            }
            FieldKind::Repeated(elem) => {
                let t = column.data_type;
                let values = list_values(column)?;
                let mut i = 0;
                each(payload, spans, number, &mut |wire, at, end| {
                    match elem {
                        Elem::Scalar { read, .. } if wire == read.wire() => {
                            self.scratch.path.push((Step::Index(i), t));
                            let slot = value(payload, *read, at, end)?;
                            self.push(values, slot)?;
                            self.scratch.path.pop();
                            i += 1;
                        }
                        // A packed run: the elements back to back.
                        Elem::Scalar { read, .. } if wire == 2 => {
                            let n = varint(&payload[..end], at)?;
                            let (mut p, stop) = take(at, n, end)?;
                            while p < stop {
                                self.scratch.path.push((Step::Index(i), t));
                                let slot =
                                    value(payload, *read, &mut p, stop).map_err(|e| format!("`{}`: {e}", self.at()))?;
                                self.push(values, slot)?;
                                self.scratch.path.pop();
                                i += 1;
                            }
                        }
                        Elem::Row(row) if wire == 2 => {
                            self.scratch.path.push((Step::Index(i), t));
                            let n = varint(&payload[..end], at)?;
                            let (start, stop) = take(at, n, end)?;
                            self.row(row, &Spans::One(start, stop), values)?;
                            self.scratch.path.pop();
                            i += 1;
                        }
                        _ => return Err(self.wrong_wire(wire)),
                    }
                    Ok(())
                })?;
                column.end_nested_row().map_err(|e| e.to_string())
            }
            FieldKind::Map { key, key_default, value: elem } => {
                let base = self.scratch.entries.len();
                let read = self.entries(spans, number, *key, key_default);
                let done = read.and_then(|()| self.map_entries(base, elem, column));
                self.scratch.entries.truncate(base);
                done
            }
        }
    }

    /// The last value of single field `number` in `spans` (left out: its
    /// default, or NULL) into `column`.
    fn scalar(
        &mut self,
        number: u32,
        read: Read,
        default: Option<&Default>,
        spans: &Spans<'_>,
        column: &mut Column,
    ) -> Result<(), String> {
        let payload = self.payload;
        let mut last = None;
        each(payload, spans, number, &mut |wire, at, end| {
            if wire != read.wire() {
                return Err(self.wrong_wire(wire));
            }
            last = Some((*at, end));
            skip(&payload[..end], at, wire, end)
        })?;
        match (last, default) {
            (Some((mut at, end)), _) => {
                let slot = value(payload, read, &mut at, end)?;
                self.push(column, slot)
            }
            (None, Some(d)) => push_default_into(column, d),
            (None, None) => {
                column.push_null();
                Ok(())
            }
        }
    }

    /// A row of `row`'s fields, read from `spans`, into `column`.
    fn row(&mut self, row: &RowRead, spans: &Spans<'_>, column: &mut Column) -> Result<(), String> {
        let t = column.data_type;
        let ColumnData::Struct(s) = &mut column.data else {
            return Err(format!("internal: `{}` is not a row column", self.at()));
        };
        for (i, (field, child)) in row.fields.iter().zip(s.fields.iter_mut()).enumerate() {
            self.scratch.path.push((Step::Field(i), t));
            match field {
                Some(field) => self.field(field, spans, child)?,
                None => child.push_null(),
            }
            self.scratch.path.pop();
        }
        s.len += 1;
        column.mark_valid(1);
        Ok(())
    }

    /// Files the entries of map field `number` after the scratch's
    /// `entries`, each with its key, and marks those a later entry's key
    /// replaces.
    fn entries(&mut self, spans: &Spans<'_>, number: u32, key: Read, key_default: &Default) -> Result<(), String> {
        let payload = self.payload;
        let base = self.scratch.entries.len();
        let default_key = match key_default {
            Default::Int(x) => Slot::Int(*x),
            // The empty text.
            _ => Slot::Text(0, 0),
        };
        each(payload, spans, number, &mut |wire, at, end| {
            if wire != 2 {
                return Err(self.wrong_wire(wire));
            }
            let n = varint(&payload[..end], at)?;
            let (start, stop) = take(at, n, end)?;
            let mut slot = default_key;
            scan(payload, start, stop, 1, &mut |wire, at, end| {
                if wire != key.wire() {
                    return Err(self.wrong_wire(wire));
                }
                slot = value(payload, key, at, end)?;
                Ok(())
            })?;
            self.scratch.entries.push(Entry { start, end: stop, key: slot, kept: true });
            Ok(())
        })?;
        let entries = &mut self.scratch.entries[base..];
        if entries.len() > 1 {
            let order = &mut self.scratch.order;
            order.clear();
            order.extend(0..entries.len());
            // By key, then by position: of equal keys, the last is kept.
            order.sort_unstable_by(|&a, &b| compare(payload, entries[a].key, entries[b].key).then(a.cmp(&b)));
            for w in order.windows(2) {
                if compare(payload, entries[w[0]].key, entries[w[1]].key) == Ordering::Equal {
                    entries[w[0]].kept = false;
                }
            }
        }
        Ok(())
    }

    /// The map of the scratch's entries from `base` on into `column`.
    fn map_entries(&mut self, base: usize, elem: &Elem, column: &mut Column) -> Result<(), String> {
        let t = column.data_type;
        let entries = list_values(column)?;
        let entry_type = entries.data_type;
        let mut i = 0;
        let mut e = base;
        while e < self.scratch.entries.len() {
            let entry = self.scratch.entries[e];
            e += 1;
            if !entry.kept {
                continue;
            }
            self.scratch.path.push((Step::Entry(i), t));
            let ColumnData::Struct(s) = &mut entries.data else {
                return Err(format!("internal: `{}` holds no entries", self.at()));
            };
            let [keys, values] = &mut s.fields[..] else {
                return Err(format!("internal: `{}` entries are not key and value", self.at()));
            };
            self.scratch.path.push((Step::Field(0), entry_type));
            self.push(keys, entry.key)?;
            self.scratch.path.pop();
            self.scratch.path.push((Step::Field(1), entry_type));
            let one = Spans::One(entry.start, entry.end);
            match elem {
                Elem::Scalar { read, default } => self.scalar(2, *read, default.as_ref(), &one, values)?,
                // A message value left out is the message with no field
                // set: every field its default.
                Elem::Row(row) => self.row(row, &Spans::Field(&one, 2), values)?,
            }
            self.scratch.path.pop();
            s.len += 1;
            entries.mark_valid(1);
            self.scratch.path.pop();
            i += 1;
        }
        column.end_nested_row().map_err(|e| e.to_string())
    }

    fn push(&self, column: &mut Column, slot: Slot) -> Result<(), String> {
        push_into(column, slot, self.payload, self.enums, &|| self.at())
    }
}

/// Calls `f` with the messages at field-number path `numbers` under
/// `spans` (every occurrence of each, as Protobuf merges them).
pub(super) fn through(
    spans: &Spans<'_>,
    numbers: &[u32],
    f: &mut dyn FnMut(&Spans<'_>) -> Result<(), String>,
) -> Result<(), String> {
    match numbers.split_first() {
        None => f(spans),
        Some((&n, rest)) => through(&Spans::Field(spans, n), rest, f),
    }
}

/// Keys compared as values: numbers as numbers, text as bytes.
fn compare(payload: &[u8], a: Slot, b: Slot) -> Ordering {
    match (a, b) {
        (Slot::Int(x), Slot::Int(y)) => x.cmp(&y),
        (Slot::Text(a0, a1), Slot::Text(b0, b1)) => payload[a0..a1].cmp(&payload[b0..b1]),
        (Slot::Bool(x), Slot::Bool(y)) => x.cmp(&y),
        _ => Ordering::Equal,
    }
}

/// The child column of an array or map column.
fn list_values(c: &mut Column) -> Result<&mut Column, String> {
    match &mut c.data {
        ColumnData::List(l) => Ok(&mut l.values),
        _ => Err(format!("internal: a {} column has no elements", c.data_type)),
    }
}

/// Calls `f` at every occurrence of field `number` in `spans`, with its
/// wire type, where its value starts and where its message ends; `f`
/// reads or skips the value.
fn each(
    payload: &[u8],
    spans: &Spans<'_>,
    number: u32,
    f: &mut dyn FnMut(u8, &mut usize, usize) -> Result<(), String>,
) -> Result<(), String> {
    match *spans {
        Spans::One(start, end) => scan(payload, start, end, number, f),
        Spans::Field(parent, outer) => each(payload, parent, outer, &mut |wire, at, end| {
            if wire != 2 {
                return Err(format!("field {outer} has wire type {wire}, not a message's"));
            }
            let n = varint(&payload[..end], at)?;
            let (start, stop) = take(at, n, end)?;
            scan(payload, start, stop, number, f)
        }),
    }
}

/// [`each`] in one message's bytes.
fn scan(
    payload: &[u8],
    start: usize,
    end: usize,
    number: u32,
    f: &mut dyn FnMut(u8, &mut usize, usize) -> Result<(), String>,
) -> Result<(), String> {
    let bytes = &payload[..end];
    let mut at = start;
    while at < end {
        let key = varint(bytes, &mut at)?;
        let wire = (key & 7) as u8;
        match key >> 3 {
            0 => return Err(format!("field number 0 at byte {at}")),
            n if n == u64::from(number) => f(wire, &mut at, end)?,
            _ => skip(bytes, &mut at, wire, end)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
