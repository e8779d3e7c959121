//! Read-only inspection of a store, for operators and tools (the `sinkpoint` CLI): from its file while no writer
//! holds it, or from its mirror at any time. Nothing here writes, bumps the epoch or fences anyone; the hatches
//! that change a store ([`crate::Operator::resolve`], [`crate::Operator::force_abort`], [`crate::Operator::unbind`]) need a
//! writer's open.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), sinkpoint::Error> {
//! use sinkpoint::inspect::Inspector;
//! use sinkpoint::{JobId, StateFilter, Store, TargetIdentity};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("sink.redb");
//! let store = Store::builder(JobId::new("job-1")?, TargetIdentity::new("mem://t")?).path(&path).open().await?;
//! store.close();
//!
//! let inspector = Inspector::open_file(&path)?;
//! let summary = inspector.summary()?;
//! assert_eq!(summary.job.as_str(), "job-1");
//! assert_eq!(summary.count(StateFilter::Staged), 0);
//! # Ok(()) }
//! ```

use std::path::Path;
use std::sync::Arc;

use object_store::ObjectStore;
use redb::ReadableDatabase;

use crate::error::{Error, Result};
use crate::limits::{INSPECT_LIVE_COPY_ATTEMPTS_MAX, INSPECT_REPAIR_BYTES_MAX};
use crate::mirror::MirrorView;
use crate::state::StateFilter;
use crate::store::{CheckpointInfo, CommitInfo, ProcessedKeys, TableSnapshot};
use crate::types::{CheckpointId, Epoch, JobId, TargetIdentity};
pub use crate::wal::operator_records::{OperatorAction, OperatorRecord};

/// A read-only view of one store's tables.
pub struct Inspector {
    db: Arc<dyn ReadableDatabase + Send + Sync>,
    source: String,
    /// Where the bytes are (`store file PATH`, `mirror at URL`), for the messages of read failures.
    place: String,
    /// The tables are in memory (a copy of a file, a restored mirror): no read does I/O.
    in_memory: bool,
    /// Read from a mirror: what its restore replayed (the view keeps no log to read them from later).
    mirror: Option<MirrorRead>,
    /// A running writer held the file: what is read is a copy.
    held: bool,
}

/// What a restore of a mirror into memory read beside the tables.
struct MirrorRead {
    replayed: u64,
    operator_records: Vec<OperatorRecord>,
}

impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector").field("source", &self.source).finish_non_exhaustive()
    }
}

/// A store at a glance: what `sinkpoint status` prints.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct StoreSummary {
    /// The job the store belongs to.
    pub job: JobId,
    /// The target it commits to.
    pub target: TargetIdentity,
    /// The epoch of the writer that last opened it.
    pub epoch: Epoch,
    /// How many checkpoints are in each state, in [`StateFilter::ALL`] order.
    pub counts: Vec<(StateFilter, u64)>,
    /// The next commit key the job will begin.
    pub next_key: u64,
    /// The key in flight (Committing or CommitUnknown), if any.
    pub in_flight: Option<CommitInfo>,
    /// Whether the job's final commit landed.
    pub finished: bool,
    /// See [`crate::Store::retention_watermark`].
    pub retention_watermark: Option<u64>,
    /// The sequence number the next log record gets (compare a file's with its mirror's for the mirror's lag).
    pub next_seq: u64,
    /// Entries in the garbage ledger: dropped attempts' write results whose data files wait for
    /// [`crate::gc::collect_data_files`].
    pub garbage_entries: u64,
    /// Where the store is mirrored (a store file opened with a mirror must be opened with it again); `None` for a
    /// store never opened with one, and for a store read from its mirror.
    pub mirrored_at: Option<String>,
}

impl StoreSummary {
    /// How many checkpoints are in `state`.
    pub fn count(&self, state: StateFilter) -> u64 {
        self.counts.iter().find(|(s, _)| *s == state).map_or(0, |(_, n)| *n)
    }
}

/// What [`Inspector::verify`] read and found whole.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Log frames still in the file (behind the last snapshot they are truncated), each checksum checked. A
    /// mirror's restore keeps no log: 0 there, see [`VerifyReport::mirror_records`].
    pub frames: u64,
    /// Read from a mirror: the log records its restore replayed after the newest snapshot, each checked as a
    /// restore checks it (checksum, sequence, epoch, re-encoding); `None` for a store file.
    pub mirror_records: Option<u64>,
    /// Checkpoints decoded, with their state index.
    pub checkpoints: u64,
    /// Commit keys decoded.
    pub commits: u64,
    /// Write results of pending checkpoints decoded and counted against their records.
    pub pending_results: u64,
}

impl Inspector {
    /// Opens the store file at `path` read-only. A file a running job holds (or a crash left unclean) is read
    /// from a copy in memory, repaired there if need be: the file itself is never written, and what is read is
    /// the state at one moment of the copy (see [`Inspector::source`]).
    pub fn open_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let place = format!("store file {}", path.display());
        if path.is_dir() {
            return Err(Error::wrong_store(format!(
                "{} is a directory, not a store file: give the path of the store file (the job's `.redb` file)",
                path.display()
            )));
        }
        if !path.is_file() {
            return Err(Error::wrong_store(format!("there is no {place}: check the path")));
        }
        match redb::Builder::new().open_read_only(path) {
            Ok(db) => Self::checked(Arc::new(db), place.clone(), place, false),
            // The job that wrote it crashed: redb must repair the file first, which a read-only open never does.
            Err(redb::DatabaseError::RepairAborted) => Self::repaired_in_memory(path, place),
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => Self::live_copy(path, place),
            Err(e) => Err(crate::error::open_failed(&place, e)),
        }
    }

    /// Reads a copy of the file a running job holds. The writer may commit while the copy is read, so the copy
    /// may be torn: redb's repair then checks every page's checksum and falls back to the previous commit, or
    /// reports damage, and the copy is taken again ([`INSPECT_LIVE_COPY_ATTEMPTS_MAX`] times). So the state
    /// read is one the job committed, a moment old; a file damaged on disk fails every attempt and is reported.
    fn live_copy(path: &Path, place: String) -> Result<Self> {
        let mut last = None;
        for _ in 0..INSPECT_LIVE_COPY_ATTEMPTS_MAX {
            match Self::repaired_in_memory(path, place.clone()) {
                Ok(mut inspector) => {
                    inspector.source = format!("{place} (held by a running job: read from a copy, a moment old)");
                    inspector.held = true;
                    return Ok(inspector);
                }
                Err(e) if e.kind() == crate::ErrorKind::Corrupt => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::bug("no attempt at a live copy was made")))
    }

    /// Opens a copy of the unclean file at `path` in memory, repaired there: the file itself is never written.
    /// No writer held the file a moment ago (redb's shared lock was granted); one that opens it during the copy
    /// can make the copy torn, which the repair reports as damage, and a second try succeeds.
    fn repaired_in_memory(path: &Path, place: String) -> Result<Self> {
        use redb::StorageBackend as _;
        let bytes = std::fs::metadata(path)?.len();
        if bytes > INSPECT_REPAIR_BYTES_MAX {
            return Err(Error::invalid_input(format!(
                "{place} needs repair (a crash left it unclean, or a running job holds it), and at {bytes} bytes it is over the \
                 {INSPECT_REPAIR_BYTES_MAX} bytes repaired in memory: inspect the job's mirror, or rerun the job \
                 (its open repairs the file), then inspect the file"
            )));
        }
        let backend = redb::backends::InMemoryBackend::new();
        let content = std::fs::read(path)?;
        backend.set_len(content.len() as u64)?;
        backend.write(0, &content)?;
        // The copy is in memory: an I/O error of its repair is the file's damage (see `error::read_failed`).
        let db = redb::Builder::new()
            .create_with_backend(backend)
            .map_err(|e| crate::error::read_failed(&place, true, crate::error::open_failed(&place, e)))?;
        let source = format!("{place} (left unclean by a crash; repaired in memory, file untouched)");
        Self::checked(Arc::new(db), source, place, true)
    }

    /// Restores the store's state from its mirror at `prefix` of `store` into memory (every check a restore
    /// makes), without claiming an epoch: the running writer, if any, is not disturbed.
    pub async fn open_mirror(store: Arc<dyn ObjectStore>, prefix: object_store::path::Path) -> Result<Self> {
        let place = format!("mirror at {}", crate::mirror::describe(&*store, &prefix));
        let view = MirrorView::open(store, prefix).await?;
        let mut inspector = Self::checked(view.shared_database(), place.clone(), place, true)?;
        let (replayed, operator_records) = view.replayed();
        inspector.mirror = Some(MirrorRead { replayed, operator_records });
        Ok(inspector)
    }

    fn checked(
        db: Arc<dyn ReadableDatabase + Send + Sync>,
        source: String,
        place: String,
        in_memory: bool,
    ) -> Result<Self> {
        let inspector = Self { db, source, place, in_memory, mirror: None, held: false };
        // A store of a format this version does not know is refused, never misread.
        let meta = inspector.read(|snapshot| snapshot.meta())?;
        crate::wal::tables::check_format(&meta)?;
        Ok(inspector)
    }

    fn snapshot(&self) -> Result<TableSnapshot> {
        TableSnapshot::begin(&*self.db).map_err(|e| self.failed(e))
    }

    /// Runs `f` on a snapshot; a failure to read the bytes names the store (see [`Inspector::failed`]).
    pub(crate) fn read<T>(&self, f: impl FnOnce(&TableSnapshot) -> Result<T>) -> Result<T> {
        f(&self.snapshot()?).map_err(|e| self.failed(e))
    }

    /// A read failure as the caller can act on it: redb's damage names the store and says to restore it, and
    /// in memory, where no read does I/O, an I/O error is the bytes' damage too (see `error::read_failed`).
    fn failed(&self, error: Error) -> Error {
        crate::error::read_failed(&self.place, self.in_memory, error)
    }

    /// Whether a running writer held the store file when it was opened (it was read from a copy): a tool that
    /// would change the store refuses then, before it tries to open the file for writing.
    pub fn held_by_a_writer(&self) -> bool {
        self.held
    }

    /// Where the store was read from, for messages.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The store at a glance, from one snapshot.
    pub fn summary(&self) -> Result<StoreSummary> {
        self.read(Self::summary_of)
    }

    fn summary_of(snapshot: &TableSnapshot) -> Result<StoreSummary> {
        let meta = snapshot.meta()?;
        let counts = snapshot.counts()?;
        let in_flight = snapshot.in_flight(&meta)?;
        Ok(StoreSummary {
            retention_watermark: in_flight.as_ref().and_then(|c| c.prepared_version),
            job: meta.job,
            target: meta.target,
            epoch: meta.epoch,
            counts,
            next_key: meta.seq.next_key,
            in_flight,
            finished: meta.finished,
            next_seq: meta.next_seq,
            garbage_entries: snapshot.garbage_count()?,
            mirrored_at: snapshot.mirrored_at()?,
        })
    }

    /// The garbage ledger after `after` (see [`crate::Store::garbage`]), at most `limit` entries
    /// ([`crate::limits::GARBAGE_PAGE_ENTRIES_MAX`]).
    pub fn garbage(
        &self,
        after: Option<crate::gc::ledger::GarbageRef>,
        limit: usize,
    ) -> Result<Vec<crate::gc::ledger::GarbageEntry>> {
        self.read(|s| s.garbage(after, limit.min(crate::limits::GARBAGE_PAGE_ENTRIES_MAX)))
    }

    /// One checkpoint, if it exists.
    pub fn get(&self, id: &CheckpointId) -> Result<Option<CheckpointInfo>> {
        self.read(|s| s.get(id))
    }

    /// Every checkpoint in a state, by id.
    pub fn list(&self, filter: StateFilter) -> Result<Vec<CheckpointInfo>> {
        self.read(|s| s.list(filter))
    }

    /// The record of commit key `key`, if it was begun.
    pub fn commit(&self, key: u64) -> Result<Option<CommitInfo>> {
        self.read(|s| Ok(s.commit_value(key)?.map(|value| CommitInfo::from_value(key, value))))
    }

    /// Whether [`crate::Operator::resolve`] would take `resolution` for key `key` in this state of the store: the
    /// same rule, checked without a writer, so a tool can refuse a verdict before it opens the store for writing.
    /// `Err` (`IllegalTransition`) says why and what settles the key instead.
    pub fn check_verdict(&self, key: u64, resolution: crate::Resolution) -> Result<()> {
        let current = self.read(|s| Ok(s.commit_value(key)?.map(|value| value.state)))?;
        crate::state::check_verdict(key, current, resolution)?;
        Ok(())
    }

    /// Every commit key begun, in key order.
    pub fn commits(&self) -> Result<Vec<CommitInfo>> {
        self.read(Self::commits_of)
    }

    fn commits_of(snapshot: &TableSnapshot) -> Result<Vec<CommitInfo>> {
        let next_key = snapshot.meta()?.seq.next_key;
        let mut out = Vec::new();
        for key in 0..next_key {
            let value = snapshot
                .commit_value(key)?
                .ok_or_else(|| Error::corrupt(format!("commit key {key} is below the next key but has no record")))?;
            out.push(CommitInfo::from_value(key, value));
        }
        Ok(out)
    }

    /// The operator records still readable here, oldest first (at most the newest 256,
    /// `INSPECT_OPERATOR_RECORDS_MAX`, from a mirror): from a store file, those in its log; from a
    /// mirror, those in the log segments its restore replayed after the newest snapshot. See [`OperatorRecord`]
    /// for how long a reason lasts: read both the file and the mirror to find every reason either still holds.
    pub fn operator_records(&self) -> Result<Vec<OperatorRecord>> {
        if let Some(mirror) = &self.mirror {
            return Ok(mirror.operator_records.clone());
        }
        self.operator_records_in_log().map_err(|e| self.failed(e))
    }

    fn operator_records_in_log(&self) -> Result<Vec<OperatorRecord>> {
        use redb::ReadableTable as _;
        let txn = self.db.begin_read()?;
        let log = txn.open_table(crate::wal::tables::LOG)?;
        let mut out = Vec::new();
        for entry in log.iter()? {
            let (seq, bytes) = entry?;
            let place = format!("{}, table log, seq {}", self.place, seq.value());
            if let Some(record) = OperatorRecord::from_frame(bytes.value(), &place)? {
                OperatorRecord::keep(&mut out, record);
            }
        }
        Ok(out)
    }

    /// Every processed source key, in key order, a page at a time.
    pub fn processed_keys(&self) -> ProcessedKeys {
        ProcessedKeys::new(self.db.clone(), None)
    }

    /// Reads and checks everything: every log frame (checksum, sequence, record), every checkpoint and its
    /// state index, every commit key, every pending checkpoint's write results. The first damage found is a
    /// [`crate::ErrorKind::Corrupt`] error naming its place.
    pub fn verify(&self) -> Result<VerifyReport> {
        let mirror_records = self.mirror.as_ref().map(|m| m.replayed);
        self.read(|snapshot| Ok(VerifyReport { mirror_records, ..Self::verify_of(snapshot)? }))
    }

    fn verify_of(snapshot: &TableSnapshot) -> Result<VerifyReport> {
        let frames = snapshot.verify_log()?;
        snapshot.verify_fresh_parts()?;
        let mut checkpoints = 0;
        for state in StateFilter::ALL {
            checkpoints += snapshot.list(state)?.len() as u64;
        }
        let next_key = snapshot.meta()?.seq.next_key;
        for key in 0..next_key {
            if snapshot.commit_value(key)?.is_none() {
                return Err(Error::corrupt(format!("commit key {key} is below the next key but has no record")));
            }
        }
        let pending = snapshot.pending()?;
        let pending_results = pending.checkpoints.iter().map(|c| c.results.len() as u64).sum();
        Ok(VerifyReport { frames, mirror_records: None, checkpoints, commits: next_key, pending_results })
    }
}
