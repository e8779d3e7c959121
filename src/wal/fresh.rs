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
use crate::wal::tables::visit_fresh_parts;

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
        visit_fresh_parts(table, |seq, part| {
            let entry = FreshEntry { seq, bytes: part.value.len() as u64 };
            match index.insert(&part.id, part.attempt, part.part, entry) {
                None => Ok(()),
                Some(other) => Err(Error::corrupt(format!(
                    "table fresh_parts holds part ({}, {}, {}) at seq {} and at seq {seq}",
                    part.id, part.attempt, part.part, other.seq
                ))),
            }
        })?;
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
    use crate::error::TransitionError;
    use crate::types::{Format, JobId, TargetIdentity, WriteResult};
    use crate::wal::apply::{Carry, Placement, Tables};
    use crate::wal::record::Record;
    use crate::wal::tables::{FRESH_PARTS, GARBAGE, Identity, Meta, PARTS, create_all};
    use redb::{Database, ReadableDatabase as _, ReadableTableMetadata as _};

    fn id(s: &str) -> CheckpointId {
        CheckpointId::new(s).unwrap()
    }

    /// A store's tables in memory, created and opened (as the opener does) at epoch 1.
    fn created() -> (Database, Meta) {
        let db = redb::Builder::new().create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
        let identity = Identity {
            job: JobId::new("j").unwrap(),
            target: TargetIdentity::new("t").unwrap(),
            create_if_missing: true,
        };
        let mut meta = identity.new_meta(7);
        let txn = db.begin_write().unwrap();
        create_all(&txn).unwrap();
        {
            let mut tables = Tables::open(&txn).unwrap();
            tables.append(&mut meta, 0, &identity.create_record()).unwrap();
            meta.epoch = 1;
            tables.append(&mut meta, 1, &Record::Open { writer_tag: 7 }).unwrap();
            tables.write_meta(&meta).unwrap();
        }
        txn.commit().unwrap();
        (db, meta)
    }

    fn stage(name: &str, attempt: u32, part: u32, result: &str) -> Record {
        Record::Stage {
            id: id(name),
            attempt,
            part,
            keys: vec![format!("in/{name}/{attempt}/{part}").into_bytes()],
            results: vec![WriteResult::new(Format::Parquet, result.as_bytes().to_vec()).unwrap()],
        }
    }

    /// Runs `records` in one transaction; each must be accepted. Returns what the transaction carries on.
    fn run(db: &Database, meta: &mut Meta, carry: Carry, records: &[Record]) -> Carry {
        let txn = db.begin_write().unwrap();
        let carry = {
            let mut tables = Tables::open_with(&txn, carry).unwrap();
            for record in records {
                let mut frames = Vec::new();
                tables.execute(meta, record, &mut frames, u64::MAX).unwrap().unwrap();
            }
            tables.write_meta(meta).unwrap();
            tables.into_carry()
        };
        txn.commit().unwrap();
        carry
    }

    /// Rows in (`parts`, `fresh_parts`).
    fn rows(db: &Database) -> (u64, u64) {
        let txn = db.begin_read().unwrap();
        (txn.open_table(PARTS).unwrap().len().unwrap(), txn.open_table(FRESH_PARTS).unwrap().len().unwrap())
    }

    /// The index a scan of the table rebuilds.
    fn scanned(db: &Database) -> FreshParts {
        FreshParts::scan(&db.begin_read().unwrap().open_table(FRESH_PARTS).unwrap()).unwrap()
    }

    #[test]
    fn a_stage_writes_its_part_fresh_and_a_seal_settles_it() {
        let (db, mut meta) = created();
        let carry = run(&db, &mut meta, Carry::default(), &[stage("a", 0, 0, "a0"), stage("b", 0, 0, "b0")]);
        let carry = run(&db, &mut meta, carry, &[stage("a", 0, 1, "a1")]);
        assert_eq!(rows(&db), (0, 3), "every stage's part is fresh");
        let carry = run(&db, &mut meta, carry, &[Record::Seal { id: id("a"), parts: 2 }]);
        assert_eq!(rows(&db), (2, 1), "the seal moved a's two parts to their rows, b's stays fresh");
        let index = carry.into_fresh().unwrap();
        assert_eq!(index, scanned(&db), "the carried index is what a scan of the table finds");
        assert_eq!(index.get(&id("b"), 0, 0).map(|e| e.seq), Some(3));
        assert_eq!(index.get(&id("a"), 0, 0), None);
    }

    #[test]
    fn a_restage_of_a_fresh_part_is_judged_by_its_bytes() {
        let (db, mut meta) = created();
        let carry = run(&db, &mut meta, Carry::default(), &[stage("a", 0, 0, "a0")]);
        let txn = db.begin_write().unwrap();
        let mut tables = Tables::open_with(&txn, carry).unwrap();
        let mut frames = Vec::new();
        let same = tables.execute(&mut meta, &stage("a", 0, 0, "a0"), &mut frames, u64::MAX).unwrap().unwrap();
        assert!(!same.written && frames.is_empty(), "the same bytes again: a no-op");
        let other = tables.execute(&mut meta, &stage("a", 0, 0, "zz"), &mut frames, u64::MAX).unwrap();
        assert!(matches!(other, Err(TransitionError::PartConflict { .. })), "{other:?}");
    }

    #[test]
    fn a_restart_drops_fresh_parts_into_the_garbage_ledger() {
        let (db, mut meta) = created();
        let carry = run(&db, &mut meta, Carry::default(), &[stage("a", 0, 0, "a0"), stage("a", 0, 1, "a1")]);
        run(&db, &mut meta, carry, &[Record::Restart { id: id("a") }]);
        assert_eq!(rows(&db), (0, 0));
        let txn = db.begin_read().unwrap();
        assert_eq!(txn.open_table(GARBAGE).unwrap().len().unwrap(), 2, "both results await the collector");
    }

    #[test]
    fn crossing_the_limit_settles_every_fresh_part() {
        let (db, mut meta) = created();
        let records: Vec<Record> =
            (0..FRESH_PARTS_MAX as u32).map(|n| stage(&format!("c{}", n % 8), 0, n / 8, "r")).collect();
        let carry = run(&db, &mut meta, Carry::default(), &records);
        assert_eq!(rows(&db), (0, FRESH_PARTS_MAX as u64));
        let carry = run(&db, &mut meta, carry, &[stage("last", 0, 0, "r")]);
        assert_eq!(rows(&db), (FRESH_PARTS_MAX as u64 + 1, 0), "the stage past the limit settled them all");
        assert!(carry.into_fresh().unwrap().is_empty());
    }

    #[test]
    fn a_stage_sealed_by_the_same_call_writes_its_row_at_once() {
        let (seal, other) = (Record::Seal { id: id("a"), parts: 1 }, Record::Seal { id: id("b"), parts: 1 });
        assert_eq!(Placement::of(&stage("a", 0, 0, "a0"), Some(&seal)), Placement::Row);
        assert_eq!(Placement::of(&stage("a", 0, 0, "a0"), Some(&other)), Placement::Fresh);
        assert_eq!(Placement::of(&stage("a", 0, 0, "a0"), None), Placement::Fresh);
        assert_eq!(Placement::of(&seal, Some(&seal)), Placement::Fresh);
        let (db, mut meta) = created();
        let txn = db.begin_write().unwrap();
        {
            let mut tables = Tables::open(&txn).unwrap();
            let mut frames = Vec::new();
            let staged =
                tables.execute_placed(&mut meta, &stage("a", 0, 0, "a0"), Placement::Row, &mut frames, u64::MAX);
            assert!(staged.unwrap().unwrap().written);
            // A refused seal leaves a Staged checkpoint with its part as a row: a legal state (invariant 11), which
            // the next stage's checks and a later seal read as they read a settled part.
            let refused = tables.execute(&mut meta, &Record::Seal { id: id("a"), parts: 2 }, &mut frames, u64::MAX);
            assert!(matches!(refused.unwrap(), Err(TransitionError::MissingParts { .. })));
            let again = tables.execute(&mut meta, &stage("a", 0, 0, "a0"), &mut frames, u64::MAX).unwrap().unwrap();
            assert!(!again.written, "the part is found as a row: the same call again is a no-op");
            tables.execute(&mut meta, &stage("a", 0, 1, "a1"), &mut frames, u64::MAX).unwrap().unwrap();
            tables.execute(&mut meta, &Record::Seal { id: id("a"), parts: 2 }, &mut frames, u64::MAX).unwrap().unwrap();
            tables.write_meta(&meta).unwrap();
        }
        txn.commit().unwrap();
        assert_eq!(rows(&db), (2, 0));
    }

    /// Writes a fresh row by hand, as damage would.
    fn damage(db: &Database, seq: u64, name: &str, part: u32) {
        let txn = db.begin_write().unwrap();
        let value = crate::wal::record::encode_value(&crate::wal::tables::PartValue { keys: vec![], results: vec![] });
        let row = crate::wal::tables::FreshPart { id: id(name), attempt: 0, part, value: value.unwrap() };
        let bytes = crate::wal::record::encode_value(&row).unwrap();
        txn.open_table(FRESH_PARTS).unwrap().insert(seq, bytes.as_slice()).unwrap();
        txn.commit().unwrap();
    }

    fn verify(db: &Database) -> crate::Result<u64> {
        crate::store::TableSnapshot::begin(db).unwrap().verify_fresh_parts()
    }

    #[test]
    fn verify_names_a_fresh_part_that_is_not_a_staged_attempts_alone() {
        let (db, mut meta) = created();
        let carry = run(&db, &mut meta, Carry::default(), &[stage("a", 0, 0, "a0"), stage("b", 0, 0, "b0")]);
        run(&db, &mut meta, carry, &[Record::Seal { id: id("a"), parts: 1 }]);
        assert_eq!(verify(&db).unwrap(), 1);
        damage(&db, 1000, "a", 1);
        let err = verify(&db).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt);
        assert!(err.to_string().contains("seq 1000: part (a, 0, 1), but its checkpoint is Some((Sealed, 0))"), "{err}");
        let (db, mut meta) = created();
        let carry = run(&db, &mut meta, Carry::default(), &[stage("a", 0, 0, "a0")]);
        run(&db, &mut meta, carry, &[Record::Seal { id: id("a"), parts: 1 }]);
        assert_eq!(verify(&db).unwrap(), 0);
        let (db, mut meta) = created();
        run(&db, &mut meta, Carry::default(), &[stage("b", 0, 0, "b0")]);
        damage(&db, 1000, "b", 0);
        let err = verify(&db).unwrap_err();
        assert!(err.to_string().contains("seq 1000: part (b, 0, 0), which an earlier fresh row holds too"), "{err}");
        assert!(FreshParts::scan(&db.begin_read().unwrap().open_table(FRESH_PARTS).unwrap()).is_err());
    }

    #[test]
    fn a_transaction_that_did_not_commit_leaves_the_index_to_a_scan() {
        let (db, mut meta) = created();
        let carry = run(&db, &mut meta, Carry::default(), &[stage("a", 0, 0, "a0")]);
        // A seal settles the part in a transaction that then aborts: the table keeps the part fresh, so the
        // index the transaction ends with is wrong, and only a scan is right.
        let txn = db.begin_write().unwrap();
        let carry = {
            let mut tables = Tables::open_with(&txn, carry).unwrap();
            let mut seal_meta = meta.clone();
            tables
                .execute(&mut seal_meta, &Record::Seal { id: id("a"), parts: 1 }, &mut Vec::new(), u64::MAX)
                .unwrap()
                .unwrap();
            tables.into_carry()
        };
        txn.abort().unwrap();
        let carry = carry.after_abort();
        assert_eq!(rows(&db), (0, 1));
        let txn = db.begin_write().unwrap();
        let tables = Tables::open_with(&txn, carry).unwrap();
        assert_eq!(tables.into_carry().into_fresh().unwrap(), scanned(&db));
        assert!(scanned(&db).get(&id("a"), 0, 0).is_some());
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
