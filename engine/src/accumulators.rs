//! Aggregate state, one column-major accumulator per aggregate call.
//!
//! State for group `g` lives at index `g` of plain vectors, so a batch
//! update is a loop over (row, group) pairs with one match per batch, not
//! per row. Every accumulator can merge two groups (session windows merge
//! sessions) and is serialisable (state checkpoints).

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::collect::Collected;
use crate::distinct::DistinctState;
use crate::state::group_keys::KeyEncoder;
use sluice_plan::{AggFunc, AggregateCall, DataType, Scalar};
use sluice_plan::{Column, ColumnData};

#[derive(Debug, Serialize, Deserialize)]
pub enum Accumulator {
    /// COUNT(*) and COUNT(x).
    Count {
        counts: Vec<i64>,
    },
    /// SUM of bigints, in 128 bits so intermediate overflow cannot wrap.
    SumInt {
        sums: Vec<i128>,
        seen: Vec<i64>,
    },
    SumFloat {
        sums: Vec<f64>,
        seen: Vec<i64>,
    },
    Avg {
        sums: Vec<f64>,
        counts: Vec<i64>,
    },
    /// Welford's running mean and sum of squared deviations.
    Moments {
        n: Vec<i64>,
        mean: Vec<f64>,
        m2: Vec<f64>,
        func: AggFunc,
    },
    MinMaxInt {
        values: Vec<i64>,
        seen: Vec<bool>,
        max: bool,
    },
    MinMaxFloat {
        values: Vec<f64>,
        seen: Vec<bool>,
        max: bool,
    },
    MinMaxBool {
        values: Vec<bool>,
        seen: Vec<bool>,
        max: bool,
    },
    MinMaxStr {
        values: Vec<Option<String>>,
        max: bool,
    },
    CountDistinct(Box<DistinctState>),
    /// SUM of decimals of 19 to 38 digits: an `i128` that wraps, and the
    /// times it wrapped (each ±2^128), so that adding and taking back
    /// values is exact in any order; a total that wrapped does not fit 38
    /// digits and is NULL. (Variants are appended: postcard names them by
    /// position in saved state.)
    SumWide {
        sums: Vec<i128>,
        carries: Vec<i64>,
        seen: Vec<i64>,
    },
    /// MIN and MAX of decimals of 19 to 38 digits.
    MinMaxWide {
        values: Vec<i128>,
        seen: Vec<bool>,
        max: bool,
    },
    /// ARRAY_AGG and MAP_AGG: every argument row of each group.
    Collect(Box<Collected>),
}

use sluice_plan::decimal::add_wrapping as add_wide;

/// Whether `x` beats the current extreme `cur` (`seen` false: there is none).
#[inline]
fn beats<T: PartialOrd>(x: &T, cur: &T, seen: bool, max: bool) -> bool {
    !seen || (max && x > cur) || (!max && x < cur)
}

/// Appends a decimal total, or NULL when it does not fit its precision.
fn push_decimal_sum(out: &mut Column, total: Option<i128>) -> Result<(), sluice_plan::Error> {
    match total {
        Some(v) => out.push_decimal(v),
        None => {
            out.push_null();
            Ok(())
        }
    }
}

impl Accumulator {
    pub fn new(call: &AggregateCall) -> Self {
        let arg_type = call.arg.as_ref().map_or(DataType::Bigint, sluice_plan::PhysExpr::data_type);
        let max = call.func == AggFunc::Max;
        match call.func {
            AggFunc::Count if call.distinct => Self::CountDistinct(Box::default()),
            AggFunc::ArrayAgg | AggFunc::MapAgg => {
                Self::Collect(Box::new(Collected::new(&call.order, call.func == AggFunc::MapAgg)))
            }
            AggFunc::CountStar | AggFunc::Count => Self::Count { counts: Vec::new() },
            // A decimal's sum is the sum of its unscaled values.
            AggFunc::Sum if arg_type.is_wide() => {
                Self::SumWide { sums: Vec::new(), carries: Vec::new(), seen: Vec::new() }
            }
            AggFunc::Sum if matches!(arg_type, DataType::Bigint | DataType::Decimal(..)) => {
                Self::SumInt { sums: Vec::new(), seen: Vec::new() }
            }
            AggFunc::Sum => Self::SumFloat { sums: Vec::new(), seen: Vec::new() },
            AggFunc::Avg => Self::Avg { sums: Vec::new(), counts: Vec::new() },
            AggFunc::StddevSamp | AggFunc::StddevPop | AggFunc::VarSamp | AggFunc::VarPop => {
                Self::Moments { n: Vec::new(), mean: Vec::new(), m2: Vec::new(), func: call.func }
            }
            AggFunc::Min | AggFunc::Max => match arg_type {
                t if t.is_wide() => Self::MinMaxWide { values: Vec::new(), seen: Vec::new(), max },
                DataType::Bigint | DataType::Timestamp | DataType::Decimal(..) => {
                    Self::MinMaxInt { values: Vec::new(), seen: Vec::new(), max }
                }
                DataType::Boolean => Self::MinMaxBool { values: Vec::new(), seen: Vec::new(), max },
                DataType::String => Self::MinMaxStr { values: Vec::new(), max },
                _ => Self::MinMaxFloat { values: Vec::new(), seen: Vec::new(), max },
            },
        }
    }

    /// Makes room for group ids below `groups`.
    pub fn ensure(&mut self, groups: usize) {
        fn grow<T: Clone>(v: &mut Vec<T>, n: usize, fill: T) {
            if v.len() < n {
                v.resize(n, fill);
            }
        }
        match self {
            Self::Count { counts } => grow(counts, groups, 0),
            Self::SumInt { sums, seen } => {
                grow(sums, groups, 0);
                grow(seen, groups, 0);
            }
            Self::SumFloat { sums, seen } => {
                grow(sums, groups, 0.0);
                grow(seen, groups, 0);
            }
            Self::Avg { sums, counts } => {
                grow(sums, groups, 0.0);
                grow(counts, groups, 0);
            }
            Self::Moments { n, mean, m2, .. } => {
                grow(n, groups, 0);
                grow(mean, groups, 0.0);
                grow(m2, groups, 0.0);
            }
            Self::MinMaxInt { values, seen, .. } => {
                grow(values, groups, 0);
                grow(seen, groups, false);
            }
            Self::MinMaxFloat { values, seen, .. } => {
                grow(values, groups, 0.0);
                grow(seen, groups, false);
            }
            Self::MinMaxBool { values, seen, .. } => {
                grow(values, groups, false);
                grow(seen, groups, false);
            }
            Self::MinMaxStr { values, .. } => grow(values, groups, None),
            Self::CountDistinct(d) => d.ensure(groups),
            Self::Collect(c) => c.ensure(groups),
            Self::SumWide { sums, carries, seen } => {
                grow(sums, groups, 0);
                grow(carries, groups, 0);
                grow(seen, groups, 0);
            }
            Self::MinMaxWide { values, seen, .. } => {
                grow(values, groups, 0);
                grow(seen, groups, false);
            }
        }
    }

    /// Clears the state of a group whose id is about to be reused.
    pub fn reset(&mut self, g: usize) {
        match self {
            Self::Count { counts } => counts[g] = 0,
            Self::SumInt { sums, seen } => (sums[g], seen[g]) = (0, 0),
            Self::SumFloat { sums, seen } => (sums[g], seen[g]) = (0.0, 0),
            Self::Avg { sums, counts } => (sums[g], counts[g]) = (0.0, 0),
            Self::Moments { n, mean, m2, .. } => (n[g], mean[g], m2[g]) = (0, 0.0, 0.0),
            Self::MinMaxInt { seen, .. }
            | Self::MinMaxFloat { seen, .. }
            | Self::MinMaxBool { seen, .. }
            | Self::MinMaxWide { seen, .. } => seen[g] = false,
            Self::MinMaxStr { values, .. } => values[g] = None,
            Self::CountDistinct(d) => d.reset(g),
            Self::Collect(c) => c.reset(g),
            Self::SumWide { sums, carries, seen } => (sums[g], carries[g], seen[g]) = (0, 0, 0),
        }
    }

    /// Groups `groups` as an accumulator of the same kind, for an
    /// incremental checkpoint's page (groups past the end read as reset).
    pub fn page(&self, groups: std::ops::Range<usize>) -> Result<Self, Error> {
        self.gather(groups)
    }

    /// Groups `groups`, in that order, as an accumulator of the same kind
    /// numbered from 0: [`Accumulator::page`] for groups that are not
    /// consecutive (a page of keys' sessions).
    pub fn gather<I: Iterator<Item = usize> + Clone>(&self, groups: I) -> Result<Self, Error> {
        fn cut<T: Clone + Default>(v: &[T], r: &(impl Iterator<Item = usize> + Clone)) -> Vec<T> {
            r.clone().map(|g| v.get(g).cloned().unwrap_or_default()).collect()
        }
        let r = &groups;
        Ok(match self {
            Self::Count { counts } => Self::Count { counts: cut(counts, r) },
            Self::SumInt { sums, seen } => Self::SumInt { sums: cut(sums, r), seen: cut(seen, r) },
            Self::SumFloat { sums, seen } => Self::SumFloat { sums: cut(sums, r), seen: cut(seen, r) },
            Self::Avg { sums, counts } => Self::Avg { sums: cut(sums, r), counts: cut(counts, r) },
            Self::Moments { n, mean, m2, func } => {
                Self::Moments { n: cut(n, r), mean: cut(mean, r), m2: cut(m2, r), func: *func }
            }
            Self::MinMaxInt { values, seen, max } => {
                Self::MinMaxInt { values: cut(values, r), seen: cut(seen, r), max: *max }
            }
            Self::MinMaxFloat { values, seen, max } => {
                Self::MinMaxFloat { values: cut(values, r), seen: cut(seen, r), max: *max }
            }
            Self::MinMaxBool { values, seen, max } => {
                Self::MinMaxBool { values: cut(values, r), seen: cut(seen, r), max: *max }
            }
            Self::MinMaxStr { values, max } => Self::MinMaxStr { values: cut(values, r), max: *max },
            Self::CountDistinct(d) => Self::CountDistinct(Box::new(d.page(groups))),
            Self::Collect(c) => Self::Collect(Box::new(c.gather(groups))),
            Self::SumWide { sums, carries, seen } => {
                Self::SumWide { sums: cut(sums, r), carries: cut(carries, r), seen: cut(seen, r) }
            }
            Self::MinMaxWide { values, seen, max } => {
                Self::MinMaxWide { values: cut(values, r), seen: cut(seen, r), max: *max }
            }
        })
    }

    /// Writes a page cut by [`Accumulator::page`] back, from group `start`.
    pub fn set_page(&mut self, start: usize, page: Self) -> Result<(), Error> {
        let len = page.groups();
        self.scatter(&(start..start + len), page)
    }

    /// Groups in a page cut by [`Accumulator::gather`].
    fn groups(&self) -> usize {
        match self {
            Self::Count { counts: v } | Self::Avg { counts: v, .. } | Self::Moments { n: v, .. } => v.len(),
            Self::SumInt { seen, .. } | Self::SumFloat { seen, .. } | Self::SumWide { seen, .. } => seen.len(),
            Self::MinMaxInt { seen, .. }
            | Self::MinMaxFloat { seen, .. }
            | Self::MinMaxBool { seen, .. }
            | Self::MinMaxWide { seen, .. } => seen.len(),
            Self::MinMaxStr { values, .. } => values.len(),
            Self::CountDistinct(d) => d.groups(),
            Self::Collect(c) => c.groups(),
        }
    }

    /// Writes a page cut by [`Accumulator::gather`] back into groups
    /// `groups`, in that order.
    pub fn scatter<I: Iterator<Item = usize> + Clone>(&mut self, groups: &I, page: Self) -> Result<(), Error> {
        fn put<T>(v: &mut [T], groups: &(impl Iterator<Item = usize> + Clone), from: Vec<T>) {
            for (g, value) in groups.clone().zip(from) {
                v[g] = value;
            }
        }
        self.ensure(groups.clone().max().map_or(0, |g| g + 1));
        let start = groups;
        match (self, page) {
            (Self::Count { counts }, Self::Count { counts: c }) => put(counts, start, c),
            (Self::SumInt { sums, seen }, Self::SumInt { sums: s, seen: n }) => {
                put(sums, start, s);
                put(seen, start, n);
            }
            (Self::SumFloat { sums, seen }, Self::SumFloat { sums: s, seen: n }) => {
                put(sums, start, s);
                put(seen, start, n);
            }
            (Self::Avg { sums, counts }, Self::Avg { sums: s, counts: c }) => {
                put(sums, start, s);
                put(counts, start, c);
            }
            (Self::Moments { n, mean, m2, .. }, Self::Moments { n: a, mean: b, m2: c, .. }) => {
                put(n, start, a);
                put(mean, start, b);
                put(m2, start, c);
            }
            (Self::MinMaxInt { values, seen, .. }, Self::MinMaxInt { values: v, seen: s, .. }) => {
                put(values, start, v);
                put(seen, start, s);
            }
            (Self::MinMaxFloat { values, seen, .. }, Self::MinMaxFloat { values: v, seen: s, .. }) => {
                put(values, start, v);
                put(seen, start, s);
            }
            (Self::MinMaxBool { values, seen, .. }, Self::MinMaxBool { values: v, seen: s, .. }) => {
                put(values, start, v);
                put(seen, start, s);
            }
            (Self::MinMaxStr { values, .. }, Self::MinMaxStr { values: v, .. }) => put(values, start, v),
            (Self::CountDistinct(d), Self::CountDistinct(page)) => d.scatter(start.clone(), *page),
            (Self::Collect(c), Self::Collect(page)) => c.scatter(start.clone(), *page),
            (Self::SumWide { sums, carries, seen }, Self::SumWide { sums: s, carries: c, seen: n }) => {
                put(sums, start, s);
                put(carries, start, c);
                put(seen, start, n);
            }
            (Self::MinMaxWide { values, seen, .. }, Self::MinMaxWide { values: v, seen: s, .. }) => {
                put(values, start, v);
                put(seen, start, s);
            }
            (this, page) => {
                return Err(Error::Checkpoint(format!(
                    "a checkpoint page of {} state does not fit {} state",
                    page.name(),
                    this.name()
                )));
            }
        }
        Ok(())
    }

    /// Folds rows into groups: row `rows[i]` of `arg` goes to group `gids[i]`.
    /// `arg` is None for COUNT(*).
    pub fn update(&mut self, rows: &[u32], gids: &[u32], arg: Option<&Column>) -> Result<(), Error> {
        let Some(arg) = arg else {
            if let Self::Count { counts } = self {
                for &g in gids {
                    counts[g as usize] += 1;
                }
            }
            return Ok(());
        };
        let valid = arg.validity.as_deref();
        let pairs = rows.iter().zip(gids).filter(move |(r, _)| valid.is_none_or(|v| v[**r as usize]));
        let pairs = pairs.map(|(r, g)| (*r as usize, *g as usize));
        match (self, &arg.data) {
            (_, ColumnData::Null(_)) => {}
            (Self::Collect(c), _) => c.update(pairs, arg),
            (Self::Count { counts }, _) => pairs.for_each(|(_, g)| counts[g] += 1),
            (Self::SumInt { sums, seen }, ColumnData::Int(v)) => pairs.for_each(|(r, g)| {
                sums[g] += i128::from(v[r]);
                seen[g] += 1;
            }),
            (Self::SumFloat { sums, seen }, ColumnData::Float(v)) => pairs.for_each(|(r, g)| {
                sums[g] += v[r];
                seen[g] += 1;
            }),
            (Self::Avg { sums, counts }, ColumnData::Float(v)) => pairs.for_each(|(r, g)| {
                sums[g] += v[r];
                counts[g] += 1;
            }),
            (Self::Moments { n, mean, m2, .. }, ColumnData::Float(v)) => pairs.for_each(|(r, g)| {
                n[g] += 1;
                #[allow(clippy::cast_precision_loss)]
                let count = n[g] as f64;
                let delta = v[r] - mean[g];
                mean[g] += delta / count;
                m2[g] += delta * (v[r] - mean[g]);
            }),
            (Self::MinMaxInt { values, seen, max }, ColumnData::Int(v)) => {
                let max = *max;
                pairs.for_each(|(r, g)| {
                    if !seen[g] || (max && v[r] > values[g]) || (!max && v[r] < values[g]) {
                        values[g] = v[r];
                        seen[g] = true;
                    }
                });
            }
            (Self::SumWide { sums, carries, seen }, ColumnData::Wide(v)) => pairs.for_each(|(r, g)| {
                add_wide(&mut sums[g], &mut carries[g], v[r]);
                seen[g] += 1;
            }),
            (Self::MinMaxWide { values, seen, max }, ColumnData::Wide(v)) => {
                let max = *max;
                pairs.for_each(|(r, g)| {
                    if beats(&v[r], &values[g], seen[g], max) {
                        values[g] = v[r];
                        seen[g] = true;
                    }
                });
            }
            (Self::MinMaxFloat { values, seen, max }, ColumnData::Float(v)) => {
                let max = *max;
                pairs.for_each(|(r, g)| {
                    if !seen[g] || (max && v[r] > values[g]) || (!max && v[r] < values[g]) {
                        values[g] = v[r];
                        seen[g] = true;
                    }
                });
            }
            (Self::MinMaxBool { values, seen, max }, ColumnData::Bool(v)) => {
                let max = *max;
                pairs.for_each(|(r, g)| {
                    if !seen[g] || (max && v[r] && !values[g]) || (!max && !v[r] && values[g]) {
                        values[g] = v[r];
                        seen[g] = true;
                    }
                });
            }
            (Self::MinMaxStr { values, max }, ColumnData::Str(s)) => {
                let max = *max;
                pairs.for_each(|(r, g)| {
                    let x = s.get(r);
                    let better = match &values[g] {
                        None => true,
                        Some(cur) => (max && x > cur.as_str()) || (!max && x < cur.as_str()),
                    };
                    if better {
                        // Allocates only when the extreme changes.
                        let slot = values[g].get_or_insert_with(String::new);
                        slot.clear();
                        slot.push_str(x);
                    }
                });
            }
            (Self::CountDistinct(d), _) => {
                let enc = KeyEncoder::new(&[arg]);
                let mut buf = Vec::with_capacity(32);
                for (r, g) in pairs {
                    buf.clear();
                    enc.encode(r, &mut buf);
                    d.insert(g, &buf)?;
                }
            }
            (acc, data) => {
                return Err(Error::Internal(format!(
                    "accumulator {} cannot take {} values",
                    acc.name(),
                    match data {
                        ColumnData::Int(_) => "integer",
                        ColumnData::Wide(_) => "wide decimal",
                        ColumnData::Float(_) => "double",
                        ColumnData::Bool(_) => "boolean",
                        ColumnData::Str(_) => "string",
                        ColumnData::Null(_) => "null",
                        ColumnData::List(_) => "array or map",
                        ColumnData::Struct(_) => "row",
                    }
                )));
            }
        }
        Ok(())
    }

    /// Takes one value folded into group `g` back out (`value` NULL for
    /// COUNT(*)'s row or a NULL argument, which only COUNT(*) counted).
    pub fn retract(&mut self, g: usize, value: &Scalar, star: bool) -> Result<(), Error> {
        match (self, value) {
            (Self::Count { counts }, _) if star => counts[g] -= 1,
            (Self::Collect(c), value) => c.retract(g, value)?,
            (_, Scalar::Null) => {}
            (Self::Count { counts }, _) => counts[g] -= 1,
            (Self::SumInt { sums, seen }, Scalar::Bigint(v)) => {
                sums[g] -= i128::from(*v);
                seen[g] -= 1;
            }
            (Self::SumInt { sums, seen }, Scalar::Decimal(v, _)) => {
                sums[g] -= *v;
                seen[g] -= 1;
            }
            // 38 digits negate without overflow.
            (Self::SumWide { sums, carries, seen }, Scalar::Decimal(v, _)) => {
                add_wide(&mut sums[g], &mut carries[g], -*v);
                seen[g] -= 1;
            }
            (Self::SumFloat { sums, seen }, Scalar::Double(v)) => {
                sums[g] -= v;
                seen[g] -= 1;
            }
            (Self::Avg { sums, counts }, Scalar::Double(v)) => {
                sums[g] -= v;
                counts[g] -= 1;
            }
            (acc, _) => {
                return Err(Error::Internal(format!("accumulator {} cannot take a value back", acc.name())));
            }
        }
        Ok(())
    }

    /// Whether [`Accumulator::merge_from`] takes this kind: those whose
    /// merge is exact in any order and leaves the source as it was (a
    /// floating-point sum would round differently from row-by-row folding).
    pub fn merges_from(&self) -> bool {
        matches!(
            self,
            Self::Count { .. }
                | Self::SumInt { .. }
                | Self::SumWide { .. }
                | Self::MinMaxInt { .. }
                | Self::MinMaxWide { .. }
                | Self::MinMaxBool { .. }
        )
    }

    /// Folds group `src` of `other` (an accumulator of the same call) into
    /// group `dst` of this one, leaving `other` unchanged: the panes of a
    /// hopping window are merged into each window they fall in.
    pub fn merge_from(&mut self, dst: usize, other: &Self, src: usize) -> Result<(), Error> {
        match (self, other) {
            (Self::Count { counts }, Self::Count { counts: from }) => counts[dst] += from[src],
            (Self::SumInt { sums, seen }, Self::SumInt { sums: from, seen: from_seen }) => {
                sums[dst] += from[src];
                seen[dst] += from_seen[src];
            }
            (Self::MinMaxInt { values, seen, max }, Self::MinMaxInt { values: from, seen: from_seen, .. }) => {
                if from_seen[src]
                    && (!seen[dst] || (*max && from[src] > values[dst]) || (!*max && from[src] < values[dst]))
                {
                    values[dst] = from[src];
                    seen[dst] = true;
                }
            }
            (Self::MinMaxBool { values, seen, max }, Self::MinMaxBool { values: from, seen: from_seen, .. }) => {
                if from_seen[src] && (!seen[dst] || (*max && from[src]) || (!*max && !from[src])) {
                    values[dst] = from[src];
                    seen[dst] = true;
                }
            }
            (
                Self::SumWide { sums, carries, seen },
                Self::SumWide { sums: from, carries: from_carries, seen: from_seen },
            ) => {
                add_wide(&mut sums[dst], &mut carries[dst], from[src]);
                carries[dst] += from_carries[src];
                seen[dst] += from_seen[src];
            }
            (Self::MinMaxWide { values, seen, max }, Self::MinMaxWide { values: from, seen: from_seen, .. }) => {
                if from_seen[src] && beats(&from[src], &values[dst], seen[dst], *max) {
                    values[dst] = from[src];
                    seen[dst] = true;
                }
            }
            (this, _) => return Err(Error::Internal(format!("{} cannot merge from another accumulator", this.name()))),
        }
        Ok(())
    }

    /// Folds group `src` into group `dst` (session windows merging).
    pub fn merge(&mut self, dst: usize, src: usize) -> Result<(), Error> {
        match self {
            Self::Count { counts } => counts[dst] += counts[src],
            Self::SumInt { sums, seen } => {
                sums[dst] += sums[src];
                seen[dst] += seen[src];
            }
            Self::SumFloat { sums, seen } => {
                sums[dst] += sums[src];
                seen[dst] += seen[src];
            }
            Self::Avg { sums, counts } => {
                sums[dst] += sums[src];
                counts[dst] += counts[src];
            }
            Self::Moments { n, mean, m2, .. } => {
                // Chan et al.'s parallel combination.
                let (na, nb) = (n[dst], n[src]);
                if nb == 0 {
                    return Ok(());
                }
                if na == 0 {
                    (n[dst], mean[dst], m2[dst]) = (nb, mean[src], m2[src]);
                    return Ok(());
                }
                #[allow(clippy::cast_precision_loss)]
                let (fa, fb) = (na as f64, nb as f64);
                let delta = mean[src] - mean[dst];
                let total = fa + fb;
                mean[dst] += delta * fb / total;
                m2[dst] += m2[src] + delta * delta * fa * fb / total;
                n[dst] = na + nb;
            }
            Self::MinMaxInt { values, seen, max } => {
                if seen[src]
                    && (!seen[dst] || (*max && values[src] > values[dst]) || (!*max && values[src] < values[dst]))
                {
                    values[dst] = values[src];
                    seen[dst] = true;
                }
            }
            Self::MinMaxFloat { values, seen, max } => {
                if seen[src]
                    && (!seen[dst] || (*max && values[src] > values[dst]) || (!*max && values[src] < values[dst]))
                {
                    values[dst] = values[src];
                    seen[dst] = true;
                }
            }
            Self::MinMaxBool { values, seen, max } => {
                if seen[src] && (!seen[dst] || (*max && values[src]) || (!*max && !values[src])) {
                    values[dst] = values[src];
                    seen[dst] = true;
                }
            }
            Self::MinMaxStr { values, max } => {
                let better = match (&values[src], &values[dst]) {
                    (Some(s), Some(d)) => (*max && s > d) || (!*max && s < d),
                    (Some(_), None) => true,
                    _ => false,
                };
                if better {
                    values[dst] = values[src].take();
                }
            }
            Self::SumWide { sums, carries, seen } => {
                let (sum, carry) = (sums[src], carries[src]);
                add_wide(&mut sums[dst], &mut carries[dst], sum);
                carries[dst] += carry;
                seen[dst] += seen[src];
            }
            Self::MinMaxWide { values, seen, max } => {
                if seen[src] && beats(&values[src], &values[dst], seen[dst], *max) {
                    values[dst] = values[src];
                    seen[dst] = true;
                }
            }
            Self::CountDistinct(d) => d.merge(dst, src)?,
            Self::Collect(c) => c.merge(dst, src),
        }
        Ok(())
    }

    /// Appends the current value of group `g` to `out`.
    pub fn emit(&self, g: usize, out: &mut Column) -> Result<(), Error> {
        Ok(self.emit_value(g, out)?)
    }

    fn emit_value(&self, g: usize, out: &mut Column) -> Result<(), sluice_plan::Error> {
        match self {
            Self::Count { counts } => out.push_i64(counts[g]),
            Self::CountDistinct(d) => out.push_i64(d.count(g)),
            Self::Collect(c) => c.emit(g, out),
            // NULL when the total does not fit (a decimal: its precision).
            Self::SumInt { sums, seen } => match (seen[g], out.data_type) {
                (0, _) => {
                    out.push_null();
                    Ok(())
                }
                (_, DataType::Decimal(p, _)) => push_decimal_sum(out, sluice_plan::decimal::fit(sums[g], p)),
                (_, _) => match i64::try_from(sums[g]) {
                    Ok(v) => out.push_i64(v),
                    Err(_) => {
                        out.push_null();
                        Ok(())
                    }
                },
            },
            Self::SumWide { sums, carries, seen } => match (seen[g], carries[g], out.data_type) {
                (1.., _, DataType::Decimal(p, _)) => push_decimal_sum(
                    out,
                    sluice_plan::decimal::total_of(sums[g], carries[g]).and_then(|v| sluice_plan::decimal::fit(v, p)),
                ),
                _ => {
                    out.push_null();
                    Ok(())
                }
            },
            Self::MinMaxWide { values, seen, .. } => {
                if seen[g] {
                    out.push_decimal(values[g])
                } else {
                    out.push_null();
                    Ok(())
                }
            }
            Self::SumFloat { sums, seen } => {
                if seen[g] == 0 {
                    out.push_null();
                    Ok(())
                } else {
                    out.push_f64(sums[g])
                }
            }
            Self::Avg { sums, counts } => {
                if counts[g] == 0 {
                    out.push_null();
                    Ok(())
                } else {
                    #[allow(clippy::cast_precision_loss)]
                    out.push_f64(sums[g] / counts[g] as f64)
                }
            }
            Self::Moments { n, m2, func, .. } => {
                let (count, sample) = (n[g], matches!(func, AggFunc::StddevSamp | AggFunc::VarSamp));
                let denominator = if sample { count - 1 } else { count };
                if denominator <= 0 {
                    out.push_null();
                    return Ok(());
                }
                #[allow(clippy::cast_precision_loss)]
                let variance = (m2[g] / denominator as f64).max(0.0);
                out.push_f64(if matches!(func, AggFunc::StddevSamp | AggFunc::StddevPop) {
                    variance.sqrt()
                } else {
                    variance
                })
            }
            Self::MinMaxInt { values, seen, .. } => {
                if seen[g] {
                    out.push_i64(values[g])
                } else {
                    out.push_null();
                    Ok(())
                }
            }
            Self::MinMaxFloat { values, seen, .. } => {
                if seen[g] {
                    out.push_f64(values[g])
                } else {
                    out.push_null();
                    Ok(())
                }
            }
            Self::MinMaxBool { values, seen, .. } => {
                if seen[g] {
                    out.push_bool(values[g])
                } else {
                    out.push_null();
                    Ok(())
                }
            }
            Self::MinMaxStr { values, .. } => match &values[g] {
                Some(s) => out.push_str(s),
                None => {
                    out.push_null();
                    Ok(())
                }
            },
        }
    }

    /// Whether [`Accumulator::heap_bytes`] visits every group (a string's
    /// size is its own).
    pub fn heap_bytes_walks(&self) -> bool {
        matches!(self, Self::MinMaxStr { .. })
    }

    pub fn heap_bytes(&self) -> usize {
        match self {
            Self::Count { counts } => counts.capacity() * 8,
            Self::SumInt { sums, seen } => sums.capacity() * 16 + seen.capacity() * 8,
            Self::SumFloat { sums, seen } => sums.capacity() * 8 + seen.capacity() * 8,
            Self::Avg { sums, counts } => sums.capacity() * 8 + counts.capacity() * 8,
            Self::Moments { n, .. } => n.capacity() * 24,
            Self::MinMaxInt { values, seen, .. } => values.capacity() * 8 + seen.capacity(),
            Self::MinMaxFloat { values, seen, .. } => values.capacity() * 8 + seen.capacity(),
            Self::MinMaxBool { values, seen, .. } => values.capacity() + seen.capacity(),
            Self::MinMaxStr { values, .. } => {
                values.capacity() * 24 + values.iter().flatten().map(String::capacity).sum::<usize>()
            }
            Self::CountDistinct(d) => d.heap_bytes(),
            Self::Collect(c) => c.heap_bytes(),
            Self::SumWide { sums, carries, seen } => sums.capacity() * 16 + (carries.capacity() + seen.capacity()) * 8,
            Self::MinMaxWide { values, seen, .. } => values.capacity() * 16 + seen.capacity(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Count { .. } => "COUNT",
            Self::SumInt { .. } | Self::SumFloat { .. } | Self::SumWide { .. } => "SUM",
            Self::Avg { .. } => "AVG",
            Self::Moments { .. } => "STDDEV/VARIANCE",
            Self::MinMaxInt { .. }
            | Self::MinMaxFloat { .. }
            | Self::MinMaxBool { .. }
            | Self::MinMaxStr { .. }
            | Self::MinMaxWide { .. } => "MIN/MAX",
            Self::CountDistinct(_) => "COUNT(DISTINCT)",
            Self::Collect(_) => "ARRAY_AGG/MAP_AGG",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_plan::{PhysExpr, Scalar};

    /// A SUM of 38-digit decimals can pass an i128 on its way to a total
    /// that fits (values added, then taken back): the wrapping sum and its
    /// count of wraps keep it exact in any order, and a total past 38
    /// digits is NULL. MIN and MAX of wide values, pages and saved state
    /// keep every bit.
    #[test]
    fn wide_decimal_sums_are_exact_through_i128_overflow() {
        let t = DataType::Decimal(38, 0);
        let big = sluice_plan::decimal::pow10(38) - 1;
        let col = |v: Vec<i128>| Column::new(t, ColumnData::Wide(v), None);
        let mut sum = Accumulator::new(&call(AggFunc::Sum, t));
        let mut max = Accumulator::new(&call(AggFunc::Max, t));
        sum.ensure(2);
        max.ensure(2);
        let values = col(vec![big, big, -big, 7, -big]);
        for acc in [&mut sum, &mut max] {
            acc.update(&[0, 1, 2, 3], &[0, 0, 1, 1], Some(&values)).unwrap();
        }
        let emit = |acc: &Accumulator, g: usize| {
            let mut out = Column::with_capacity(func_type(acc, t), 1);
            acc.emit(g, &mut out).unwrap();
            out.scalar(0)
        };
        fn func_type(acc: &Accumulator, t: DataType) -> DataType {
            if matches!(acc, Accumulator::SumWide { .. }) { AggFunc::Sum.result_type(t) } else { t }
        }
        assert_eq!(emit(&sum, 0), Scalar::Null, "2·(10^38 - 1) does not fit 38 digits (and wrapped an i128)");
        assert_eq!(emit(&sum, 1), Scalar::Decimal(7 - big, 0));
        assert_eq!(emit(&max, 0), Scalar::Decimal(big, 0));
        sum.retract(0, &Scalar::Decimal(big, 0), false).unwrap();
        assert_eq!(emit(&sum, 0), Scalar::Decimal(big, 0), "taken back, the total fits again");
        sum.update(&[4], &[0], Some(&values)).unwrap();
        assert_eq!(emit(&sum, 0), Scalar::Decimal(0, 0));
        sum.merge(0, 1).unwrap();
        assert_eq!(emit(&sum, 0), Scalar::Decimal(7 - big, 0));
        let saved: Accumulator = postcard::from_bytes(&postcard::to_allocvec(&sum).unwrap()).unwrap();
        let mut paged = Accumulator::new(&call(AggFunc::Sum, t));
        paged.set_page(0, saved.page(0..2).unwrap()).unwrap();
        assert_eq!(emit(&paged, 0), Scalar::Decimal(7 - big, 0));
    }

    fn call(func: AggFunc, t: DataType) -> AggregateCall {
        AggregateCall {
            func,
            arg: Some(PhysExpr::Column { index: 0, data_type: t }),
            distinct: false,
            data_type: func.result_type(t),
            order: Vec::new(),
        }
    }

    fn run(acc: &mut Accumulator, col: &Column, gids: &[u32]) -> Vec<Scalar> {
        let groups = gids.iter().max().map_or(0, |g| *g as usize + 1);
        acc.ensure(groups);
        let rows: Vec<u32> = (0..u32::try_from(gids.len()).unwrap()).collect();
        acc.update(&rows, gids, Some(col)).unwrap();
        let out_type = match acc {
            Accumulator::Count { .. } | Accumulator::CountDistinct(_) => DataType::Bigint,
            _ => col.data_type,
        };
        let mut out = Column::with_capacity(out_type, 2);
        (0..groups)
            .map(|g| {
                acc.emit(g, &mut out).unwrap();
                out.scalar(out.len() - 1)
            })
            .collect()
    }

    #[test]
    fn sums_counts_extremes_and_nulls() {
        let mut col = Column::with_capacity(DataType::Bigint, 4);
        for v in [Some(5), None, Some(-3), Some(10)] {
            match v {
                Some(x) => col.push_i64(x).unwrap(),
                None => col.push_null(),
            }
        }
        let gids = [0, 0, 1, 1];
        assert_eq!(
            run(&mut Accumulator::new(&call(AggFunc::Sum, DataType::Bigint)), &col, &gids),
            [Scalar::Bigint(5), Scalar::Bigint(7)]
        );
        assert_eq!(
            run(&mut Accumulator::new(&call(AggFunc::Count, DataType::Bigint)), &col, &gids),
            [Scalar::Bigint(1), Scalar::Bigint(2)]
        );
        assert_eq!(
            run(&mut Accumulator::new(&call(AggFunc::Max, DataType::Bigint)), &col, &gids),
            [Scalar::Bigint(5), Scalar::Bigint(10)]
        );
    }

    #[test]
    fn moments_merge_like_one_pass() {
        let xs = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        let col = Column::floats(xs.to_vec());
        let mut whole = Accumulator::new(&call(AggFunc::StddevPop, DataType::Double));
        let one = run(&mut whole, &col, &[0; 8]);
        assert_eq!(one, [Scalar::Double(2.0)]);
        let mut split = Accumulator::new(&call(AggFunc::StddevPop, DataType::Double));
        run(&mut split, &col, &[0, 0, 0, 1, 1, 1, 1, 1]);
        split.merge(0, 1).unwrap();
        let mut out = Column::with_capacity(DataType::Double, 1);
        split.emit(0, &mut out).unwrap();
        let Scalar::Double(v) = out.scalar(0) else { panic!() };
        assert!((v - 2.0).abs() < 1e-12, "{v}");
    }

    #[test]
    fn count_distinct_per_group_and_reset() {
        let mut s = Column::with_capacity(DataType::String, 6);
        for v in ["a", "b", "a", "a", "c", "a"] {
            s.push_str(v).unwrap();
        }
        let mut c = AggregateCall { distinct: true, ..call(AggFunc::Count, DataType::String) };
        c.func = AggFunc::Count;
        let mut acc = Accumulator::new(&c);
        assert_eq!(run(&mut acc, &s, &[0, 0, 0, 1, 1, 1]), [Scalar::Bigint(2), Scalar::Bigint(2)]);
        acc.reset(0);
        assert_eq!(run(&mut acc, &s, &[0, 1, 0, 1, 1, 1]), [Scalar::Bigint(1), Scalar::Bigint(3)]);
    }
}
