//! What reads return: [`CheckpointInfo`], [`Pending`] (one consistent snapshot of what waits for the target),
//! [`CommitInfo`], [`StageOutcome`], and the paged [`ProcessedKeys`] iterator.
use std::ops::Bound;
use std::sync::Arc;

use super::open::stored_id;
use crate::error::{Error, Result};
use crate::gc::ledger::{GarbageEntry, GarbageRef};
use crate::limits::{COMMIT_CHECKPOINTS_MAX, COMMIT_RESULTS_MAX, KEY_PAGE_KEYS_MAX};
use crate::state::StateFilter;
use crate::state::{CheckpointRecord, CheckpointState};
use crate::types::{Attempt, CheckpointId, Epoch, WriteResult};
use crate::wal::fresh;
use crate::wal::record::decode_value;
use crate::wal::tables::{
    CHECKPOINTS, COMMITS, CommitValue, GARBAGE, GarbageValue, KEYS, LOG, META, Meta, PARTS, PartValue, STATES,
    read_checkpoint, read_commit, read_meta, read_parts, visit_parts,
};

/// Write results of fresh parts, by (checkpoint, attempt).
type FreshResults = std::collections::BTreeMap<(CheckpointId, u32), u64>;
use redb::{ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata};

/// One read transaction over a store's tables: every read [`crate::Store`] and [`crate::inspect::Inspector`]
/// make goes through it, so a live store and a read-only inspection answer alike.
pub(crate) struct Snapshot {
    txn: ReadTransaction,
}

impl Snapshot {
    /// A consistent snapshot of `db` as of now.
    pub(crate) fn begin(db: &dyn ReadableDatabase) -> Result<Self> {
        Ok(Self { txn: db.begin_read()? })
    }

    /// The store's meta record.
    pub(crate) fn meta(&self) -> Result<Meta> {
        read_meta(&self.txn.open_table(META)?, &self.txn.open_table(LOG)?)?
            .ok_or_else(|| Error::corrupt("table meta is empty"))
    }

    /// One checkpoint, if it exists.
    pub(crate) fn get(&self, id: &CheckpointId) -> Result<Option<CheckpointInfo>> {
        let Some(record) = read_checkpoint(&self.txn.open_table(CHECKPOINTS)?, id)? else { return Ok(None) };
        // Only a Staged checkpoint needs its fresh parts counted.
        let fresh =
            if record.state == CheckpointState::Staged { self.fresh_results(Some(id))? } else { FreshResults::new() };
        Ok(Some(staged_info(&self.txn.open_table(PARTS)?, id.clone(), record, &fresh)?))
    }

    /// Every checkpoint in a state, by id.
    pub(crate) fn list(&self, filter: StateFilter) -> Result<Vec<CheckpointInfo>> {
        let states = self.txn.open_table(STATES)?;
        let checkpoints = self.txn.open_table(CHECKPOINTS)?;
        let parts = self.txn.open_table(PARTS)?;
        let fresh = if filter == StateFilter::Staged { self.fresh_results(None)? } else { FreshResults::new() };
        let code = filter.code();
        let mut out = Vec::new();
        for entry in states.range((code, "")..(code + 1, ""))? {
            let (k, _) = entry?;
            let id = stored_id(k.value().1)?;
            let record = read_checkpoint(&checkpoints, &id)?
                .ok_or_else(|| Error::corrupt(format!("table states names {id}, which table checkpoints lacks")))?;
            out.push(staged_info(&parts, id, record, &fresh)?);
        }
        Ok(out)
    }

    /// The write results of the fresh parts of checkpoint `only` (of every checkpoint with `None`), by
    /// checkpoint and attempt: one pass over the log's fresh window (at most
    /// [`crate::limits::FRESH_PART_LOG_RECORDS_MAX`] records, decoding only the stage records).
    fn fresh_results(&self, only: Option<&CheckpointId>) -> Result<FreshResults> {
        let mut out = FreshResults::new();
        fresh::visit_stored(&self.txn, only, |_, fresh| {
            *out.entry((fresh.id, fresh.attempt)).or_default() += fresh.value.results.len() as u64;
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `each` with the id of every checkpoint in a state, from the state index alone (no checkpoint
    /// record read or decoded).
    pub(crate) fn each_id(&self, filter: StateFilter, mut each: impl FnMut(&CheckpointId)) -> Result<()> {
        let code = filter.code();
        for entry in self.txn.open_table(STATES)?.range((code, "")..(code + 1, ""))? {
            let (k, _) = entry?;
            each(&stored_id(k.value().1)?);
        }
        Ok(())
    }

    /// How many checkpoints are in a state (one index range, nothing decoded).
    pub(crate) fn count(&self, filter: StateFilter) -> Result<u64> {
        let code = filter.code();
        let mut count = 0;
        for entry in self.txn.open_table(STATES)?.range((code, "")..(code + 1, ""))? {
            entry?;
            count += 1;
        }
        Ok(count)
    }

    /// How many checkpoints are in each state, in [`StateFilter::ALL`]'s order. Committed, where a long job's
    /// history piles up, is the index's length (redb keeps it in the tree's header) less the other states, which
    /// are counted: the cost follows the checkpoints not committed, not the history.
    pub(crate) fn counts(&self) -> Result<Vec<(StateFilter, u64)>> {
        let total = self.txn.open_table(STATES)?.len()?;
        let mut counts = Vec::with_capacity(StateFilter::ALL.len());
        for filter in StateFilter::ALL.into_iter().filter(|f| *f != StateFilter::Committed) {
            counts.push((filter, self.count(filter)?));
        }
        let others: u64 = counts.iter().map(|(_, c)| c).sum();
        let committed = total.checked_sub(others).ok_or_else(|| {
            Error::corrupt(format!("the state index holds {total} entries but {others} outside Committed"))
        })?;
        counts.push((StateFilter::Committed, committed));
        counts.sort_by_key(|(f, _)| f.code());
        Ok(counts)
    }

    /// Whether a source key belongs to a Sealed (or later) checkpoint.
    pub(crate) fn is_processed(&self, key: &[u8]) -> Result<bool> {
        Ok(self.txn.open_table(KEYS)?.get(key)?.is_some())
    }

    /// The stored record of commit key `key`, if it was begun.
    pub(crate) fn commit_value(&self, key: u64) -> Result<Option<CommitValue>> {
        read_commit(&self.txn.open_table(COMMITS)?, key)
    }

    /// The key in flight's record, if a key is in flight.
    pub(crate) fn in_flight(&self, meta: &Meta) -> Result<Option<CommitInfo>> {
        let Some(key) = meta.seq.in_flight else { return Ok(None) };
        let value = self
            .commit_value(key)?
            .ok_or_else(|| Error::corrupt(format!("commit key {key} is in flight but has no record")))?;
        Ok(Some(CommitInfo::from_value(key, value)))
    }

    /// The garbage ledger's entries after `after` (from the first with `None`), at most `limit` of them, in
    /// ledger order. A store file written before the ledger existed has no table: an empty ledger.
    pub(crate) fn garbage(&self, after: Option<GarbageRef>, limit: usize) -> Result<Vec<GarbageEntry>> {
        let table = match self.txn.open_table(GARBAGE) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        let from = after.map_or(Bound::Unbounded, |a| Bound::Excluded((a.seq, a.index)));
        for entry in table.range::<(u64, u32)>((from, Bound::Unbounded))?.take(limit) {
            let (k, v) = entry?;
            let (seq, index) = k.value();
            let value: GarbageValue = decode_value(v.value(), &|| format!("table garbage, ({seq}, {index})"))?;
            out.push(GarbageEntry {
                at: GarbageRef { seq, index },
                id: value.id,
                attempt: crate::types::Attempt::new(value.attempt),
                result: value.result,
            });
        }
        Ok(out)
    }

    /// Where the store is mirrored, if it was ever opened with a mirror.
    pub(crate) fn mirrored_at(&self) -> Result<Option<String>> {
        crate::mirror::mirrored_at(&self.txn)
    }

    /// How many entries the garbage ledger holds (none in a file made before it existed).
    pub(crate) fn garbage_count(&self) -> Result<u64> {
        match self.txn.open_table(GARBAGE) {
            Ok(t) => Ok(t.len()?),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Calls `each` with every write result a live checkpoint holds: every stored part (Staged, Sealed,
    /// Committing, CommitUnknown; Committed checkpoints' parts are released and Aborted ones' dropped).
    pub(crate) fn each_live_result(&self, mut each: impl FnMut(&WriteResult) -> Result<()>) -> Result<()> {
        for entry in self.txn.open_table(PARTS)?.iter()? {
            let (k, v) = entry?;
            let (id, attempt, part) = k.value();
            let value: PartValue = decode_value(v.value(), &|| format!("table parts, ({id}, {attempt}, {part})"))?;
            for result in &value.results {
                each(result)?;
            }
        }
        fresh::visit_stored(&self.txn, None, |_, fresh| fresh.value.results.iter().try_for_each(&mut each))
    }

    /// Checks the fresh parts (see [`crate::wal::fresh`]) against the whole kept log: no stage record behind the
    /// fresh window is of a part that is still fresh by the rule (the writer settles a part before its record
    /// leaves the window, or readers would lose it), and no part has two such records. Returns how many fresh
    /// parts there are.
    pub(crate) fn verify_fresh_parts(&self) -> Result<u64> {
        let log = self.txn.open_table(LOG)?;
        let Some(meta) = read_meta(&self.txn.open_table(META)?, &log)? else { return Ok(0) };
        let (checkpoints, parts) = (self.txn.open_table(CHECKPOINTS)?, self.txn.open_table(PARTS)?);
        let window = fresh::window(meta.log_start, meta.next_seq);
        let mut seen = std::collections::BTreeMap::new();
        fresh::visit(&log, &checkpoints, &parts, meta.log_start..meta.next_seq, None, |seq, part| {
            let place = || {
                format!("table log, seq {seq}: the stage record of part ({}, {}, {})", part.id, part.attempt, part.part)
            };
            if seq < window.start {
                return Err(Error::corrupt(format!(
                    "{}, which is Staged and not in table parts, but behind the fresh parts' window (from seq {}): \
                     it should have been settled",
                    place(),
                    window.start
                )));
            }
            if let Some(first) = seen.insert((part.id.clone(), part.attempt, part.part), seq) {
                return Err(Error::corrupt(format!("{}, which the record at seq {first} stages too", place())));
            }
            Ok(())
        })?;
        Ok(seen.len() as u64)
    }

    /// See [`crate::Store::retention_watermark`].
    pub(crate) fn retention_watermark(&self) -> Result<Option<u64>> {
        Ok(self.in_flight(&self.meta()?)?.and_then(|c| c.prepared_version))
    }

    /// See [`crate::Store::verify_log`].
    pub(crate) fn verify_log(&self) -> Result<u64> {
        crate::wal::verify::verify_log(&self.txn)
    }

    /// Everything pending (see [`crate::Store::pending`]).
    pub(crate) fn pending(&self) -> Result<Pending> {
        let states = self.txn.open_table(STATES)?;
        let checkpoints = self.txn.open_table(CHECKPOINTS)?;
        let parts = self.txn.open_table(PARTS)?;
        let meta = self.meta()?;
        let mut out = Vec::new();
        let (lo, hi) = (CheckpointState::Sealed.code(), CheckpointState::CommitUnknown { key: 0 }.code());
        for entry in states.range((lo, "")..(hi + 1, ""))? {
            let (k, _) = entry?;
            let id = stored_id(k.value().1)?;
            let record = read_checkpoint(&checkpoints, &id)?
                .ok_or_else(|| Error::corrupt(format!("table states names {id}, which table checkpoints lacks")))?;
            let results: Vec<WriteResult> =
                read_parts(&parts, &id, record.attempt)?.into_iter().flat_map(|(_, p)| p.results).collect();
            if results.len() != record.results as usize {
                return Err(Error::corrupt(format!(
                    "checkpoint {id} records {} write results but {} are stored",
                    record.results,
                    results.len()
                )));
            }
            out.push(PendingCheckpoint { info: CheckpointInfo::new(id, record), results });
        }
        out.sort_by(|a, b| a.info.id.cmp(&b.info.id));
        let in_flight = self.in_flight(&meta)?;
        Ok(Pending { checkpoints: out, in_flight, next_key: meta.seq.next_key, finished: meta.finished })
    }

    /// The next commit's worth of Sealed checkpoints, in id order: what the committer commits next. Reads the
    /// state index and each checkpoint's record up to the end of that commit (no write result: a key's are read
    /// after its intent, by `commit_results`), so a backlog of 100,000 sealed checkpoints costs one commit's
    /// ids at a time, not the backlog's.
    pub(crate) fn sealed_page(&self) -> Result<SealedPage> {
        let states = self.txn.open_table(STATES)?;
        let checkpoints = self.txn.open_table(CHECKPOINTS)?;
        let code = StateFilter::Sealed.code();
        let mut page = SealedPage { next_key: self.meta()?.seq.next_key, ..SealedPage::default() };
        let mut batch_results = 0usize;
        for entry in states.range((code, "")..(code + 1, ""))? {
            let (k, _) = entry?;
            let id = stored_id(k.value().1)?;
            let record = read_checkpoint(&checkpoints, &id)?
                .ok_or_else(|| Error::corrupt(format!("table states names {id}, which table checkpoints lacks")))?;
            let count = record.results as usize;
            if count == 0 {
                if page.empty.len() < COMMIT_CHECKPOINTS_MAX {
                    page.empty.push(id);
                }
                continue;
            }
            // Within both limits; a checkpoint over the results limit on its own goes alone (a commit always
            // covers whole checkpoints).
            let fits = page.batch.is_empty()
                || (page.batch.len() < COMMIT_CHECKPOINTS_MAX && batch_results + count <= COMMIT_RESULTS_MAX);
            if !fits {
                page.more = true;
                break;
            }
            batch_results += count;
            page.batch.push(id);
        }
        Ok(page)
    }
}

/// A checkpoint's record as callers see it: a Staged record carries no count of its write results (a stage does
/// not rewrite it), so theirs are counted from its parts, stored (`parts`) and fresh (`fresh`, from
/// [`Snapshot::fresh_results`]).
fn staged_info(
    parts: &impl ReadableTable<(&'static str, u32, u32), &'static [u8]>,
    id: CheckpointId,
    mut record: CheckpointRecord,
    fresh: &FreshResults,
) -> Result<CheckpointInfo> {
    if record.state == CheckpointState::Staged {
        let mut count = fresh.get(&(id.clone(), record.attempt)).copied().unwrap_or(0);
        visit_parts(parts, &id, record.attempt, |value| {
            count += value.results.len() as u64;
            Ok(None::<()>)
        })?;
        record.results =
            u32::try_from(count).map_err(|_| Error::corrupt(format!("checkpoint {id} holds {count} write results")))?;
    }
    Ok(CheckpointInfo::new(id, record))
}

/// One commit's worth of Sealed checkpoints ([`Snapshot::sealed_page`]).
#[derive(Default, Debug)]
pub(crate) struct SealedPage {
    /// Checkpoints without results met on the way (at most [`COMMIT_CHECKPOINTS_MAX`]): committed empty.
    pub empty: Vec<CheckpointId>,
    /// The next commit's checkpoints, within [`COMMIT_CHECKPOINTS_MAX`] and [`COMMIT_RESULTS_MAX`].
    pub batch: Vec<CheckpointId>,
    /// Whether a Sealed checkpoint with results is left after `batch`.
    pub more: bool,
    /// The key `batch` goes under.
    pub next_key: u64,
}

/// What the store holds of one checkpoint.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CheckpointInfo {
    /// The id.
    pub id: CheckpointId,
    /// Its state.
    pub state: CheckpointState,
    /// Its current attempt.
    pub attempt: Attempt,
    /// The epoch that began its current attempt.
    pub epoch: Epoch,
    /// Its sealed part count (0 before sealing).
    pub parts: u32,
    /// Its write results in the current attempt (they are released once committed; the count stays).
    pub results: u32,
}

impl CheckpointInfo {
    pub(super) fn new(id: CheckpointId, r: CheckpointRecord) -> Self {
        Self {
            id,
            state: r.state,
            attempt: Attempt::new(r.attempt),
            epoch: r.epoch,
            parts: r.parts,
            results: r.results,
        }
    }
}

/// A checkpoint whose write results wait for the target, with those results.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PendingCheckpoint {
    /// The checkpoint.
    pub info: CheckpointInfo,
    /// Its write results, in part order.
    pub results: Vec<WriteResult>,
}

/// One consistent snapshot of everything that waits for the target.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Pending {
    /// Sealed, Committing and CommitUnknown checkpoints, by id.
    pub checkpoints: Vec<PendingCheckpoint>,
    /// The commit key in flight (Committing or CommitUnknown) and its record, if any.
    pub in_flight: Option<CommitInfo>,
    /// The next commit key to begin.
    pub next_key: u64,
    /// Whether the job's final commit has landed.
    pub finished: bool,
}

/// One commit key's record, as [`crate::Store::commit_info`] and [`Pending::in_flight`] show it: a read type, not the
/// stored value (whose encoding is the log's business).
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct CommitInfo {
    /// The key's number n in the job's sequence.
    pub key: u64,
    /// The checkpoints it covers, sorted: bound to the key forever.
    pub ids: Vec<CheckpointId>,
    /// The target version the key was prepared against (read before its intent was recorded), from which its
    /// probe looks; `None` when the target gave none.
    pub prepared_version: Option<u64>,
    /// Whether it is the job's last commit.
    pub final_commit: bool,
    /// The epoch that began it.
    pub epoch: Epoch,
    /// The state its checkpoints are in: Committing, CommitUnknown or Committed.
    pub state: CheckpointState,
    /// Whether an operator's [`crate::Resolution::NotCommitted`] verdict waits for its re-commit: the committer then
    /// commits the key again once, without probing first.
    pub awaits_recommit: bool,
}

impl CommitInfo {
    /// Key `key`'s stored record as callers see it.
    pub(crate) fn from_value(key: u64, value: CommitValue) -> Self {
        let awaits_recommit = value.awaits_recommit();
        let CommitValue { ids, target_version, final_commit, epoch, state } = value;
        // The stored state of an awaited re-commit is a marker; its checkpoints are Committing.
        let state = if awaits_recommit { CheckpointState::Committing { key } } else { state };
        Self { key, ids, prepared_version: target_version, final_commit, epoch, state, awaits_recommit }
    }
}

/// Whether a stage call wrote its part or found it already there.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StageOutcome {
    /// The part was written.
    Staged,
    /// The same part with the same bytes was already there (a retry after a lost ack): nothing written.
    AlreadyStaged,
}

/// Every processed source key, a page at a time (see [`crate::Store::processed_keys`]). Each page is read in its own
/// read transaction, so a key processed during the iteration may or may not be seen; none is seen twice.
pub struct ProcessedKeys {
    pub(crate) db: Arc<dyn ReadableDatabase + Send + Sync>,
    pub(crate) after: Option<Vec<u8>>,
    pub(crate) page: std::vec::IntoIter<Vec<u8>>,
    pub(crate) done: bool,
}

impl ProcessedKeys {
    /// Every key of `db` after `after` (all of them for `None`), in key order.
    pub(crate) fn new(db: Arc<dyn ReadableDatabase + Send + Sync>, after: Option<Vec<u8>>) -> Self {
        Self { db, after, page: Vec::new().into_iter(), done: false }
    }
}

impl ProcessedKeys {
    fn fill(&mut self) -> Result<()> {
        let txn = self.db.begin_read()?;
        let keys = txn.open_table(KEYS)?;
        let mut page = Vec::with_capacity(KEY_PAGE_KEYS_MAX);
        let range = match &self.after {
            None => keys.range::<&[u8]>(..)?,
            Some(after) => {
                keys.range::<&[u8]>((std::ops::Bound::Excluded(after.as_slice()), std::ops::Bound::Unbounded))?
            }
        };
        for entry in range.take(KEY_PAGE_KEYS_MAX) {
            page.push(entry?.0.value().to_vec());
        }
        self.done = page.len() < KEY_PAGE_KEYS_MAX;
        self.after = page.last().cloned();
        self.page = page.into_iter();
        Ok(())
    }
}

impl Iterator for ProcessedKeys {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(key) = self.page.next() {
            return Some(Ok(key));
        }
        if self.done {
            return None;
        }
        if let Err(e) = self.fill() {
            self.done = true;
            return Some(Err(e));
        }
        self.page.next().map(Ok)
    }
}

impl std::fmt::Debug for ProcessedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessedKeys").finish_non_exhaustive()
    }
}
