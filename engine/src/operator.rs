//! The operator trait: one stateful step of a plan, batch at a time.
//!
//! The engine runs every plan the same way — watermark, WHERE, the
//! operator, HAVING, the SELECT list — and knows nothing of what the
//! operator does. An operator either produces rows of its own (aggregates:
//! changed groups, closed windows) or computes columns for its input rows
//! (ROWS windows; the stateless pass-through computes none). Hooks it does
//! not need default to nothing.
//!
//! Checkpoints: an operator writes its state after a tag naming its kind
//! ([`OperatorTag`]); the tag and the state are laid out exactly as the
//! engine's earlier single `enum` of operator states was, so checkpoints
//! taken before operators were split into files still restore.

use serde::{Deserialize, Serialize};
use sluice_plan::{Batch, Column, Selection};

use crate::Error;
use crate::state::pages::TableHead;
use crate::state::{Paged, PagedState};

/// Rows of one batch as the engine hands them to an operator.
#[derive(Debug)]
pub struct BatchInput<'a> {
    pub batch: &'a Batch,
    pub selection: Selection<'a>,
    /// Event time of every row (windowed queries).
    pub event_times: &'a [i64],
    /// The watermark in force when each row arrived (windowed queries).
    pub watermark_before: &'a [i64],
    /// Emit one updated row per input row instead of one per changed group.
    pub per_record: bool,
    /// Emit changed groups at all (EMIT CHANGES); otherwise only closed windows.
    pub emit_changes: bool,
    /// For a stage fed by an exchange, the upstream partition each row
    /// came from (empty otherwise).
    pub upstreams: &'a [u32],
}

/// Where an operator puts what it computed for a batch.
pub struct OperatorOutput<'a> {
    /// Rows of its own, in the plan's intermediate schema.
    pub rows: &'a mut Batch,
    /// Columns for the input rows (index in the intermediate schema, values
    /// batch-length), when the operator passes its input through.
    pub columns: &'a mut Vec<(usize, Column)>,
    /// Input rows that arrived after every window they belong to closed.
    pub late: &'a mut Vec<u32>,
    /// Hands the rows so far on — through HAVING and the SELECT list to
    /// the engine's output — so that they need not all be held at once.
    /// Absent where nothing downstream can take rows mid-batch (tests).
    /// Only an operator that never deletes drains.
    pub drain: Option<Drain<'a>>,
    /// Rows of [`OperatorOutput::rows`] that delete their key rather than
    /// update it (in increasing order): a group an aggregate over a table
    /// no longer has.
    pub deleted: Vec<u32>,
}

/// Takes an operator's rows so far (see [`OperatorOutput::drain`]).
pub type Drain<'a> = &'a mut dyn FnMut(&Batch) -> Result<(), Error>;

/// How many rows an operator whose output for one batch has no bound (a
/// join: every pair of a key) holds before handing them on: one hot key
/// of 20,000 rows a side is 400 M pairs from a single batch, which, held
/// whole, took 6 GB that no state limit saw.
pub const OUTPUT_CHUNK_ROWS: usize = 8192;

impl std::fmt::Debug for OperatorOutput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorOutput")
            .field("rows", &self.rows.len)
            .field("columns", &self.columns.len())
            .field("late", &self.late.len())
            .field("drain", &self.drain.is_some())
            .field("deleted", &self.deleted.len())
            .finish()
    }
}

impl<'a> OperatorOutput<'a> {
    pub fn new(rows: &'a mut Batch, columns: &'a mut Vec<(usize, Column)>, late: &'a mut Vec<u32>) -> Self {
        Self { rows, columns, late, drain: None, deleted: Vec::new() }
    }

    /// Hands [`OperatorOutput::rows`] on and clears it once it holds
    /// [`OUTPUT_CHUNK_ROWS`] rows (when a drain is there to take them).
    pub fn drain_if_full(&mut self) -> Result<(), Error> {
        drain_if_full(self.rows, self.drain.as_mut())
    }
}

fn drain_if_full(rows: &mut Batch, drain: Option<&mut Drain<'_>>) -> Result<(), Error> {
    if rows.len < OUTPUT_CHUNK_ROWS {
        return Ok(());
    }
    if let Some(drain) = drain {
        drain(rows)?;
        rows.clear();
    }
    Ok(())
}

/// Where an operator puts the rows a watermark, or the end of a bounded
/// input, closes. One watermark can close millions of windows at once
/// (every open session when a bounded input ends, or a watermark that
/// jumps): held whole, with their encoding beside them, 2.9 M sessions
/// took over 1 GB that no state limit saw. So they go on in chunks of
/// [`OUTPUT_CHUNK_ROWS`], as a join's pairs do.
pub struct Closed<'a> {
    /// Rows of its own, in the plan's intermediate schema.
    pub rows: &'a mut Batch,
    /// Hands the rows so far on (see [`OperatorOutput::drain`]); absent
    /// where nothing downstream can take rows before the call returns.
    pub drain: Option<Drain<'a>>,
}

impl std::fmt::Debug for Closed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Closed").field("rows", &self.rows.len).field("drain", &self.drain.is_some()).finish()
    }
}

impl<'a> Closed<'a> {
    /// Rows held until the call returns.
    pub fn new(rows: &'a mut Batch) -> Self {
        Self { rows, drain: None }
    }

    /// Hands [`Closed::rows`] on and clears it once it holds
    /// [`OUTPUT_CHUNK_ROWS`] rows (when a drain is there to take them).
    pub fn drain_if_full(&mut self) -> Result<(), Error> {
        drain_if_full(self.rows, self.drain.as_mut())
    }
}

/// How much state an operator holds, for `sluice_state_bytes` and the
/// `stateMemoryLimit` check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateSize {
    pub bytes: usize,
    pub entries: usize,
}

/// The kind of an operator's checkpoint, written before its state. The
/// numbers are part of the checkpoint format: never renumber.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum OperatorTag {
    Stateless = 0,
    Aggregate = 1,
    Session = 2,
    Rows = 3,
    TopN = 4,
    Merge = 5,
    Join = 6,
    TableJoin = 7,
    UpsertAggregate = 8,
    HopPanes = 9,
    Changelog = 10,
    SignedAggregate = 11,
    /// What an aggregate's incremental checkpoint writes beside its pages.
    AggregateHead = 12,
    TopNHead = 13,
    JoinHead = 14,
    /// The merge of a two-phase aggregate with groups and parts (`Merge`
    /// is its checkpoint before them, still read).
    MergeGroups = 15,
    /// An OVER window over a changelog (`crate::rows_changelog`).
    RowsChangelog = 16,
    /// An aggregate's head once it spilled: its pages no longer sit in
    /// the group table's order (`crate::state::PageMap`).
    AggregateSpilledHead = 17,
    /// A top N's head once it spilled.
    TopNSpilledHead = 18,
    /// A join's head once it spilled.
    JoinSpilledHead = 19,
    /// What an OVER window's incremental checkpoint writes beside its pages.
    RowsHead = 20,
    /// An OVER window's head once it spilled.
    RowsSpilledHead = 21,
    /// What session windows' incremental checkpoint writes beside its pages.
    SessionHead = 22,
    /// Session windows' head once they spilled.
    SessionSpilledHead = 23,
    /// What a stream–table join's incremental checkpoint writes beside
    /// its pages (`TableJoin` is its whole checkpoint before them, still read).
    TableJoinHead = 24,
    /// A stream–table join's head once it spilled.
    TableJoinSpilledHead = 25,
    /// What a table's changelog stage writes beside its pages
    /// (`Changelog` is its whole checkpoint before them, still read).
    ChangelogHead = 26,
    /// A table's changelog stage's head once it spilled.
    ChangelogSpilledHead = 27,
}

pub trait Operator: std::fmt::Debug + Send {
    /// Processes one batch.
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error>;

    /// Whether results are the input rows with [`OperatorOutput::columns`]
    /// added, rather than [`OperatorOutput::rows`].
    fn passes_input_through(&self) -> bool {
        false
    }

    /// The watermark stands at `watermark`: close what it passed, emitting
    /// closed windows into `out` when `emit` (EMIT FINAL).
    fn on_watermark(&mut self, _watermark: i64, _emit: bool, _out: &mut Closed<'_>) -> Result<(), Error> {
        Ok(())
    }

    /// The watermark of its output when its input's stands at `watermark`:
    /// the oldest event time (of the rows' time column) it may still emit.
    /// An operator that holds rows and emits them later with their own
    /// time holds its output's watermark back, so the next stage does not
    /// find them late.
    fn output_watermark(&self, watermark: i64) -> i64 {
        watermark
    }

    /// The input ended (a bounded run): close everything still open.
    fn finish(&mut self, _emit: bool, _out: &mut Closed<'_>) -> Result<(), Error> {
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize::default()
    }

    /// Whether [`Operator::state_size`] walks the state (its cost grows
    /// with it) rather than reading sizes kept as the state changes: the
    /// engine then measures less often (`Engine::check_state_limit`).
    fn state_size_walks(&self) -> bool {
        false
    }

    /// [`StateSize::entries`] without walking the state. An operator whose
    /// size walks overrides it: the engine reads it between walks, so that
    /// a state that shrank without input (windows the watermark closed) is
    /// measured again, not reported at its old size until enough rows come.
    fn state_entries(&self) -> usize {
        self.state_size().entries
    }

    /// Appends the operator's tag and state to `out`.
    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error>;

    /// Restores state written by [`Operator::snapshot`] of the same kind.
    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error>;

    /// State kept in pages (`crate::state`): checkpoints that write what
    /// changed, and state larger than memory. An operator whose state is
    /// not paged checkpoints whole and never spills.
    fn paged(&self) -> Option<&dyn Paged> {
        None
    }

    /// [`Operator::paged`], to change.
    fn paged_mut(&mut self) -> Option<&mut dyn Paged> {
        None
    }

    /// The plan has HAVING and emits updates: keep, per group, whether its
    /// last row passed HAVING (`crate::shown`). An operator that emits no
    /// updates of a group keeps nothing.
    fn track_having(&mut self) {}

    /// HAVING judged the `rows` rows this operator emitted since the last
    /// call: `passed` passed it and `deleted` delete their key (both
    /// increasing). Appends to `retracted`, increasing, the rows of groups
    /// that were shown and now fail: they go out as deletions.
    fn settle_having(
        &mut self,
        _rows: usize,
        _passed: &[u32],
        _deleted: &[u32],
        _retracted: &mut Vec<u32>,
    ) -> Result<(), Error> {
        Ok(())
    }
}

/// The head of an incremental checkpoint of an operator that keeps
/// nothing beside its paged groups: under `tags[0]` once it spilled (its
/// pages no longer in the table's order), else under `tags[1]`.
pub(crate) fn write_head(paged: &PagedState, tags: [OperatorTag; 2], out: Vec<u8>) -> Result<Vec<u8>, Error> {
    match paged.spilling.head(&paged.table, ()) {
        Some(head) => write_state(tags[0], &head, out),
        None => write_state(tags[1], &TableHead::of(&paged.table), out),
    }
}

/// Writes `tag` then `state` (postcard), as an enum variant is written.
pub fn write_state<S: Serialize>(tag: OperatorTag, state: &S, out: Vec<u8>) -> Result<Vec<u8>, Error> {
    postcard::to_extend(&(tag as u32, state), out)
        .map_err(|e| Error::Checkpoint(format!("cannot serialise state: {e}")))
}

/// Reads a state written by [`write_state`], checking it is of kind `tag`.
pub fn read_state<'a, S: Deserialize<'a>>(tag: OperatorTag, bytes: &'a [u8]) -> Result<S, Error> {
    read_state_and_rest(tag, bytes).map(|(state, _)| state)
}

/// [`read_state`], and the bytes written after the state (HAVING's bits,
/// `crate::shown`).
pub fn read_state_and_rest<'a, S: Deserialize<'a>>(tag: OperatorTag, bytes: &'a [u8]) -> Result<(S, &'a [u8]), Error> {
    let ((found, state), rest): ((u32, S), _) =
        postcard::take_from_bytes(bytes).map_err(|e| Error::Checkpoint(format!("cannot read state: {e}")))?;
    if found != tag as u32 {
        return Err(Error::Checkpoint("checkpoint operator does not match the query".into()));
    }
    Ok((state, rest))
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::{OperatorTag, read_state, write_state};

    /// The engine's checkpoints once held the operator's state in an enum;
    /// a tag and the state written in sequence must give the same bytes,
    /// or checkpoints written before would no longer restore.
    #[test]
    fn a_tagged_state_is_laid_out_as_the_enum_variant_was() {
        #[derive(Serialize)]
        enum Before<'a> {
            Stateless,
            Aggregate(&'a (u64, Vec<i64>)),
        }
        let state = (7u64, vec![-1i64, 300]);
        let mut header = postcard::to_allocvec(&(1u32, 0xfeed_u64, -5i64)).unwrap();
        let mut old = header.clone();
        old.extend(postcard::to_allocvec(&Before::Aggregate(&state)).unwrap());
        assert_eq!(write_state(OperatorTag::Aggregate, &state, header.clone()).unwrap(), old);
        header.extend(postcard::to_allocvec(&Before::Stateless).unwrap());
        let empty = postcard::to_allocvec(&(1u32, 0xfeed_u64, -5i64)).unwrap();
        assert_eq!(write_state(OperatorTag::Stateless, &(), empty).unwrap(), header);
        let back: (u64, Vec<i64>) =
            read_state(OperatorTag::Aggregate, &postcard::to_allocvec(&Before::Aggregate(&state)).unwrap()).unwrap();
        assert_eq!(back, state);
        assert!(read_state::<()>(OperatorTag::Rows, &[0]).is_err(), "a tag of another kind is refused");
    }
}
