//! Fresh parts: a stage call's part is first written to table `fresh_parts`, keyed by its stage record's
//! sequence number, and moved to its row in table `parts` (keyed by checkpoint, attempt and part) when its
//! checkpoint is *settled*.
//!
//! Why: a `parts` row lands at the end of its own checkpoint's key range, so a group commit of stage calls into
//! 32 checkpoints dirtied (wrote and fsynced) a leaf per checkpoint; `fresh_parts` rows of one group commit are
//! appended together, on the table's last leaf, like the log's frames (docs/ARCHITECTURE.md, "Fresh parts").
//!
//! The rule that keeps every reader of `parts` unchanged: a checkpoint is settled (every fresh part of it moved
//! to `parts`, in the same write transaction) before any record other than a stage that names it is applied,
//! and every fresh part is settled once there are more than [`FRESH_PARTS_MAX`] or [`FRESH_PART_BYTES_MAX`].
//! A stage itself reads the fresh parts through [`FreshParts`] (its same-bytes check and its attempt's size).
//! Readers outside the writer (snapshots, the collector's live results, the crash images, `verify`) read both
//! tables. A part is in exactly one of them, always.
//!
//! [`FreshParts`] is the writer's index of the table, carried from one transaction to the next like
//! [`super::apply::AttemptSizes`], and rebuilt by a scan of the table (bounded by the limits above) whenever a
//! transaction did not commit or the tables are opened afresh.

use std::collections::{BTreeMap, HashMap};

use redb::ReadableTable;

use crate::error::Error;
use crate::limits::{FRESH_PART_BYTES_MAX, FRESH_PARTS_MAX};
use crate::types::CheckpointId;
use crate::wal::tables::decode_fresh_part;

/// Where one fresh part is: its row's key in `fresh_parts` and the length of its `parts` row.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct FreshEntry {
    pub seq: u64,
    pub bytes: u64,
}

/// The writer's index of table `fresh_parts`: per checkpoint, `(attempt, part) → entry`.
#[derive(Default, Debug, PartialEq, Eq)]
pub(crate) struct FreshParts {
    by_id: HashMap<CheckpointId, BTreeMap<(u32, u32), FreshEntry>>,
    count: usize,
    bytes: u64,
}

impl FreshParts {
    /// Reads the index back from the table. A part named twice is `Corrupt`.
    pub(crate) fn scan(table: &impl ReadableTable<u64, &'static [u8]>) -> Result<Self, Error> {
        let mut index = Self::default();
        for entry in table.iter()? {
            let (k, v) = entry?;
            let seq = k.value();
            let part = decode_fresh_part(seq, v.value())?;
            let entry = FreshEntry { seq, bytes: part.value.len() as u64 };
            if let Some(other) = index.insert(&part.id, part.attempt, part.part, entry) {
                return Err(Error::corrupt(format!(
                    "table fresh_parts holds part ({}, {}, {}) at seq {} and at seq {seq}",
                    part.id, part.attempt, part.part, other.seq
                )));
            }
        }
        Ok(index)
    }

    /// Whether no fresh part is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether the held parts exceed a limit, so that they must all be settled.
    pub(crate) fn over_limit(&self) -> bool {
        self.count > FRESH_PARTS_MAX || self.bytes > FRESH_PART_BYTES_MAX
    }

    /// The fresh part `(id, attempt, part)`, if there is one.
    pub(crate) fn get(&self, id: &CheckpointId, attempt: u32, part: u32) -> Option<FreshEntry> {
        self.by_id.get(id)?.get(&(attempt, part)).copied()
    }

    /// The bytes and count of the fresh parts of `id`'s attempt `attempt`.
    pub(crate) fn attempt_size(&self, id: &CheckpointId, attempt: u32) -> (u64, u64) {
        let Some(parts) = self.by_id.get(id) else { return (0, 0) };
        parts.range((attempt, 0)..=(attempt, u32::MAX)).fold((0, 0), |(b, n), (_, e)| (b + e.bytes, n + 1))
    }

    /// Adds a part; returns the entry it replaced (never, for a caller that checked [`FreshParts::get`]).
    pub(crate) fn insert(
        &mut self,
        id: &CheckpointId,
        attempt: u32,
        part: u32,
        entry: FreshEntry,
    ) -> Option<FreshEntry> {
        let parts = match self.by_id.get_mut(id) {
            Some(parts) => parts,
            None => self.by_id.entry(id.clone()).or_default(),
        };
        let replaced = parts.insert((attempt, part), entry);
        self.count += 1;
        self.bytes += entry.bytes;
        if let Some(old) = replaced {
            self.count -= 1;
            self.bytes -= old.bytes;
        }
        replaced
    }

    /// Removes and returns every fresh part of `id`, in `(attempt, part)` order.
    pub(crate) fn take(&mut self, id: &CheckpointId) -> Vec<((u32, u32), FreshEntry)> {
        let Some(parts) = self.by_id.remove(id) else { return Vec::new() };
        self.count -= parts.len();
        self.bytes -= parts.values().map(|e| e.bytes).sum::<u64>();
        parts.into_iter().collect()
    }

    /// Every checkpoint with a fresh part, in id order.
    pub(crate) fn ids(&self) -> Vec<CheckpointId> {
        let mut ids: Vec<CheckpointId> = self.by_id.keys().cloned().collect();
        ids.sort();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> CheckpointId {
        CheckpointId::new(s).unwrap()
    }

    #[test]
    fn counts_and_bytes_follow_inserts_and_takes() {
        let mut fresh = FreshParts::default();
        assert!(fresh.is_empty());
        assert_eq!(fresh.insert(&id("a"), 0, 0, FreshEntry { seq: 5, bytes: 10 }), None);
        assert_eq!(fresh.insert(&id("a"), 0, 1, FreshEntry { seq: 6, bytes: 20 }), None);
        assert_eq!(fresh.insert(&id("a"), 1, 0, FreshEntry { seq: 7, bytes: 40 }), None);
        assert_eq!(fresh.insert(&id("b"), 0, 0, FreshEntry { seq: 8, bytes: 80 }), None);
        assert_eq!(fresh.attempt_size(&id("a"), 0), (30, 2));
        assert_eq!(fresh.attempt_size(&id("a"), 1), (40, 1));
        assert_eq!(fresh.attempt_size(&id("c"), 0), (0, 0));
        assert_eq!(fresh.get(&id("a"), 0, 1), Some(FreshEntry { seq: 6, bytes: 20 }));
        assert_eq!(fresh.ids(), vec![id("a"), id("b")]);
        let taken = fresh.take(&id("a"));
        assert_eq!(
            taken.iter().map(|(k, e)| (*k, e.seq)).collect::<Vec<_>>(),
            vec![((0, 0), 5), ((0, 1), 6), ((1, 0), 7)]
        );
        assert_eq!((fresh.count, fresh.bytes), (1, 80));
        assert!(fresh.take(&id("a")).is_empty());
        fresh.take(&id("b"));
        assert!(fresh.is_empty() && fresh.bytes == 0);
    }

    #[test]
    fn the_limit_is_crossed_by_count_or_by_bytes() {
        let mut fresh = FreshParts::default();
        for seq in 0..FRESH_PARTS_MAX as u64 {
            fresh.insert(&id("a"), 0, seq as u32, FreshEntry { seq, bytes: 1 });
        }
        assert!(!fresh.over_limit());
        fresh.insert(&id("b"), 0, 0, FreshEntry { seq: 1 << 20, bytes: 1 });
        assert!(fresh.over_limit());
        let mut big = FreshParts::default();
        big.insert(&id("a"), 0, 0, FreshEntry { seq: 0, bytes: FRESH_PART_BYTES_MAX });
        assert!(!big.over_limit());
        big.insert(&id("a"), 0, 1, FreshEntry { seq: 1, bytes: 1 });
        assert!(big.over_limit());
    }
}
