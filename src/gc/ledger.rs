//! The garbage ledger's vocabulary: where an entry sits ([`GarbageRef`]), what it holds ([`GarbageEntry`]), and
//! the check of a forget's entries. The store writes and reads the ledger (table `garbage`, see
//! `docs/ARCHITECTURE.md`) and the data-file collector (`gc::data_files`) reads it through the store, so this
//! module sits below both and imports neither.

use crate::error::{Error, Result};
use crate::limits::GARBAGE_FORGET_ENTRIES_MAX;
use crate::types::{Attempt, CheckpointId, WriteResult};

/// Where an entry sits in the garbage ledger: the sequence number of the record that dropped its result, and
/// the result's index among that record's.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct GarbageRef {
    /// The sequence number of the `restart`, `abort` or `force_abort` record.
    pub seq: u64,
    /// The result's index among what that record dropped.
    pub index: u32,
}

/// One entry of the garbage ledger: a write result of a dropped attempt.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GarbageEntry {
    /// Its place in the ledger.
    pub at: GarbageRef,
    /// The checkpoint whose attempt it was.
    pub id: CheckpointId,
    /// The dropped attempt.
    pub attempt: Attempt,
    /// The write result, naming the data files.
    pub result: WriteResult,
}

/// Checks a `forget_garbage` call's entries: 1 to [`GARBAGE_FORGET_ENTRIES_MAX`], returned sorted and distinct.
pub(crate) fn checked_refs(refs: &[GarbageRef]) -> Result<Vec<(u64, u32)>> {
    if refs.is_empty() || refs.len() > GARBAGE_FORGET_ENTRIES_MAX {
        return Err(Error::invalid_input(format!(
            "forget_garbage takes 1 to {GARBAGE_FORGET_ENTRIES_MAX} entries, not {}",
            refs.len()
        )));
    }
    let mut entries: Vec<(u64, u32)> = refs.iter().map(|r| (r.seq, r.index)).collect();
    entries.sort_unstable();
    entries.dedup();
    Ok(entries)
}
