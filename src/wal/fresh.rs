//! Fresh parts: a stage call's part is first kept in its stage record alone (its log frame), and written to its
//! row in table `parts` (keyed by checkpoint, attempt and part) only when its checkpoint is *settled*.
//!
//! Why: a `parts` row lands at the end of its own checkpoint's key range, so a group commit of stage calls into
//! 32 checkpoints dirtied (wrote and fsynced) a leaf per checkpoint, and even a table of its own keyed by the
//! stage's seq (format 2's first cut, `fresh_parts`) was a second b-tree in every stage's commit. The log already
//! holds every byte of the part, appended on its last leaf (docs/FORMATS.md, "Fresh parts").
//!
//! A part is **fresh** exactly when its stage record is in the [`window`] of the log, its checkpoint is Staged at
//! the record's attempt, and table `parts` lacks its row. That is a fact of the committed tables, not a
//! promise: a Staged attempt's parts are only ever added to (every record that drops parts also leaves the
//! attempt or the state), a part is logged once per attempt (a same-bytes re-stage is a no-op, other bytes
//! are refused), and the writer keeps every fresh part's record inside the window:
//! - a checkpoint is settled (every fresh part of it written to `parts`, in the same write transaction) before
//!   any record other than a stage that names it is applied;
//! - every fresh part is settled once there are more than [`FRESH_PARTS_MAX`] or [`FRESH_PART_BYTES_MAX`];
//! - a part whose record falls out of the window, at the tail ([`FRESH_PART_LOG_RECORDS_MAX`] behind the log's
//!   end) or cut by a truncation, is settled first (with its checkpoint's other fresh parts).
//!
//! [`FreshParts`] is the writer's index of them, carried from one transaction to the next like
//! [`super::apply::AttemptSizes`], and rebuilt by a [`visit`] of the window whenever a transaction did not
//! commit or the tables are opened afresh. Readers outside the writer (snapshots, `get` and `list` of Staged
//! checkpoints, the collector's live results, the crash images, `verify`) visit the window too.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;

use redb::ReadableTable;

use crate::error::Error;
use crate::limits::{FRESH_PART_BYTES_MAX, FRESH_PART_LOG_RECORDS_MAX, FRESH_PARTS_MAX};
use crate::state::CheckpointState;
use crate::types::CheckpointId;
use crate::wal::frame;
use crate::wal::record::Record;
use crate::wal::tables::{CHECKPOINTS, FreshPart, LOG, META, PARTS, PartValue, read_checkpoint, read_meta};

/// The sequence numbers a fresh part's stage record can have, in a log kept from `log_start` whose next record
/// is `next_seq`: at most [`FRESH_PART_LOG_RECORDS_MAX`] records, the log's last.
pub(crate) fn window(log_start: u64, next_seq: u64) -> Range<u64> {
    log_start.max(next_seq.saturating_sub(FRESH_PART_LOG_RECORDS_MAX))..next_seq
}

/// The part a log frame's stage record carries; `None` for any other record.
/// Damage is `Corrupt`, naming `seq`.
pub(crate) fn stage_part(seq: u64, frame_bytes: &[u8]) -> Result<Option<FreshPart>, Error> {
    stage_part_with(seq, frame_bytes, &[Record::STAGE_VARIANT_INDEX])
}

/// The first bytes of the payload of every stage record of checkpoint `id`: the variant index, then the id as
/// postcard encodes it (its length, then its bytes; frozen by the records' golden encodings).
fn stage_prefix(id: &CheckpointId) -> Result<Vec<u8>, Error> {
    let mut prefix = vec![Record::STAGE_VARIANT_INDEX];
    let id = postcard::to_allocvec(id).map_err(|e| Error::bug(format!("encoding an id: {e}")))?;
    prefix.extend_from_slice(&id);
    Ok(prefix)
}

/// [`stage_part`] of the records whose payload begins with `prefix` (a stage's variant index, and perhaps its
/// id), read from a frame whose checksum held: the others are passed over without being decoded.
fn stage_part_with(seq: u64, frame_bytes: &[u8], prefix: &[u8]) -> Result<Option<FreshPart>, Error> {
    let place = format!("table log, seq {seq}");
    let frame = frame::decode_exact(frame_bytes, &place)?;
    if frame.seq != seq {
        return Err(Error::corrupt(format!("{place}: holds the frame of seq {}", frame.seq)));
    }
    // The variant index comes first in a postcard enum (frozen: `Record`'s variants are only appended), so the
    // records that are not stages are passed over without being decoded.
    if !frame.payload.starts_with(prefix) {
        return Ok(None);
    }
    match Record::from_payload(frame.payload, &place)? {
        Record::Stage { id, attempt, part, keys, results } => {
            Ok(Some(FreshPart { id, attempt, part, value: PartValue { keys, results } }))
        }
        _ => Ok(None),
    }
}

/// Hands every fresh part (of checkpoint `only`, or of every one with `None`) to `visit` with its record's seq,
/// in seq order: each stage record in `window` whose checkpoint is Staged at its attempt and whose row `parts`
/// lacks (see the module's doc).
pub(crate) fn visit(
    log: &impl ReadableTable<u64, &'static [u8]>,
    checkpoints: &impl ReadableTable<&'static str, &'static [u8]>,
    parts: &impl ReadableTable<(&'static str, u32, u32), &'static [u8]>,
    window: Range<u64>,
    only: Option<&CheckpointId>,
    mut visit: impl FnMut(u64, FreshPart) -> Result<(), Error>,
) -> Result<(), Error> {
    // The state and attempt of each checkpoint met, decoded once.
    let mut staged_at: HashMap<CheckpointId, Option<u32>> = HashMap::new();
    let prefix = match only {
        Some(id) => stage_prefix(id)?,
        None => vec![Record::STAGE_VARIANT_INDEX],
    };
    // The window is dense: a frame missing from it may have held a fresh part.
    let mut expected = window.start;
    let end = window.end;
    for entry in log.range(window)? {
        let (k, v) = entry?;
        let seq = k.value();
        if seq != expected {
            return Err(Error::corrupt(format!("table log, seq {expected} is missing")));
        }
        expected += 1;
        let Some(part) = stage_part_with(seq, v.value(), &prefix)? else { continue };
        if only.is_some_and(|id| *id != part.id) {
            continue;
        }
        let attempt = match staged_at.get(&part.id) {
            Some(attempt) => *attempt,
            None => {
                let record = read_checkpoint(checkpoints, &part.id)?;
                let attempt = record.filter(|r| r.state == CheckpointState::Staged).map(|r| r.attempt);
                staged_at.insert(part.id.clone(), attempt);
                attempt
            }
        };
        if attempt != Some(part.attempt) || parts.get((part.id.as_str(), part.attempt, part.part))?.is_some() {
            continue;
        }
        visit(seq, part)?;
    }
    if expected != end {
        return Err(Error::corrupt(format!("table log, seq {expected} is missing")));
    }
    Ok(())
}

/// `e`, met reading the fresh window `window`, with what damage there means and what to do about it.
pub(crate) fn in_window(e: Error, window: &Range<u64>) -> Error {
    if e.kind() != crate::ErrorKind::Corrupt {
        return e;
    }
    Error::corrupt(format!(
        "{e} (in the log's fresh window, seqs {}..{}, whose stage records hold the staged parts not yet in table \
         parts: restore the store from its mirror, or restart the tasks of its Staged checkpoints)",
        window.start, window.end
    ))
}

/// [`visit`] over a read transaction's view of the store (none in an empty one).
pub(crate) fn visit_stored(
    txn: &redb::ReadTransaction,
    only: Option<&CheckpointId>,
    each: impl FnMut(u64, FreshPart) -> Result<(), Error>,
) -> Result<(), Error> {
    let log = txn.open_table(LOG)?;
    let Some(meta) = read_meta(&txn.open_table(META)?, &log)? else { return Ok(()) };
    let (checkpoints, parts) = (txn.open_table(CHECKPOINTS)?, txn.open_table(PARTS)?);
    visit(&log, &checkpoints, &parts, window(meta.log_start, meta.next_seq), only, each)
}

/// Where one fresh part is: its stage record's seq and the length of its `parts` row.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct FreshEntry {
    pub seq: u64,
    pub bytes: u64,
}

/// The writer's index of the fresh parts: per checkpoint, `(attempt, part) → entry`, and the checkpoint of
/// each by seq (to find the parts a window's move leaves behind).
#[derive(Default, Debug, PartialEq, Eq)]
pub(crate) struct FreshParts {
    by_id: HashMap<CheckpointId, BTreeMap<(u32, u32), FreshEntry>>,
    by_seq: BTreeMap<u64, CheckpointId>,
    count: usize,
    bytes: u64,
}

impl FreshParts {
    /// Reads the index back from the tables (see [`visit`]). A part found twice is `Corrupt`.
    pub(crate) fn scan(
        log: &impl ReadableTable<u64, &'static [u8]>,
        checkpoints: &impl ReadableTable<&'static str, &'static [u8]>,
        parts: &impl ReadableTable<(&'static str, u32, u32), &'static [u8]>,
        window: Range<u64>,
    ) -> Result<Self, Error> {
        let mut index = Self::default();
        visit(log, checkpoints, parts, window, None, |seq, part| {
            let entry = FreshEntry { seq, bytes: part.row()?.len() as u64 };
            match index.insert(&part.id, part.attempt, part.part, entry) {
                None => Ok(()),
                Some(other) => Err(Error::corrupt(format!(
                    "table log holds stage records of part ({}, {}, {}) at seq {} and at seq {seq}",
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
        self.by_seq.insert(entry.seq, id.clone());
        if let Some(old) = replaced {
            self.count -= 1;
            self.bytes -= old.bytes;
            self.by_seq.remove(&old.seq);
        }
        replaced
    }

    /// Removes and returns every fresh part of `id`, in `(attempt, part)` order.
    pub(crate) fn take(&mut self, id: &CheckpointId) -> Vec<((u32, u32), FreshEntry)> {
        let Some(parts) = self.by_id.remove(id) else { return Vec::new() };
        self.count -= parts.len();
        self.bytes -= parts.values().map(|e| e.bytes).sum::<u64>();
        for entry in parts.values() {
            self.by_seq.remove(&entry.seq);
        }
        parts.into_iter().collect()
    }

    /// Every checkpoint with a fresh part, in id order.
    pub(crate) fn ids(&self) -> Vec<CheckpointId> {
        let mut ids: Vec<CheckpointId> = self.by_id.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Every checkpoint with a fresh part whose stage record's seq is below `seq`, in id order.
    pub(crate) fn ids_below(&self, seq: u64) -> Vec<CheckpointId> {
        // Asked after every append: most often nothing is that old, and nothing is gathered.
        if self.by_seq.first_key_value().is_none_or(|(oldest, _)| *oldest >= seq) {
            return Vec::new();
        }
        let ids: BTreeSet<&CheckpointId> = self.by_seq.range(..seq).map(|(_, id)| id).collect();
        ids.into_iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TransitionError;
    use crate::types::{Format, JobId, TargetIdentity, WriteResult};
    use crate::wal::apply::{Carry, Placement, Tables};
    use crate::wal::record::Record;
    use crate::wal::tables::{GARBAGE, Identity, Meta, PARTS, create_all};
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
                tables.execute(meta, record, &mut frames, u64::MAX).unwrap().into_result().unwrap();
            }
            tables.write_meta(meta).unwrap();
            tables.into_carry()
        };
        txn.commit().unwrap();
        carry
    }

    /// Rows in `parts`, and fresh parts.
    fn rows(db: &Database) -> (u64, u64) {
        let txn = db.begin_read().unwrap();
        let mut fresh = 0;
        visit_stored(&txn, None, |_, _| {
            fresh += 1;
            Ok(())
        })
        .unwrap();
        (txn.open_table(PARTS).unwrap().len().unwrap(), fresh)
    }

    /// The index a scan of the tables rebuilds.
    fn scan_of(db: &Database) -> Result<FreshParts, Error> {
        let txn = db.begin_read().unwrap();
        let log = txn.open_table(LOG).unwrap();
        let meta = read_meta(&txn.open_table(META).unwrap(), &log).unwrap().unwrap();
        let (checkpoints, parts) = (txn.open_table(CHECKPOINTS).unwrap(), txn.open_table(PARTS).unwrap());
        FreshParts::scan(&log, &checkpoints, &parts, window(meta.log_start, meta.next_seq))
    }

    fn scanned(db: &Database) -> FreshParts {
        scan_of(db).unwrap()
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
        let same =
            tables.execute(&mut meta, &stage("a", 0, 0, "a0"), &mut frames, u64::MAX).unwrap().into_result().unwrap();
        assert!(!same.written && frames.is_empty(), "the same bytes again: a no-op");
        let other = tables.execute(&mut meta, &stage("a", 0, 0, "zz"), &mut frames, u64::MAX).unwrap().into_result();
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
            assert!(staged.unwrap().into_result().unwrap().written);
            // A refused seal leaves a Staged checkpoint with its part as a row: a legal state (invariant 11), which
            // the next stage's checks and a later seal read as they read a settled part.
            let refused = tables.execute(&mut meta, &Record::Seal { id: id("a"), parts: 2 }, &mut frames, u64::MAX);
            assert!(matches!(refused.unwrap().into_result(), Err(TransitionError::MissingParts { .. })));
            let again = tables
                .execute(&mut meta, &stage("a", 0, 0, "a0"), &mut frames, u64::MAX)
                .unwrap()
                .into_result()
                .unwrap();
            assert!(!again.written, "the part is found as a row: the same call again is a no-op");
            tables.execute(&mut meta, &stage("a", 0, 1, "a1"), &mut frames, u64::MAX).unwrap().into_result().unwrap();
            tables
                .execute(&mut meta, &Record::Seal { id: id("a"), parts: 2 }, &mut frames, u64::MAX)
                .unwrap()
                .into_result()
                .unwrap();
            tables.write_meta(&meta).unwrap();
        }
        txn.commit().unwrap();
        assert_eq!(rows(&db), (2, 0));
    }

    /// Appends `record` to the log by hand, as a writer would not: nothing else is applied.
    fn append_raw(db: &Database, meta: &mut Meta, record: &Record) {
        let txn = db.begin_write().unwrap();
        let bytes = frame::encode(meta.next_seq, meta.epoch, &record.to_payload().unwrap()).unwrap();
        txn.open_table(LOG).unwrap().insert(meta.next_seq, bytes.as_slice()).unwrap();
        meta.next_seq += 1;
        txn.commit().unwrap();
    }

    fn verify(db: &Database) -> crate::Result<u64> {
        crate::store::TableSnapshot::begin(db).unwrap().verify_fresh_parts()
    }

    #[test]
    fn a_part_is_fresh_while_its_checkpoint_is_staged_at_its_attempt_and_parts_lacks_it() {
        let (db, mut meta) = created();
        let carry = run(&db, &mut meta, Carry::default(), &[stage("a", 0, 0, "a0"), stage("b", 0, 0, "b0")]);
        let carry = run(&db, &mut meta, carry, &[stage("c", 0, 0, "c0"), Record::Seal { id: id("a"), parts: 1 }]);
        let carry = run(&db, &mut meta, carry, &[Record::Restart { id: id("b") }, stage("b", 1, 0, "b1")]);
        run(&db, &mut meta, carry, &[Record::Abort { id: id("c") }]);
        // a's record is Sealed, b's attempt-0 record is of an attempt that ended, c is Aborted: b's attempt 1 is
        // the only fresh part left.
        assert_eq!(rows(&db), (1, 1));
        let index = scanned(&db);
        assert_eq!(index.ids(), vec![id("b")]);
        assert_eq!(index.get(&id("b"), 1, 0).map(|e| e.seq), Some(7));
        assert_eq!(verify(&db).unwrap(), 1);
    }

    #[test]
    fn a_part_whose_record_leaves_the_window_is_settled_first() {
        let (db, mut meta) = created();
        let carry = run(&db, &mut meta, Carry::default(), &[stage("old", 0, 0, "o0")]);
        // Other checkpoints staged and sealed (each settled by its seal) push the log's end on, one transaction.
        let pushed: Vec<Record> = (0..FRESH_PART_LOG_RECORDS_MAX / 2)
            .flat_map(|n| [stage(&format!("x{n}"), 0, 0, "x"), Record::Seal { id: id(&format!("x{n}")), parts: 1 }])
            .collect();
        let carry = run(&db, &mut meta, carry, &pushed);
        assert!(window(meta.log_start, meta.next_seq).start > 2, "the old part's record is behind the window");
        assert!(carry.into_fresh().unwrap().is_empty());
        assert_eq!(rows(&db).1, 0);
        let snapshot = crate::store::TableSnapshot::begin(&db).unwrap();
        assert_eq!(snapshot.get(&id("old")).unwrap().unwrap().results, 1, "the part is in table parts, counted");
        assert_eq!(verify(&db).unwrap(), 0);
    }

    #[test]
    fn a_visit_of_one_checkpoint_finds_its_parts_alone_whatever_ids_share_its_prefix() {
        let (db, mut meta) = created();
        let long = "p".repeat(127);
        let names = ["a", "ab", "b", &long, &format!("{long}x")];
        let records: Vec<Record> = names.iter().map(|n| stage(n, 0, 0, "r")).collect();
        run(&db, &mut meta, Carry::default(), &records);
        let txn = db.begin_read().unwrap();
        for name in names {
            let mut found = Vec::new();
            visit_stored(&txn, Some(&id(name)), |_, part| {
                found.push(part.id);
                Ok(())
            })
            .unwrap();
            assert_eq!(found, vec![id(name)], "{name}");
        }
    }

    #[test]
    fn a_truncation_settles_the_fresh_parts_whose_records_it_cuts() {
        let (db, mut meta) = created();
        let carry = run(&db, &mut meta, Carry::default(), &[stage("a", 0, 0, "a0"), stage("b", 0, 0, "b0")]);
        let txn = db.begin_write().unwrap();
        let carry = {
            let mut tables = Tables::open_with(&txn, carry).unwrap();
            tables.truncate_log(&mut meta, 3).unwrap();
            tables.write_meta(&meta).unwrap();
            tables.into_carry()
        };
        txn.commit().unwrap();
        assert_eq!(rows(&db), (1, 1), "a's record (seq 2) was cut: a is settled; b's (seq 3) stays fresh");
        assert_eq!(carry.into_fresh().unwrap(), scanned(&db));
        assert_eq!(verify(&db).unwrap(), 1);
    }

    #[test]
    fn verify_and_a_scan_refuse_a_part_staged_twice_or_left_behind_the_window() {
        let (db, mut meta) = created();
        run(&db, &mut meta, Carry::default(), &[stage("a", 0, 0, "a0")]);
        append_raw(&db, &mut meta, &stage("a", 0, 0, "a0"));
        let err = verify(&db).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt);
        assert!(
            err.to_string().contains("seq 3: the stage record of part (a, 0, 0), which the record at seq 2"),
            "{err}"
        );
        assert_eq!(scan_of(&db).unwrap_err().kind(), crate::ErrorKind::Corrupt);

        let (db, mut meta) = created();
        run(&db, &mut meta, Carry::default(), &[stage("a", 0, 0, "a0")]);
        // Records no writer applied push a's record out of the window: nothing settled it.
        for _ in 0..FRESH_PART_LOG_RECORDS_MAX {
            append_raw(&db, &mut meta, &Record::Finish);
        }
        let err = verify(&db).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt);
        assert!(err.to_string().contains("seq 2: the stage record of part (a, 0, 0), which is Staged"), "{err}");
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
                .into_result()
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
