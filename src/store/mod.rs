//! The public [`Store`] handle: opens the local redb file, bumps the epoch, and turns every call into one WAL
//! record for the group-commit writer. Reads go straight to redb read transactions.

mod builder;
pub(crate) mod checks;
mod open;
mod operator;
mod protocol;
mod read;
mod settings;
mod window;

pub use builder::StoreBuilder;
pub(crate) use open::random_tag;
pub use operator::Operator;
pub(crate) use protocol::Protocol;
pub(crate) use read::Snapshot as TableSnapshot;
pub use read::{CheckpointInfo, CommitInfo, Pending, PendingCheckpoint, ProcessedKeys, StageOutcome};
pub use settings::{StagingDurability, StoreSettings};
pub use window::{Landed, SealWindow, SealWindowSettings};

use std::sync::Arc;

use crate::error::{Error, InvalidInput, Result, TransitionError};
use crate::gc::ledger::{GarbageEntry, GarbageRef, checked_refs};
use crate::limits::SEAL_PARTS_MAX;
use crate::mirror::{MirrorLag, Progress};
use crate::state::{CheckpointState, StateFilter};
use crate::types::{CheckpointId, Epoch, JobId, StagePart, TargetIdentity, WriteResult, check_source_key};
use crate::wal::apply::{Applied, Decided};
use crate::wal::record::Record;
use crate::wal::tables::{CHECKPOINTS, COMMITS, CommitValue, PARTS, read_checkpoint, read_commit, read_parts};
use crate::wal::writer::{CallDurability, Shared, Submitted, Writer, WriterStats};
use checks::check_stage;
use read::Snapshot;
use redb::{Database, ReadableDatabase};

/// The handle on one checkpoint store.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sinkpoint::Error> {
/// use sinkpoint::{Attempt, CheckpointId, CheckpointState, Format, JobId, Part, StagePart, Store, TargetIdentity, WriteResult};
///
/// let dir = tempfile::tempdir().unwrap();
/// let store = Store::builder(JobId::new("job-1")?, TargetIdentity::new("file:///tables/t")?)
///     .path(dir.path().join("sink.redb"))
///     .open()
///     .await?;
/// let id = CheckpointId::new("input-0017")?;
/// let result = WriteResult::new(Format::Parquet, b"part-0017.parquet".to_vec())?;
/// store.stage(&id, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"s3://in/0017.csv".to_vec()]).results(vec![result])).await?;
/// store.seal(&id, 1).await?;
/// assert!(store.is_processed(b"s3://in/0017.csv")?);
/// assert_eq!(store.get(&id)?.unwrap().state, CheckpointState::Sealed);
/// store.close();
/// # Ok(()) }
/// ```
pub struct Store {
    db: Arc<Database>,
    writer: Writer,
    shared: Arc<Shared>,
    epoch: Epoch,
    job: JobId,
    target: TargetIdentity,
    created: bool,
    orphans: Vec<CheckpointId>,
    settings: StoreSettings,
    progress: Option<Arc<Progress>>,
    /// What this open's committer knows of the target before the first key it begins: kept in memory only, so
    /// the target is probed once an open, not before every key.
    target_check: std::sync::Mutex<TargetCheck>,
    /// Whether a collection of the garbage ledger's data files runs on this handle.
    collecting: Arc<std::sync::atomic::AtomicBool>,
}

/// Held while a collection of the garbage ledger's data files runs (see [`Store::begin_collection`]).
pub(crate) struct Collecting(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Collecting {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// What an open's committer knows of the target before the first key it begins (docs/protocols/commit.md, "Why
/// each race has one winner").
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) enum TargetCheck {
    /// Not probed: a new open, or a key was un-bound or found held by another writer. The next begin probes.
    #[default]
    Unchecked,
    /// Probed, and the target did not hold the key. `since` is the target's version read before that probe:
    /// the first key begun afterwards is prepared against it, so that its key check covers every version since
    /// the probe, and a key another writer landed meanwhile is refused instead of taken a second time.
    Probed {
        /// The target's version before the probe.
        since: Option<u64>,
    },
    /// The first key after the probe is begun: every later key follows this store's own commits.
    Begun,
}

impl Store {
    /// Starts building a store for `job` writing into `target`.
    pub fn builder(job: JobId, target: TargetIdentity) -> StoreBuilder {
        StoreBuilder {
            settings: StoreSettings {
                job,
                target,
                staging_durability: StagingDurability::Immediate,
                create_if_missing: true,
                cache_bytes: crate::limits::STORE_CACHE_BYTES_DEFAULT,
            },
            location: None,
            writer_tag: None,
            mirror: None,
            clock: None,
        }
    }

    /// This writer's epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The job.
    pub fn job(&self) -> &JobId {
        &self.job
    }

    /// The target's identity.
    pub fn target(&self) -> &TargetIdentity {
        &self.target
    }

    /// Whether this open created the store.
    pub fn created(&self) -> bool {
        self.created
    }

    /// The checkpoints Staged by an older epoch, found at open: `stage` refuses them (`Orphaned`) until the
    /// caller restarts or aborts them; a complete one may be sealed.
    pub fn orphans(&self) -> &[CheckpointId] {
        &self.orphans
    }

    /// The settings it was opened with.
    pub fn settings(&self) -> &StoreSettings {
        &self.settings
    }

    async fn call(&self, record: Record, durability: CallDurability) -> Result<Applied> {
        self.shared.check()?;
        match self.writer.call(vec![record], durability).await? {
            Decided::Applied(mut applied) => applied.pop().ok_or_else(|| Error::bug("one record, no answer")),
            Decided::Refused(t) => Err(t.into()),
        }
    }

    /// Stages one part of attempt `attempt` of checkpoint `id`: its source keys, its write results, or both.
    /// Re-staging the same part with the same bytes is a no-op ([`StageOutcome::AlreadyStaged`]); other bytes
    /// are a [`crate::TransitionError::PartConflict`]. `part` must be below [`SEAL_PARTS_MAX`], the most parts an
    /// attempt can be sealed with.
    pub async fn stage(&self, id: &CheckpointId, part: StagePart) -> Result<StageOutcome> {
        id.check()?;
        let StagePart { attempt, part, keys, results } = part;
        check_stage(part, &keys, &results)?;
        let durability = match self.settings.staging_durability {
            StagingDurability::Immediate => CallDurability::Immediate,
            StagingDurability::None => CallDurability::None,
        };
        let record = Record::Stage { id: id.clone(), attempt: attempt.get(), part: part.get(), keys, results };
        let applied = self.call(record, durability).await?;
        Ok(if applied.written { StageOutcome::Staged } else { StageOutcome::AlreadyStaged })
    }

    /// Seals checkpoint `id` with parts `0..parts` of its current attempt: its keys become processed and its
    /// results pending. Sealing again with the same count is a no-op.
    ///
    /// The caller may act on the seal irrevocably (delete or acknowledge its source) once this returned `Ok` in
    /// synchronous mirror mode or without a mirror; in asynchronous mode only after a later [`Store::flush`]
    /// returned `Ok`, for the seal is acked before it is in the mirror.
    pub async fn seal(&self, id: &CheckpointId, parts: u32) -> Result<()> {
        id.check()?;
        if parts == 0 || parts > SEAL_PARTS_MAX {
            let (value, max) = (u64::from(parts), u64::from(SEAL_PARTS_MAX));
            return Err(InvalidInput::Range { what: "sealed part count", value, min: 1, max }.into());
        }
        self.call(Record::Seal { id: id.clone(), parts }, CallDurability::Immediate).await.map(drop)
    }

    /// Stages the last (or only) part of checkpoint `id`'s current attempt and seals it with `parts` parts, in
    /// one durable commit instead of two: the cheap path of a task that writes one data file per input. If the
    /// seal is refused (a missing part, a key conflict), the part stays staged, as after a `stage` alone, and
    /// the refusal is the answer. The acknowledgement rules of [`Store::seal`] apply.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// use sinkpoint::{Attempt, CheckpointId, Format, JobId, Part, StagePart, Store, TargetIdentity, WriteResult};
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("t")?).path(dir.path().join("s.redb")).open().await?;
    /// let id = CheckpointId::new("input-1")?;
    /// let result = WriteResult::new(Format::Parquet, b"part-1.parquet".to_vec())?;
    /// let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"in/1".to_vec()]).results(vec![result]);
    /// store.stage_and_seal(&id, part, 1).await?;
    /// assert!(store.is_processed(b"in/1")?);
    /// # Ok::<(), Box<dyn std::error::Error>>(()) })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn stage_and_seal(&self, id: &CheckpointId, part: StagePart, parts: u32) -> Result<StageOutcome> {
        let answer = self.submit_stage_and_seal(id, part, parts, CallDurability::Immediate).await?.await?;
        self.stage_and_seal_outcome(id, parts, answer).await
    }

    /// The first half of [`Store::stage_and_seal`]: checks the call and queues it for the writer thread, to be
    /// made durable before its answer (`Immediate`) or by a later durable commit (`None`: a [`SealWindow`]'s).
    async fn submit_stage_and_seal(
        &self,
        id: &CheckpointId,
        part: StagePart,
        parts: u32,
        durability: CallDurability,
    ) -> Result<Submitted> {
        id.check()?;
        let StagePart { attempt, part, keys, results } = part;
        check_stage(part, &keys, &results)?;
        if parts == 0 || parts > SEAL_PARTS_MAX {
            let (value, max) = (u64::from(parts), u64::from(SEAL_PARTS_MAX));
            return Err(InvalidInput::Range { what: "sealed part count", value, min: 1, max }.into());
        }
        self.shared.check()?;
        let stage = Record::Stage { id: id.clone(), attempt: attempt.get(), part: part.get(), keys, results };
        let seal = Record::Seal { id: id.clone(), parts };
        self.writer.submit(vec![stage, seal], durability).await
    }

    /// The second half of [`Store::stage_and_seal`]: what the writer's answer means for the caller.
    async fn stage_and_seal_outcome(
        &self,
        id: &CheckpointId,
        parts: u32,
        answer: Decided<Vec<Applied>>,
    ) -> Result<StageOutcome> {
        match answer {
            Decided::Applied(applied) => {
                let staged = applied.first().ok_or_else(|| Error::bug("two records, no answer"))?;
                Ok(if staged.written { StageOutcome::Staged } else { StageOutcome::AlreadyStaged })
            }
            // A retry after a lost acknowledgement: the same part is there and the checkpoint sealed; the seal
            // decides whether it was sealed with this count.
            Decided::Refused(TransitionError::AlreadySealed { part_matches: Some(true), .. }) => {
                self.seal(id, parts).await?;
                Ok(StageOutcome::AlreadyStaged)
            }
            Decided::Refused(t) => Err(t.into()),
        }
    }

    /// Drops every part of the current attempt and begins the next one; returns the dropped write results so
    /// the caller can delete their files.
    pub async fn restart(&self, id: &CheckpointId) -> Result<Vec<WriteResult>> {
        id.check()?;
        Ok(self.call(Record::Restart { id: id.clone() }, CallDurability::Immediate).await?.dropped)
    }

    /// Shared staging's adoption of a worker's seal into a checkpoint this store holds Aborted or Staged (its
    /// earlier seal was force-aborted, or an operator restarted it): begins the next attempt (in this epoch, so
    /// never an orphan), stages `keys` and `results` as its one part, and seals it, in one durable call.
    /// Returns the attempt it staged. A refusal stops the call after the records before it (a refused seal
    /// leaves the part staged), as [`Store::stage_and_seal`] does.
    pub(crate) async fn restart_stage_and_seal(
        &self,
        id: &CheckpointId,
        keys: Vec<crate::types::SourceKey>,
        results: Vec<WriteResult>,
    ) -> Result<crate::Attempt> {
        id.check()?;
        let part = crate::Part::FIRST;
        check_stage(part, &keys, &results)?;
        let current = self.get(id)?.ok_or_else(|| Error::from(TransitionError::NotFound { id: id.clone() }))?;
        let attempt = current.attempt.get().checked_add(1).ok_or_else(|| {
            Error::invalid_input(format!("checkpoint {id} has used every attempt number; it cannot begin another"))
        })?;
        let records = vec![
            Record::Restart { id: id.clone() },
            Record::Stage { id: id.clone(), attempt, part: part.get(), keys, results },
            Record::Seal { id: id.clone(), parts: 1 },
        ];
        self.shared.check()?;
        match self.writer.call(records, CallDurability::Immediate).await? {
            Decided::Applied(_) => Ok(crate::Attempt::new(attempt)),
            Decided::Refused(t) => Err(t.into()),
        }
    }

    /// Aborts a Staged checkpoint: its keys are not processed; returns its discarded write results.
    pub async fn abort(&self, id: &CheckpointId) -> Result<Vec<WriteResult>> {
        id.check()?;
        Ok(self.call(Record::Abort { id: id.clone() }, CallDurability::Immediate).await?.dropped)
    }

    /// The commit protocol's raw steps, for the committer (and, through `testkit::RawProtocol`, for tests).
    /// Crate-private: a step called out of order breaks exactly-once.
    pub(crate) fn protocol(&self) -> Protocol<'_> {
        Protocol { store: self }
    }

    /// The operator's view: the escape hatches an operator takes after checking the table by hand (resolve an
    /// unknown outcome, force-abort bad inputs, un-bind a key, settle what landed). Never used by the protocol
    /// itself, and kept apart from the writer's calls so that a writer reaches them only on purpose.
    pub fn operator(&self) -> Operator<'_> {
        Operator { store: self }
    }

    /// The oldest table version a probe may still need, for table maintenance: **never expire (vacuum, compact
    /// away) table versions at or after this one**. It is the version the key in flight (Committing or
    /// CommitUnknown; at most one at a time) was prepared against, whose probe looks at the versions since;
    /// `None` when no key is in flight (or the target gave no version), so nothing constrains maintenance.
    /// Expiring a version a probe needs turns its answer into Unknown, which only an operator can settle.
    pub fn retention_watermark(&self) -> Result<Option<u64>> {
        self.snapshot()?.retention_watermark()
    }

    /// A read snapshot of the tables, once the writer is known to be healthy.
    /// One consistent read of the store, for the crate's readers that need several answers from one moment.
    pub(crate) fn snapshot(&self) -> Result<Snapshot> {
        self.shared.check()?;
        Snapshot::begin(&*self.db)
    }

    /// The garbage ledger: write results of attempts that `restart`, `abort` and `force_abort` dropped, whose
    /// data files no commit will reference (see [`crate::gc`]), after `after` (from the first with `None`),
    /// at most `limit` (and [`crate::limits::GARBAGE_PAGE_ENTRIES_MAX`]) of them, in ledger order.
    pub fn garbage(&self, after: Option<GarbageRef>, limit: usize) -> Result<Vec<GarbageEntry>> {
        self.snapshot()?.garbage(after, limit.min(crate::limits::GARBAGE_PAGE_ENTRIES_MAX))
    }

    /// Records write results whose data files no commit will reference in the garbage ledger (see
    /// [`crate::gc`]): the results of an attempt of `id` that lost to another (the committer's adoption
    /// records those of shared staging's losers itself). Durable when it returns. 1 to
    /// [`crate::limits::STAGE_RESULTS_MAX`] results and [`crate::limits::STAGE_BYTES_MAX`] bytes a call. A file a live checkpoint or the table names is
    /// never collected, whatever the ledger says.
    pub async fn discard(&self, id: &CheckpointId, attempt: crate::Attempt, results: Vec<WriteResult>) -> Result<()> {
        id.check()?;
        if results.is_empty() || results.len() > crate::limits::STAGE_RESULTS_MAX {
            return Err(Error::invalid_input(format!(
                "discard takes 1 to {} write results, not {}",
                crate::limits::STAGE_RESULTS_MAX,
                results.len()
            )));
        }
        let bytes: usize = results.iter().map(|r| r.bytes().len()).sum();
        if bytes > crate::limits::STAGE_BYTES_MAX {
            return Err(Error::invalid_input(format!(
                "discard takes at most {} bytes of write results, not {bytes}",
                crate::limits::STAGE_BYTES_MAX
            )));
        }
        let record = Record::Discard { id: id.clone(), attempt: attempt.get(), results };
        self.call(record, CallDurability::Immediate).await.map(drop)
    }

    /// Removes entries from the garbage ledger, durably (and mirrored before it returns): for the collector that
    /// deleted their files, [`crate::gc::collect_data_files`], its only caller (tests reach it through
    /// `testkit::RawLedger`); entries already gone are skipped. 1 to [`crate::limits::GARBAGE_FORGET_ENTRIES_MAX`]
    /// entries a call.
    pub(crate) async fn forget_garbage(&self, entries: &[GarbageRef]) -> Result<()> {
        let entries = checked_refs(entries)?;
        self.call(Record::ForgetGarbage { entries }, CallDurability::Immediate).await.map(drop)
    }

    /// Starts a collection of the ledger's data files, refusing a second one while the first runs: two
    /// collections judging one file could each delete it, the second after a worker created that name again.
    pub(crate) fn begin_collection(&self) -> Result<Collecting> {
        if self.collecting.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::invalid_input(
                "a collection of this store's data files is already running: run one at a time (two could \
                 delete a name a worker created again between them)",
            ));
        }
        Ok(Collecting(self.collecting.clone()))
    }

    /// Records that this open's committer found the target without the key it was about to begin, in a probe
    /// made after the target was at version `since`.
    pub(crate) fn note_target_checked(&self, since: Option<u64>) {
        self.set_target_check(TargetCheck::Probed { since });
    }

    /// Forgets that answer: a key turned out to be held by another writer, or was un-bound to be begun again, so
    /// the next begin must probe again (a target that checks a key only since the version a commit was prepared
    /// against would let a key begun past that landing through).
    pub(crate) fn forget_target_checked(&self) {
        self.set_target_check(TargetCheck::Unchecked);
    }

    /// Whether this open's committer already found the target without the first key it began.
    pub(crate) fn target_checked(&self) -> bool {
        self.target_check() != TargetCheck::Unchecked
    }

    /// The version the first key begun after the probe is prepared against (the one read before the probe),
    /// once; `None` for every later key, which reads the target's version as it begins.
    pub(crate) fn take_probe_baseline(&self) -> Option<Option<u64>> {
        let mut check = self.target_check.lock().unwrap_or_else(|e| e.into_inner());
        match *check {
            TargetCheck::Probed { since } => {
                *check = TargetCheck::Begun;
                Some(since)
            }
            TargetCheck::Unchecked | TargetCheck::Begun => None,
        }
    }

    fn target_check(&self) -> TargetCheck {
        *self.target_check.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_target_check(&self, check: TargetCheck) {
        *self.target_check.lock().unwrap_or_else(|e| e.into_inner()) = check;
    }

    /// The commit key in flight (Committing or CommitUnknown), if any: one read of the meta, nothing decoded.
    pub(crate) fn in_flight_key(&self) -> Result<Option<u64>> {
        Ok(self.snapshot()?.meta()?.seq.in_flight)
    }

    /// One checkpoint, if it exists. A Staged checkpoint's result count is counted from its parts (its record
    /// carries none), so its `get` also reads the store's parts not yet settled: at most
    /// 4,096 small rows (`FRESH_PARTS_MAX`), decoding only its own.
    pub fn get(&self, id: &CheckpointId) -> Result<Option<CheckpointInfo>> {
        self.snapshot()?.get(id)
    }

    /// Every checkpoint in a state, by id.
    pub fn list(&self, filter: StateFilter) -> Result<Vec<CheckpointInfo>> {
        self.snapshot()?.list(filter)
    }

    /// Calls `each` with the id of every checkpoint in a state, read from the state index alone: what a caller
    /// that needs only the ids (the shared committer's known claims) reads instead of [`Store::list`].
    pub(crate) fn each_id(&self, filter: StateFilter, each: impl FnMut(&CheckpointId)) -> Result<()> {
        self.snapshot()?.each_id(filter, each)
    }

    /// Whether a source key is processed: it belongs to a Sealed (or later) checkpoint. An indexed read.
    ///
    /// It answers from the local commit: it may show a seal still in flight (its call not returned yet, or, in
    /// asynchronous mirror mode, not in the mirror yet, so a lost disk can take it back). Right for *skipping*
    /// work, since a rerun asks again; never a reason to delete a source (see [`Store::seal`]).
    pub fn is_processed(&self, key: &[u8]) -> Result<bool> {
        check_source_key(key)?;
        self.snapshot()?.is_processed(key)
    }

    /// Every processed source key, in key order, read a page at a time: memory stays flat in the number of keys.
    pub fn processed_keys(&self) -> ProcessedKeys {
        ProcessedKeys::new(self.db.clone(), None)
    }

    /// One consistent snapshot of every Sealed, Committing and CommitUnknown checkpoint with its write results,
    /// and the commit sequence.
    pub fn pending(&self) -> Result<Pending> {
        self.snapshot()?.pending()
    }

    /// [`Snapshot::sealed_page`] on tokio's blocking pool: reading a large backlog must not stall the caller's
    /// runtime threads.
    pub(crate) async fn sealed_page_off_runtime(&self) -> Result<read::SealedPage> {
        self.shared.check()?;
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || Snapshot::begin(&*db)?.sealed_page())
            .await
            .map_err(|e| Error::bug(format!("sealed task: {e}")))?
    }

    /// How many checkpoints are Sealed: one index range, nothing decoded.
    pub(crate) fn sealed_count(&self) -> Result<u64> {
        self.snapshot()?.count(StateFilter::Sealed)
    }

    /// The write results commit key `key` is bound to, read by id from one consistent snapshot, in the recorded
    /// checkpoint then part order: what the committer sends after `begin_commit`, so a checkpoint re-sealed
    /// between its own read and the intent can never send a dropped attempt. Each id must
    /// be Committing or CommitUnknown under `key`; anything else is `Corrupt`.
    pub(crate) fn commit_results(&self, key: u64) -> Result<(CommitValue, Vec<WriteResult>)> {
        self.shared.check()?;
        let txn = self.db.begin_read()?;
        let info = read_commit(&txn.open_table(COMMITS)?, key)?
            .ok_or_else(|| Error::corrupt(format!("commit key {key} has no record")))?;
        let checkpoints = txn.open_table(CHECKPOINTS)?;
        let parts = txn.open_table(PARTS)?;
        let mut results = Vec::new();
        for id in &info.ids {
            let record = read_checkpoint(&checkpoints, id)?
                .ok_or_else(|| Error::corrupt(format!("commit key {key} names checkpoint {id}, which is absent")))?;
            if !matches!(record.state, CheckpointState::Committing { key: k } | CheckpointState::CommitUnknown { key: k } if k == key)
            {
                return Err(Error::corrupt(format!(
                    "commit key {key} names checkpoint {id}, which is {:?}, not bound to it",
                    record.state
                )));
            }
            let before = results.len();
            results.extend(read_parts(&parts, id, record.attempt)?.into_iter().flat_map(|(_, p)| p.results));
            if results.len() - before != record.results as usize {
                return Err(Error::corrupt(format!(
                    "checkpoint {id} records {} write results but {} are stored",
                    record.results,
                    results.len() - before
                )));
            }
        }
        Ok((info, results))
    }

    /// The record of commit key `key`, if it was begun.
    pub fn commit_info(&self, key: u64) -> Result<Option<CommitInfo>> {
        self.commit_value(key).map(|c| c.map(|value| CommitInfo::from_value(key, value)))
    }

    /// The stored record of commit key `key`, if it was begun.
    pub(crate) fn commit_value(&self, key: u64) -> Result<Option<CommitValue>> {
        self.snapshot()?.commit_value(key)
    }

    /// Whether the job's final commit has landed (the fast path of a rerun).
    pub fn is_finished(&self) -> Result<bool> {
        Ok(self.snapshot()?.meta()?.finished)
    }

    /// Reads every frame of the local log in order and checks it (dense sequence numbers from the log's start,
    /// CRC32, frame version, a decodable record); returns how many frames there are. A damaged frame is an
    /// [`crate::ErrorKind::Corrupt`] error naming its sequence number. Opening never reads the whole log; this
    /// is the on-demand check.
    pub fn verify_log(&self) -> Result<u64> {
        self.snapshot()?.verify_log()
    }

    /// What the group-commit writer has done since this open: calls answered, batches formed and redb commits
    /// made. `commits < calls` shows concurrent calls being folded into shared transactions and fsyncs.
    pub fn stats(&self) -> WriterStats {
        self.shared.stats()
    }

    /// Holds the writer before its next batch until the returned guard is dropped (testkit only): the calls made
    /// meanwhile queue up and then land in one group commit, in the order they were sent (watch
    /// [`WriterStats::queued`] to know they have all been sent). The writer may already hold one call, received
    /// just before the hold took effect; it joins the same batch. Drop the guard before closing the store: the
    /// writer finishes its queue on close, and a held writer never does.
    #[cfg(any(test, feature = "testkit"))]
    pub fn hold_writer(&self) -> WriterHold {
        self.shared.hold().acquire();
        WriterHold { shared: self.shared.clone() }
    }

    /// Fails with `Fenced` if a newer epoch claimed this store's mirror (never without a mirror): the committer
    /// asks this before it calls the job's state lost, since a takeover explains it too.
    pub(crate) async fn refuse_if_superseded(&self) -> Result<()> {
        let Some(progress) = self.progress.clone() else { return Ok(()) };
        tokio::task::spawn_blocking(move || progress.refuse_if_superseded())
            .await
            .map_err(|e| Error::bug(format!("superseded check task: {e}")))?
    }

    /// Waits until every group committed so far is in the mirror (immediate without a mirror, and in
    /// synchronous mode). Fails with `Fenced` or `Poisoned` if the mirror stopped taking groups.
    ///
    /// In asynchronous mode, its `Ok` is what makes the seals acknowledged before it safe to act on irrevocably.
    pub async fn flush(&self) -> Result<()> {
        self.shared.check()?;
        let Some(progress) = self.progress.clone() else { return Ok(()) };
        tokio::task::spawn_blocking(move || progress.wait_all())
            .await
            .map_err(|e| Error::bug(format!("flush task: {e}")))??;
        self.shared.check()
    }

    /// How far the mirror is behind the local file (zero without a mirror).
    pub fn mirror_lag(&self) -> MirrorLag {
        self.progress.as_ref().map(|p| p.lag()).unwrap_or_default()
    }

    /// Stops the writer after the calls already queued and closes the file.
    pub fn close(mut self) {
        self.writer.close();
    }

    /// [`Store::close`] for async callers: the writer and the mirror's uploads (which may wait for a slow object
    /// store for minutes) are joined on a blocking thread, never on the runtime's own threads.
    pub async fn close_async(self) {
        // A failed join means the closing thread panicked; the store is gone either way, and a reopen recovers.
        let _ = tokio::task::spawn_blocking(move || self.close()).await;
    }

    /// The open redb database, for the testkit's snapshots of the live (acknowledged) state.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn database(&self) -> &Database {
        &self.db
    }

    #[cfg(any(test, feature = "testkit"))]
    /// The frames still in the local log, in order (for tests and tools).
    pub fn log_frames(&self) -> Result<Vec<Vec<u8>>> {
        let txn = self.db.begin_read()?;
        let log = txn.open_table(crate::wal::tables::LOG)?;
        use redb::ReadableTable as _;
        let mut out = Vec::new();
        for entry in log.iter()? {
            out.push(entry?.1.value().to_vec());
        }
        Ok(out)
    }
}

/// A hold on the writer from [`Store::hold_writer`] (testkit only); dropping it lets the writer go on.
#[cfg(any(test, feature = "testkit"))]
pub struct WriterHold {
    shared: Arc<Shared>,
}

#[cfg(any(test, feature = "testkit"))]
impl std::fmt::Debug for WriterHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterHold").finish_non_exhaustive()
    }
}

#[cfg(any(test, feature = "testkit"))]
impl Drop for WriterHold {
    fn drop(&mut self) {
        self.shared.hold().release();
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("job", &self.job)
            .field("target", &self.target)
            .field("epoch", &self.epoch)
            .field("created", &self.created)
            .field("orphans", &self.orphans.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod boundary_tests {
    use super::*;
    use crate::testkit::CrashBackend;
    use crate::{Attempt, ErrorKind, Part};

    /// The second line of defence: an id that bypassed `new` (none can from outside the crate now) is
    /// refused at the store's boundary with `InvalidInput`, and nothing is written.
    #[tokio::test]
    async fn an_unchecked_id_is_refused_at_the_boundary_and_nothing_is_written() {
        let job = JobId::new("job").unwrap();
        let store = Store::builder(job, TargetIdentity::new("t").unwrap()).backend(CrashBackend::new()).open().await;
        let store = store.unwrap();
        let frames = store.log_frames().unwrap().len();
        for bad in ["", "..", "a/b", "a\0b"] {
            let id = CheckpointId::unchecked(bad);
            let staged = store.stage(&id, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"k".to_vec()])).await;
            assert_eq!(staged.unwrap_err().kind(), ErrorKind::InvalidInput, "{bad:?}");
            assert_eq!(store.seal(&id, 1).await.unwrap_err().kind(), ErrorKind::InvalidInput, "{bad:?}");
            assert_eq!(
                store.protocol().commit_empty(&[id]).await.unwrap_err().kind(),
                ErrorKind::InvalidInput,
                "{bad:?}"
            );
        }
        assert_eq!(store.log_frames().unwrap().len(), frames);
        for filter in StateFilter::ALL {
            assert!(store.list(filter).unwrap().is_empty(), "{filter:?}");
        }
    }

    /// An invalid job id in the settings (plain data a caller may build by hand) refuses to create a store.
    #[tokio::test]
    async fn an_unchecked_job_id_refuses_to_create_a_store() {
        let backend = CrashBackend::new();
        let mut builder = Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("t").unwrap());
        builder.settings.job = JobId::unchecked("a/b");
        let opened = builder.backend(backend.clone()).open().await;
        assert_eq!(opened.unwrap_err().kind(), ErrorKind::InvalidInput);
        assert!(backend.durable_bytes().is_empty());
    }
}
