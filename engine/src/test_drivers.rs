//! Drivers for operators' own tests: a batch run as the engine runs it,
//! and checkpoints in pages written and restored as the runtime does.

use sluice_plan::{Batch, Selection};

use crate::operator::{BatchInput, Closed, Operator, OperatorOutput};
use crate::state::Paged;

/// `op`'s paged state (the operator under test pages).
fn paged<T: Operator + ?Sized>(op: &mut T) -> &mut dyn Paged {
    op.paged_mut().expect("the operator under test keeps its state in pages")
}

/// Writes `op`'s head and the pages it changed since the last call (every
/// page when `all`) into `pages` — the latest of each, as the compacted
/// state topic keeps them — and returns the head.
pub(crate) fn checkpoint_pages(
    op: &mut dyn Operator,
    pages: &mut std::collections::BTreeMap<u32, Vec<u8>>,
    all: bool,
) -> Vec<u8> {
    checkpoint_counting(op, pages, all).0
}

/// [`checkpoint_pages`], and how many pages it wrote.
pub(crate) fn checkpoint_counting(
    op: &mut dyn Operator,
    pages: &mut std::collections::BTreeMap<u32, Vec<u8>>,
    all: bool,
) -> (Vec<u8>, usize) {
    let op = paged(op);
    let head = op.snapshot_head(Vec::new()).unwrap_or_else(|e| panic!("head: {e}"));
    let mut dirty = Vec::new();
    op.take_dirty_pages(all, &mut dirty);
    let written = dirty.len();
    for page in dirty {
        pages.insert(page, op.snapshot_page(page, Vec::new()).unwrap_or_else(|e| panic!("page {page}: {e}")));
    }
    (head, written)
}

/// What [`agrees_through_page_restores`] saw of the operator it
/// checkpointed.
#[derive(Debug, Default)]
pub(crate) struct PagedRun {
    /// The fewest pages one checkpoint wrote (after the first).
    pub fewest_written: usize,
    /// Pages the last checkpoint left in the topic.
    pub pages: usize,
    /// The most pages it held on disk, and the most state in memory.
    pub most_spilled: usize,
    pub most_state: usize,
    /// The most state of the one never checkpointed.
    pub in_memory: usize,
    /// Entries held at the end by either.
    pub entries: (usize, usize),
}

/// Runs `rounds` rounds of input from `next` through two operators made by
/// `make` — one never checkpointed, one checkpointed in pages after each
/// round and restored from its head and the pages written so far every
/// `every` rounds, spilling past `spill` bytes (into a new, empty store at
/// each restore) when given — and asserts that each round `run` gives the
/// same output from both.
pub(crate) fn agrees_through_page_restores<T: Operator, I, O: PartialEq + std::fmt::Debug>(
    make: impl Fn() -> T,
    spill: Option<usize>,
    (rounds, every): (usize, usize),
    mut next: impl FnMut() -> I,
    mut run: impl FnMut(&mut T, &I) -> O,
) -> PagedRun {
    let checkpointed = || {
        let mut op = make();
        if let Some(budget) = spill {
            paged(&mut op).attach_spill(Box::new(crate::state::MemorySpill::default()), budget);
        }
        op
    };
    let (mut whole, mut paged) = (make(), checkpointed());
    let mut pages = std::collections::BTreeMap::new();
    let mut seen = PagedRun { fewest_written: usize::MAX, ..PagedRun::default() };
    for r in 0..rounds {
        let input = next();
        assert_eq!(run(&mut whole, &input), run(&mut paged, &input), "round {r}");
        if spill.is_some() {
            self::paged(&mut paged).spill().unwrap_or_else(|e| panic!("spill: {e}"));
        }
        seen.most_spilled = seen.most_spilled.max(self::paged(&mut paged).spilled().0);
        seen.most_state = seen.most_state.max(paged.state_size().bytes);
        seen.in_memory = seen.in_memory.max(whole.state_size().bytes);
        let (head, written) = checkpoint_counting(&mut paged, &mut pages, false);
        if r > 0 {
            seen.fewest_written = seen.fewest_written.min(written);
        }
        if r % every == every - 1 {
            paged = restore_pages(checkpointed(), &head, &pages);
        }
    }
    seen.pages = pages.len();
    seen.entries = (whole.state_size().entries, paged.state_size().entries);
    seen
}

/// Restores `op` from a head and its pages, as a restart reads them.
pub(crate) fn restore_pages<T: Operator>(
    mut op: T,
    head: &[u8],
    pages: &std::collections::BTreeMap<u32, Vec<u8>>,
) -> T {
    let state = paged(&mut op);
    state.restore_head(head).unwrap_or_else(|e| panic!("head: {e}"));
    for (&page, bytes) in pages {
        state.restore_page(page, bytes).unwrap_or_else(|e| panic!("page {page}: {e}"));
    }
    state.pages_restored().unwrap_or_else(|e| panic!("pages: {e}"));
    op
}

/// Runs one batch through `op` as the engine would, every row having seen
/// `watermark`, then the watermark: what it emitted and the late rows.
pub(crate) fn run_at_watermark(
    op: &mut dyn Operator,
    batch: &Batch,
    times: &[i64],
    watermark: i64,
    types: &[sluice_plan::DataType],
) -> (Batch, Vec<u32>) {
    let before = vec![watermark; batch.len];
    let input = BatchInput {
        batch,
        selection: Selection::All(batch.len),
        event_times: times,
        watermark_before: &before,
        per_record: false,
        emit_changes: false,
        upstreams: &[],
    };
    let mut out = Batch::empty(types);
    let (mut columns, mut late) = (Vec::new(), Vec::new());
    let mut output = OperatorOutput::new(&mut out, &mut columns, &mut late);
    op.process(&input, &mut output).unwrap_or_else(|e| panic!("process: {e}"));
    op.on_watermark(watermark, true, &mut Closed::new(&mut out)).unwrap_or_else(|e| panic!("watermark: {e}"));
    (out, late)
}

/// Runs one batch through `op` as the engine would with EMIT CHANGES
/// (coalesced, no watermark): the rows it emitted and which of them it
/// deleted.
pub(crate) fn run_emitting_changes(
    op: &mut dyn Operator,
    batch: &Batch,
    types: &[sluice_plan::DataType],
) -> (Batch, Vec<u32>) {
    let zeros = vec![0; batch.len];
    let input = BatchInput {
        batch,
        selection: Selection::All(batch.len),
        event_times: &zeros,
        watermark_before: &zeros,
        per_record: false,
        emit_changes: true,
        upstreams: &[],
    };
    let mut out = Batch::empty(types);
    let (mut columns, mut late) = (Vec::new(), Vec::new());
    let mut output = OperatorOutput::new(&mut out, &mut columns, &mut late);
    op.process(&input, &mut output).unwrap_or_else(|e| panic!("process: {e}"));
    let deleted = output.deleted;
    (out, deleted)
}
