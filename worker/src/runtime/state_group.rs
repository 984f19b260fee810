//! A partition's checkpoint with those of the plans that read its input
//! beside it: one commit of a partition carries one state pointer, so the
//! plans reading one partition are saved and restored together.

use super::partition::PartitionPipeline;
use super::state_store::{Loaded, Snapshot, StateStore};
use crate::Error;

/// Partition `slot`'s checkpoint, with those of the plans that read its
/// input beside it (`companions`): a plan fed by an exchange keeps its
/// upstream positions and output count even when its operator keeps
/// nothing, and the input's commit can point at one snapshot only.
/// Incremental when any of them is paged: their heads, and the pages that
/// changed (of pipeline 0, the partition's own, or 1 + its place among
/// the companions).
pub(super) fn snapshot_group(
    parts: &mut [PartitionPipeline],
    slot: usize,
    companions: &[usize],
) -> Result<Snapshot, Error> {
    let members = || group_members(slot, companions);
    let paged = members().any(|m| parts[m].paged());
    let heads = members()
        .map(|m| if paged { parts[m].snapshot_head() } else { parts[m].snapshot() })
        .collect::<Result<Vec<_>, _>>()?;
    let pages = if paged {
        let mut pages = Vec::new();
        for (component, m) in members().enumerate() {
            if parts[m].paged() {
                let component = u8::try_from(component)
                    .map_err(|_| Error::Internal("more than 255 plans read one partition".into()))?;
                pages.extend(parts[m].take_dirty_pages().into_iter().map(|page| (component, page)));
            }
        }
        Some(pages)
    } else {
        None
    };
    let p = &parts[slot];
    let mut heads = heads.into_iter();
    let own = heads.next().unwrap_or_default();
    let head = if companions.is_empty() {
        own
    } else {
        let others: Vec<Vec<u8>> = heads.collect();
        postcard::to_allocvec(&(own, others))
            .map_err(|e| Error::Checkpoint(format!("cannot serialise the state of partition {}: {e}", p.partition())))?
    };
    Ok(Snapshot { partition: p.partition(), head, slot: StateStore::next_slot(p.metadata()), pages })
}

/// The slots checkpointed together with `slot`, itself first: the order
/// of the pipelines a checkpoint's pages number.
pub(super) fn group_members(slot: usize, companions: &[usize]) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(slot).chain(companions.iter().copied())
}

/// Restores [`snapshot_group`]'s checkpoint.
pub(super) fn restore_group(
    parts: &mut [PartitionPipeline],
    slot: usize,
    companions: &[usize],
    loaded: &Loaded,
) -> Result<(), Error> {
    let head = loaded.pages.is_some();
    let partition = parts[slot].partition();
    if companions.is_empty() {
        parts[slot].restore(&loaded.head, head)?;
    } else {
        let (own, others): (Vec<u8>, Vec<Vec<u8>>) = postcard::from_bytes(&loaded.head)
            .map_err(|e| Error::Checkpoint(format!("cannot read the state of partition {partition}: {e}")))?;
        if others.len() != companions.len() {
            return Err(Error::Checkpoint(format!(
                "the state of partition {partition} is of {} plan(s) reading it, this query has {}",
                others.len() + 1,
                companions.len() + 1
            )));
        }
        parts[slot].restore(&own, head)?;
        for (&c, bytes) in companions.iter().zip(&others) {
            parts[c].restore(bytes, head)?;
        }
    }
    let Some(pages) = &loaded.pages else { return Ok(()) };
    let members: Vec<usize> = group_members(slot, companions).collect();
    for ((component, page), bytes) in pages {
        let m = members.get(usize::from(*component)).copied().ok_or_else(|| {
            Error::Checkpoint(format!(
                "the state of partition {partition} has pages of plan {component}, this query has {}",
                members.len()
            ))
        })?;
        parts[m].restore_page(*page, bytes)?;
    }
    for m in members {
        if parts[m].paged() {
            parts[m].pages_restored()?;
        }
    }
    Ok(())
}
