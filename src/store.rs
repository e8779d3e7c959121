//! The public [`Store`] handle: opens the local redb file, bumps the epoch, and turns every call into one WAL
//! record for the group-commit writer. Reads go straight to redb read transactions.

use std::path::PathBuf;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, StorageBackend};

/// Lets a boxed backend be handed to redb, which takes backends by value.
#[derive(Debug)]
struct BoxedBackend(Box<dyn StorageBackend>);

impl StorageBackend for BoxedBackend {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.0.write(offset, data)
    }
    fn close(&self) -> std::io::Result<()> {
        self.0.close()
    }
}

use crate::error::{Error, InvalidInput, Result, TransitionError};
use crate::limits::{
    COMMIT_CHECKPOINTS_MAX, KEY_PAGE_KEYS_MAX, REASON_BYTES_MAX, SEAL_PARTS_MAX, STAGE_BYTES_MAX, STAGE_KEYS_MAX,
    STAGE_RESULTS_MAX,
};
use crate::mirror::{Clock, MirrorConfig, MirrorLag, MirrorSettings, Progress, SystemClock};
use crate::state::{CheckpointRecord, CheckpointState, StateFilter};
use crate::types::{
    Attempt, CheckpointId, Epoch, JobId, Part, SourceKey, StagePart, TargetIdentity, WriteResult, check_source_key,
};
use crate::wal::apply::{Applied, Tables};
use crate::wal::record::{Record, Resolution};
use crate::wal::tables::{
    CHECKPOINTS, COMMITS, CommitValue, KEYS, META, Meta, PARTS, STATES, STORE_FORMAT_VERSION, create_all,
    read_checkpoint, read_commit, read_meta, read_parts,
};
use crate::wal::writer::{CallDurability, Shared, Shipper, Writer, WriterStats};

/// How durable a `stage` call is before it returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum StagingDurability {
    /// fsynced before `stage` returns (the default).
    #[default]
    Immediate,
    /// Returned after the in-memory commit, without an fsync: **lost on a crash** until a later durable call
    /// (any seal, restart, abort or commit-protocol call is durable and makes every earlier call durable too).
    /// Never applies to anything but `stage`.
    None,
}

/// The settings of a store: plain data, kept apart from the injected components of [`StoreBuilder`].
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// The job; recorded at create, checked at every open.
    pub job: JobId,
    /// The target's identity; recorded at create, checked at every open.
    pub target: TargetIdentity,
    /// The durability of `stage` calls.
    pub staging_durability: StagingDurability,
    /// Whether `open` may create a store that does not exist yet.
    pub create_if_missing: bool,
    /// The most bytes redb's page cache may hold ([`crate::limits::STORE_CACHE_BYTES_DEFAULT`] by default):
    /// the store's memory stays bounded however many keys it holds.
    pub cache_bytes: usize,
}

enum Location {
    Path(PathBuf),
    Backend(Box<dyn StorageBackend>),
}

/// Builds a [`Store`]: settings plus the injected components (the redb storage backend, the writer tag, the
/// mirror's object store and the clock).
pub struct StoreBuilder {
    settings: StoreSettings,
    location: Option<Location>,
    writer_tag: Option<u128>,
    mirror: Option<(Arc<dyn object_store::ObjectStore>, object_store::path::Path, MirrorSettings)>,
    clock: Option<Arc<dyn Clock>>,
}

impl StoreBuilder {
    /// Stores the WAL in a redb file at `path` (created if missing and allowed).
    pub fn path(mut self, path: impl Into<PathBuf>) -> Self {
        self.location = Some(Location::Path(path.into()));
        self
    }

    /// Stores the WAL on a redb storage backend (a crash-image backend in tests, say).
    pub fn backend(mut self, backend: impl StorageBackend) -> Self {
        self.location = Some(Location::Backend(Box::new(backend)));
        self
    }

    /// Sets the durability of `stage` calls.
    pub fn staging_durability(mut self, durability: StagingDurability) -> Self {
        self.settings.staging_durability = durability;
        self
    }

    /// Sets the most bytes redb's page cache may hold (at least [`crate::limits::STORE_CACHE_BYTES_MIN`]).
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.settings.cache_bytes = bytes.max(crate::limits::STORE_CACHE_BYTES_MIN);
        self
    }

    /// Refuses to create a store that does not exist (a rerun that must find its state).
    pub fn must_exist(mut self) -> Self {
        self.settings.create_if_missing = false;
        self
    }

    /// Injects the writer's unique tag (default: random from the standard library's hasher seed).
    pub fn writer_tag(mut self, tag: u128) -> Self {
        self.writer_tag = Some(tag);
        self
    }

    /// Mirrors the WAL to `store` under `prefix` (see [`crate::mirror`]): the open claims the next epoch there,
    /// restores or reconciles the local file, and fences older writers; every committed group is then shipped as
    /// one object.
    pub fn mirror(
        mut self,
        store: Arc<dyn object_store::ObjectStore>,
        prefix: object_store::path::Path,
        settings: MirrorSettings,
    ) -> Self {
        self.mirror = Some((store, prefix, settings));
        self
    }

    /// Injects the clock the mirror times its deletes and lag bound with (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Opens (or creates) the store, bumps the epoch durably and starts the writer.
    pub async fn open(self) -> Result<Store> {
        let StoreBuilder { settings, location, writer_tag, mirror, clock } = self;
        // Settings are plain data a caller may deserialise: re-check the ids before a store records them.
        settings.job.check()?;
        settings.target.check()?;
        let clock = clock.unwrap_or_else(|| Arc::new(SystemClock));
        if let Some((_, _, mirror_settings)) = &mirror {
            mirror_settings.check()?;
        }
        let mirror = mirror.map(|(store, prefix, settings)| MirrorConfig { store, prefix, settings, clock });
        let location = location.ok_or_else(|| {
            Error::from(InvalidInput::Syntax {
                what: "store location",
                value: "none given: call path() or backend()".into(),
            })
        })?;
        let tag = writer_tag.unwrap_or_else(random_tag);
        let opened = tokio::task::spawn_blocking(move || open_blocking(&settings, location, tag, mirror))
            .await
            .map_err(|e| Error::bug(format!("open task: {e}")))??;
        Ok(opened)
    }
}

/// One consistent snapshot of everything pending, read from `db` (see [`Store::pending`]).
fn read_pending(db: &Database) -> Result<Pending> {
    let txn = db.begin_read()?;
    let states = txn.open_table(STATES)?;
    let checkpoints = txn.open_table(CHECKPOINTS)?;
    let parts = txn.open_table(PARTS)?;
    let commits = txn.open_table(COMMITS)?;
    let meta = read_meta(&txn.open_table(META)?)?.ok_or_else(|| Error::corrupt("table meta is empty"))?;
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
    let in_flight = match meta.seq.in_flight {
        None => None,
        Some(key) => {
            let value = read_commit(&commits, key)?
                .ok_or_else(|| Error::corrupt(format!("commit key {key} is in flight but has no record")))?;
            Some((key, CommitInfo::from_value(key, value)))
        }
    };
    Ok(Pending { checkpoints: out, in_flight, next_key: meta.seq.next_key, finished: meta.finished })
}

/// The default writer tag: unique per process and open. It only has to differ between writers (it resolves an
/// ambiguous mirror put); tests inject their own with [`StoreBuilder::writer_tag`].
#[expect(clippy::disallowed_methods, reason = "the default writer tag is the one place that wants real entropy")]
fn random_tag() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let mut out = 0u128;
    for i in 0..2u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(i);
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0),
        );
        h.write_u32(std::process::id());
        out = (out << 64) | u128::from(h.finish());
    }
    out
}

fn open_blocking(
    settings: &StoreSettings,
    location: Location,
    writer_tag: u128,
    mirror: Option<MirrorConfig>,
) -> Result<Store> {
    let db = match location {
        Location::Path(path) => {
            // With a mirror, a missing file is restored from it; the mirror says whether the store exists.
            if !settings.create_if_missing && mirror.is_none() && !path.exists() {
                return Err(Error::wrong_store(format!("no store at {}", path.display())));
            }
            if !path.exists() {
                create_file_atomically(&path)?;
            }
            let place = path.display().to_string();
            let created = redb::Builder::new().set_cache_size(settings.cache_bytes).create(&path);
            created.map_err(|e| crate::error::open_failed(&place, e))?
        }
        Location::Backend(backend) => {
            crate::wal::half_created::reset_backend(&*backend, settings.create_if_missing)?;
            let created =
                redb::Builder::new().set_cache_size(settings.cache_bytes).create_with_backend(BoxedBackend(backend));
            created.map_err(|e| crate::error::open_failed("the storage backend", e))?
        }
    };
    let db = Arc::new(db);
    if let Some(mirror) = mirror {
        let opened = crate::mirror::open(&db, settings, writer_tag, mirror)?;
        let shipper: Box<dyn Shipper> = Box::new(opened.shipper);
        return start(db, opened.meta, opened.created, Vec::new(), settings, Some(shipper), Some(opened.progress));
    }
    let txn = db.begin_write()?;
    create_all(&txn)?;
    crate::mirror::refuse_without_mirror(&txn)?;
    let (meta, created, orphans) = {
        let mut tables = Tables::open(&txn)?;
        let existing = tables.read_meta()?;
        let created = existing.is_none();
        let mut meta = match existing {
            None => {
                if !settings.create_if_missing {
                    return Err(Error::wrong_store("the store is empty and create_if_missing is off"));
                }
                let mut meta = Meta {
                    format_version: STORE_FORMAT_VERSION,
                    job: settings.job.clone(),
                    target: settings.target.clone(),
                    epoch: 0,
                    writer_tag,
                    next_seq: 0,
                    log_start: 0,
                    seq: crate::state::CommitSequence { next_key: 0, in_flight: None },
                    finished: false,
                };
                let create = Record::Create { job: settings.job.clone(), target: settings.target.clone() };
                tables.append(&mut meta, 0, &create)?;
                meta
            }
            Some(meta) => {
                check_identity(&meta, settings)?;
                meta
            }
        };
        meta.epoch += 1;
        meta.writer_tag = writer_tag;
        let epoch = meta.epoch;
        tables.append(&mut meta, epoch, &Record::Open { writer_tag })?;
        tables.write_meta(&meta)?;
        (meta, created, Vec::new())
    };
    txn.commit()?;
    start(db, meta, created, orphans, settings, None, None)
}

fn start(
    db: Arc<Database>,
    meta: Meta,
    created: bool,
    orphans: Vec<CheckpointId>,
    settings: &StoreSettings,
    shipper: Option<Box<dyn Shipper>>,
    progress: Option<Arc<Progress>>,
) -> Result<Store> {
    let mut store_orphans = orphans;
    store_orphans.extend(scan_orphans(&db, meta.epoch)?);
    let shared = Arc::new(Shared::default());
    if let Some(progress) = &progress {
        progress.attach(shared.clone());
    }
    let writer = Writer::start(db.clone(), meta.clone(), shared.clone(), shipper)?;
    tracing::info!(job = %meta.job, epoch = meta.epoch, created, orphans = store_orphans.len(), "sinkpoint store opened");
    Ok(Store {
        db,
        writer,
        shared,
        epoch: meta.epoch,
        job: meta.job,
        target: meta.target,
        created,
        orphans: store_orphans,
        settings: settings.clone(),
        progress,
    })
}

/// Creates an initialised, empty redb file at `path` without ever leaving a half-written one there: redb
/// initialises a new file in several writes, and a process killed between them leaves a file that no later open
/// accepts ("not a redb database"). The file is built beside `path` and renamed into place once complete.
fn create_file_atomically(path: &std::path::Path) -> Result<()> {
    let mut staging = path.as_os_str().to_owned();
    staging.push(".creating");
    let staging = PathBuf::from(staging);
    // A leftover from a creation that was killed holds nothing: it was never renamed into place.
    match std::fs::remove_file(&staging) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    drop(Database::create(&staging)?);
    std::fs::File::open(&staging)?.sync_all()?;
    std::fs::rename(&staging, path)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

pub(crate) fn check_identity(meta: &Meta, settings: &StoreSettings) -> Result<()> {
    if meta.format_version != STORE_FORMAT_VERSION {
        return Err(Error::corrupt(format!(
            "store format version {} is not the supported version {STORE_FORMAT_VERSION}",
            meta.format_version
        )));
    }
    if meta.job != settings.job {
        return Err(Error::wrong_store(format!("the store belongs to job {}, not {}", meta.job, settings.job)));
    }
    if meta.target != settings.target {
        return Err(Error::wrong_store(format!(
            "the store belongs to target {}, not {}",
            meta.target, settings.target
        )));
    }
    Ok(())
}

fn scan_orphans(db: &Database, epoch: Epoch) -> Result<Vec<CheckpointId>> {
    let txn = db.begin_read()?;
    let states = txn.open_table(STATES)?;
    let checkpoints = txn.open_table(CHECKPOINTS)?;
    let mut out = Vec::new();
    let code = CheckpointState::Staged.code();
    for entry in states.range((code, "")..(code + 1, ""))? {
        let (k, _) = entry?;
        let id = stored_id(k.value().1)?;
        if let Some(record) = read_checkpoint(&checkpoints, &id)?
            && record.epoch < epoch
        {
            out.push(id);
        }
    }
    Ok(out)
}

fn stored_id(s: &str) -> Result<CheckpointId> {
    CheckpointId::new(s).map_err(|_| Error::corrupt(format!("an index holds the invalid checkpoint id {s:?}")))
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
    fn new(id: CheckpointId, r: CheckpointRecord) -> Self {
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
    pub in_flight: Option<(u64, CommitInfo)>,
    /// The next commit key to begin.
    pub next_key: u64,
    /// Whether the job's final commit has landed.
    pub finished: bool,
}

/// One commit key's record, as [`Store::commit_info`] and [`Pending::in_flight`] show it: a read type, not the
/// stored value (whose encoding is the log's business).
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct CommitInfo {
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
    /// Whether an operator's [`Resolution::NotCommitted`] verdict waits for its re-commit: the committer then
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
        Self { ids, prepared_version: target_version, final_commit, epoch, state, awaits_recommit }
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
        match self.writer.call(record, durability).await? {
            Ok(applied) => Ok(applied),
            Err(t) => Err(t.into()),
        }
    }

    /// Stages one part of attempt `attempt` of checkpoint `id`: its source keys, its write results, or both.
    /// Re-staging the same part with the same bytes is a no-op ([`StageOutcome::AlreadyStaged`]); other bytes
    /// are a [`TransitionError::PartConflict`]. `part` must be below [`SEAL_PARTS_MAX`], the most parts an
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

    /// Drops every part of the current attempt and begins the next one; returns the dropped write results so
    /// the caller can delete their files.
    pub async fn restart(&self, id: &CheckpointId) -> Result<Vec<WriteResult>> {
        id.check()?;
        Ok(self.call(Record::Restart { id: id.clone() }, CallDurability::Immediate).await?.dropped)
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

    /// The operator's escape hatch, after checking the table by hand: resolves key `key` as committed or not
    /// committed, recording `reason`. Never used by the protocol itself.
    pub async fn resolve(&self, key: u64, resolution: Resolution, reason: &str) -> Result<()> {
        check_reason(reason)?;
        let record = Record::Resolve { key, resolution, reason: reason.to_owned() };
        self.call(record, CallDurability::Immediate).await.map(drop)
    }

    /// The operator's escape hatch: aborts Sealed checkpoints, un-processing their keys atomically so their
    /// inputs are read again; returns their write results. Never used by the protocol itself.
    pub async fn force_abort(&self, ids: &[CheckpointId], reason: &str) -> Result<Vec<WriteResult>> {
        check_reason(reason)?;
        let ids = sorted_ids(ids)?;
        let record = Record::ForceAbort { ids, reason: reason.to_owned() };
        Ok(self.call(record, CallDurability::Immediate).await?.dropped)
    }

    /// The operator's escape hatch for a key in flight that no probe can settle or that mismatches, after
    /// checking the table by hand: un-binds key `key` (never marked committed) so its checkpoints are Sealed
    /// again with their results, recording `reason`. The key is reused: the committer probes it before it begins
    /// it again, so if the table still holds a commit under `key` the store is refused (`WrongStore`) instead of
    /// writing a duplicate; remove or account for that commit first. Never loses a result.
    pub async fn unbind(&self, key: u64, reason: &str) -> Result<()> {
        check_reason(reason)?;
        let record = Record::Unbind { key, reason: reason.to_owned() };
        self.call(record, CallDurability::Immediate).await.map(drop)
    }

    /// Records the job's end durably, so that every rerun's `recover` reports `finished` (the fast path).
    /// Refused with [`TransitionError::Unfinished`] or [`TransitionError::CommitInFlight`] while anything waits for
    /// the target; a no-op once recorded. A Staged checkpoint does not block it: restart or abort orphans first. The committer's [`crate::Committer::finish`] commits everything first.
    pub async fn mark_finished(&self) -> Result<()> {
        self.call(Record::Finish, CallDurability::Immediate).await.map(drop)
    }

    /// The oldest table version a probe may still need, for table maintenance: **never expire (vacuum, compact
    /// away) table versions at or after this one**. It is the version the key in flight (Committing or
    /// CommitUnknown; at most one at a time) was prepared against, whose probe looks at the versions since;
    /// `None` when no key is in flight (or the target gave no version), so nothing constrains maintenance.
    /// Expiring a version a probe needs turns its answer into Unknown, which only an operator can settle.
    pub fn retention_watermark(&self) -> Result<Option<u64>> {
        self.shared.check()?;
        let txn = self.db.begin_read()?;
        let meta = read_meta(&txn.open_table(META)?)?.ok_or_else(|| Error::corrupt("table meta is empty"))?;
        let Some(key) = meta.seq.in_flight else { return Ok(None) };
        let commit = read_commit(&txn.open_table(COMMITS)?, key)?
            .ok_or_else(|| Error::corrupt(format!("commit key {key} is in flight but has no record")))?;
        Ok(commit.target_version)
    }

    /// The commit key in flight (Committing or CommitUnknown), if any: one read of the meta, nothing decoded.
    pub(crate) fn in_flight_key(&self) -> Result<Option<u64>> {
        self.shared.check()?;
        let txn = self.db.begin_read()?;
        let meta = read_meta(&txn.open_table(META)?)?.ok_or_else(|| Error::corrupt("table meta is empty"))?;
        Ok(meta.seq.in_flight)
    }

    /// One checkpoint, if it exists.
    pub fn get(&self, id: &CheckpointId) -> Result<Option<CheckpointInfo>> {
        self.shared.check()?;
        let txn = self.db.begin_read()?;
        let table = txn.open_table(CHECKPOINTS)?;
        Ok(read_checkpoint(&table, id)?.map(|r| CheckpointInfo::new(id.clone(), r)))
    }

    /// Every checkpoint in a state, by id.
    pub fn list(&self, filter: StateFilter) -> Result<Vec<CheckpointInfo>> {
        self.shared.check()?;
        let txn = self.db.begin_read()?;
        let states = txn.open_table(STATES)?;
        let checkpoints = txn.open_table(CHECKPOINTS)?;
        let code = filter.code();
        let mut out = Vec::new();
        for entry in states.range((code, "")..(code + 1, ""))? {
            let (k, _) = entry?;
            let id = stored_id(k.value().1)?;
            let record = read_checkpoint(&checkpoints, &id)?
                .ok_or_else(|| Error::corrupt(format!("table states names {id}, which table checkpoints lacks")))?;
            out.push(CheckpointInfo::new(id, record));
        }
        Ok(out)
    }

    /// Whether a source key is processed: it belongs to a Sealed (or later) checkpoint. An indexed read.
    ///
    /// It answers from the local commit: it may show a seal still in flight (its call not returned yet, or, in
    /// asynchronous mirror mode, not in the mirror yet, so a lost disk can take it back). Right for *skipping*
    /// work, since a rerun asks again; never a reason to delete a source (see [`Store::seal`]).
    pub fn is_processed(&self, key: &[u8]) -> Result<bool> {
        self.shared.check()?;
        check_source_key(key)?;
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(KEYS)?.get(key)?.is_some())
    }

    /// Every processed source key, in key order, read a page at a time: memory stays flat in the number of keys.
    pub fn processed_keys(&self) -> ProcessedKeys {
        ProcessedKeys { db: self.db.clone(), after: None, page: Vec::new().into_iter(), done: false }
    }

    /// One consistent snapshot of every Sealed, Committing and CommitUnknown checkpoint with its write results,
    /// and the commit sequence.
    pub fn pending(&self) -> Result<Pending> {
        self.shared.check()?;
        read_pending(&self.db)
    }

    /// [`Store::pending`] on tokio's blocking pool: it decodes every pending checkpoint's write results, which
    /// must not stall the caller's runtime threads (red-team finding 10).
    pub(crate) async fn pending_off_runtime(&self) -> Result<Pending> {
        self.shared.check()?;
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || read_pending(&db))
            .await
            .map_err(|e| Error::bug(format!("pending task: {e}")))?
    }

    /// The write results commit key `key` is bound to, read by id from one consistent snapshot, in the recorded
    /// checkpoint then part order: what the committer sends after `begin_commit`, so a checkpoint re-sealed
    /// between its own read and the intent can never send a dropped attempt (red-team finding 4). Each id must
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
        self.shared.check()?;
        let txn = self.db.begin_read()?;
        read_commit(&txn.open_table(COMMITS)?, key)
    }

    /// Whether the job's final commit has landed (the fast path of a rerun).
    pub fn is_finished(&self) -> Result<bool> {
        self.shared.check()?;
        let txn = self.db.begin_read()?;
        Ok(read_meta(&txn.open_table(META)?)?.is_some_and(|m| m.finished))
    }

    /// Reads every frame of the local log in order and checks it (dense sequence numbers from the log's start,
    /// CRC32, frame version, a decodable record); returns how many frames there are. A damaged frame is an
    /// [`crate::ErrorKind::Corrupt`] error naming its sequence number. Opening never reads the whole log; this
    /// is the on-demand check.
    pub fn verify_log(&self) -> Result<u64> {
        self.shared.check()?;
        crate::wal::verify::verify_log(&self.db.begin_read()?)
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

/// Every processed source key, a page at a time (see [`Store::processed_keys`]). Each page is read in its own
/// read transaction, so a key processed during the iteration may or may not be seen; none is seen twice.
pub struct ProcessedKeys {
    db: Arc<Database>,
    after: Option<Vec<u8>>,
    page: std::vec::IntoIter<Vec<u8>>,
    done: bool,
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

fn check_stage(part: Part, keys: &[SourceKey], results: &[WriteResult]) -> Result<()> {
    // A part at or beyond the seal limit could never be sealed; refusing it here also bounds a checkpoint's
    // result count well inside its u32.
    let part = part.get();
    if part >= SEAL_PARTS_MAX {
        let (value, max) = (u64::from(part), u64::from(SEAL_PARTS_MAX - 1));
        return Err(InvalidInput::Range { what: "part index", value, min: 0, max }.into());
    }
    if keys.len() > STAGE_KEYS_MAX {
        return Err(Error::count("source keys in one stage call", keys.len(), STAGE_KEYS_MAX));
    }
    if results.len() > STAGE_RESULTS_MAX {
        return Err(Error::count("write results in one stage call", results.len(), STAGE_RESULTS_MAX));
    }
    let mut bytes = 0usize;
    for key in keys {
        check_source_key(key)?;
        bytes += key.len();
    }
    for result in results {
        result.check()?;
        bytes += result.bytes().len();
    }
    if bytes > STAGE_BYTES_MAX {
        return Err(Error::count("bytes in one stage call", bytes, STAGE_BYTES_MAX));
    }
    Ok(())
}

fn sorted_ids(ids: &[CheckpointId]) -> Result<Vec<CheckpointId>> {
    if ids.is_empty() {
        return Err(TransitionError::NoCheckpoints.into());
    }
    if ids.len() > COMMIT_CHECKPOINTS_MAX {
        return Err(Error::count("checkpoints in one call", ids.len(), COMMIT_CHECKPOINTS_MAX));
    }
    for id in ids {
        id.check()?;
    }
    let mut sorted = ids.to_vec();
    sorted.sort();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(TransitionError::DuplicateId { id: w[0].clone() }.into());
    }
    Ok(sorted)
}

fn check_reason(reason: &str) -> Result<()> {
    if reason.is_empty() || reason.len() > REASON_BYTES_MAX {
        return Err(InvalidInput::Length { what: "operator reason", len: reason.len(), max: REASON_BYTES_MAX }.into());
    }
    Ok(())
}

fn truncate(reason: &str) -> String {
    let mut end = reason.len().min(REASON_BYTES_MAX);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_owned()
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

impl std::fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBuilder").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ProcessedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessedKeys").finish_non_exhaustive()
    }
}

/// The commit protocol's raw steps on a store: only [`crate::Committer`] (and tests) call them, in order.
pub(crate) struct Protocol<'a> {
    store: &'a Store,
}

impl Protocol<'_> {
    /// Binds commit key `key` to `ids` (all Sealed, with results) durably, before the target is called.
    pub(crate) async fn begin_commit(
        &self,
        key: u64,
        ids: &[CheckpointId],
        target_version: Option<u64>,
        final_commit: bool,
    ) -> Result<()> {
        let ids = sorted_ids(ids)?;
        let record = Record::BeginCommit { key, ids, target_version, final_commit };
        self.store.call(record, CallDurability::Immediate).await.map(drop)
    }

    /// Marks Sealed checkpoints without write results committed, without a target commit.
    pub(crate) async fn commit_empty(&self, ids: &[CheckpointId]) -> Result<()> {
        let ids = sorted_ids(ids)?;
        self.store.call(Record::CommitEmpty { ids }, CallDurability::Immediate).await.map(drop)
    }

    /// Marks commit key `key` committed: the target provably holds it. Releases its write results.
    pub(crate) async fn mark_committed(&self, key: u64) -> Result<()> {
        self.store.call(Record::MarkCommitted { key }, CallDurability::Immediate).await.map(drop)
    }

    /// Marks commit key `key` as of unknown outcome: only a probe or [`Store::resolve`] leaves that state.
    pub(crate) async fn mark_unknown(&self, key: u64, reason: &str) -> Result<()> {
        let reason = truncate(reason);
        self.store.call(Record::MarkUnknown { key, reason }, CallDurability::Immediate).await.map(drop)
    }

    /// Records that a probe found key `key` not committed: it goes back to Committing, to be re-committed under
    /// the same key.
    pub(crate) async fn mark_not_committed(&self, key: u64) -> Result<()> {
        self.store.call(Record::MarkNotCommitted { key }, CallDurability::Immediate).await.map(drop)
    }
}

#[cfg(test)]
mod boundary_tests {
    use super::*;
    use crate::ErrorKind;
    use crate::testkit::CrashBackend;

    /// Finding 28, second line of defence: an id that bypassed `new` (none can from outside the crate now) is
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
