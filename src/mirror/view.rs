//! A read-only view of a store's state straight from its mirror, for remote workers that have no local file:
//! the newest manifest's snapshot and every slot after it, restored (with every check a restore makes) into an
//! in-memory redb, and brought up to date by [`MirrorView::refresh`].

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;
use redb::{Database, ReadableDatabase as _};

use crate::error::{Error, Result};
use crate::limits::MIRROR_HINT_PREFIXES_MAX;
use crate::mirror::format::decode_segment;
use crate::mirror::read::{EpochFloor, for_each_segment, read_manifests, read_snapshot};
use crate::mirror::remote::Remote;
use crate::mirror::{MirrorSettings, snapshot};
use crate::types::{Epoch, check_source_key};
use crate::wal::apply::Tables;
use crate::wal::operator_records::OperatorRecord;
use crate::wal::tables::{KEYS, LOG, META, Meta, create_all, read_meta};

/// A read-only view of the skip set (which source keys are processed) from a store's mirror.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sinkpoint::Error> {
/// use std::sync::Arc;
/// use object_store::{memory::InMemory, path::Path};
/// use sinkpoint::mirror::{MirrorSettings, MirrorView};
/// use sinkpoint::{Attempt, CheckpointId, JobId, Part, StagePart, Store, TargetIdentity};
///
/// let bucket = Arc::new(InMemory::new());
/// let dir = tempfile::tempdir().unwrap();
/// let store = Store::builder(JobId::new("job-1")?, TargetIdentity::new("mem://t")?)
///     .path(dir.path().join("sink.redb"))
///     .mirror(bucket.clone(), Path::from("jobs/job-1"), MirrorSettings::default())
///     .open()
///     .await?;
/// let id = CheckpointId::new("input-0")?;
/// store.stage(&id, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"s3://in/0.csv".to_vec()])).await?;
/// store.seal(&id, 1).await?;
///
/// let view = MirrorView::open(bucket, Path::from("jobs/job-1")).await?;
/// assert!(view.is_processed(b"s3://in/0.csv")?);
/// store.close();
/// # Ok(()) }
/// ```
pub struct MirrorView {
    remote: Arc<Remote>,
    db: Arc<Database>,
    next_slot: u64,
    /// The void rule's floor at `next_slot`.
    floor: EpochFloor,
    epoch: Epoch,
    next_seq: u64,
    replayed: Replayed,
}

struct Loaded {
    db: Database,
    next_slot: u64,
    floor: EpochFloor,
    meta: Option<Meta>,
    replayed: Replayed,
}

/// What the restore and the refreshes replayed beside the tables: the view keeps no log, so this is the one
/// moment an [`crate::inspect::Inspector`] can count the records checked and read the operator's reasons.
#[derive(Default, Clone)]
struct Replayed {
    records: u64,
    operator_records: Vec<OperatorRecord>,
}

impl Replayed {
    fn frame(&mut self, bytes: &[u8], place: &str) -> Result<()> {
        self.records += 1;
        if let Some(record) = OperatorRecord::from_frame(bytes, place)? {
            OperatorRecord::keep(&mut self.operator_records, record);
        }
        Ok(())
    }
}

impl MirrorView {
    /// Restores the view from the mirror at `prefix` of `store`. A prefix without a manifest is reported as
    /// missing (kind [`crate::ErrorKind::WrongStore`]), never taken for an empty store.
    pub async fn open(store: Arc<dyn ObjectStore>, prefix: Path) -> Result<Self> {
        tokio::task::spawn_blocking(move || {
            let timeout = MirrorSettings::default().request_timeout_ms;
            let remote = Arc::new(Remote::new(store, prefix, timeout)?);
            let loaded = load(&remote)?;
            Ok(Self::from_loaded(remote, loaded))
        })
        .await
        .map_err(|e| Error::bug(format!("view task: {e}")))?
    }

    fn from_loaded(remote: Arc<Remote>, loaded: Loaded) -> Self {
        let (epoch, next_seq) = loaded.meta.as_ref().map_or((0, 0), |m| (m.epoch, m.next_seq));
        let (next_slot, floor, replayed) = (loaded.next_slot, loaded.floor, loaded.replayed);
        Self { remote, db: Arc::new(loaded.db), next_slot, floor, epoch, next_seq, replayed }
    }

    /// The log records replayed since the newest snapshot (by the restore and every refresh), and the operator's
    /// records among them (the newest [`crate::limits::INSPECT_OPERATOR_RECORDS_MAX`]).
    pub(crate) fn replayed(&self) -> (u64, Vec<OperatorRecord>) {
        (self.replayed.records, self.replayed.operator_records.clone())
    }

    /// The restored tables, for a read-only [`crate::inspect::Inspector`].
    pub(crate) fn shared_database(&self) -> Arc<Database> {
        self.db.clone()
    }

    /// Applies the slots written since the last read; returns how many records it applied. If the mirror's
    /// collection deleted the slots this view had reached, the view is restored afresh.
    pub async fn refresh(&mut self) -> Result<u64> {
        let remote = self.remote.clone();
        let db = self.db.clone();
        let (next_slot, floor, replayed) = (self.next_slot, self.floor, self.replayed.clone());
        let Refreshed { applied, next_slot, floor, meta, reloaded, replayed } =
            tokio::task::spawn_blocking(move || refresh(&remote, &db, next_slot, floor, replayed))
                .await
                .map_err(|e| Error::bug(format!("view task: {e}")))??;
        if let Some(loaded) = reloaded {
            *self = Self::from_loaded(self.remote.clone(), loaded);
            return Ok(applied);
        }
        self.next_slot = next_slot;
        self.floor = floor;
        self.replayed = replayed;
        if let Some(m) = meta {
            self.epoch = m.epoch;
            self.next_seq = m.next_seq;
        }
        Ok(applied)
    }

    /// Whether a source key is processed, as of the last read of the mirror.
    pub fn is_processed(&self, key: &[u8]) -> Result<bool> {
        check_source_key(key)?;
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(KEYS)?.get(key)?.is_some())
    }

    /// The newest epoch the view has seen open.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The sequence number after the last record applied.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The restored tables, for the testkit's comparisons with a store's state.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn database(&self) -> &Database {
        &self.db
    }
}

fn in_memory() -> Result<Database> {
    Ok(redb::Builder::new().create_with_backend(redb::backends::InMemoryBackend::new())?)
}

fn load(remote: &Remote) -> Result<Loaded> {
    let manifests = read_manifests(remote)?;
    let Some((_, newest)) = manifests.last() else {
        let here = remote.describe(remote.layout.prefix());
        // A URL one level too high (the directory given to the job, not the job's own prefix) is the usual slip.
        let below = remote.mirrors_below(MIRROR_HINT_PREFIXES_MAX).unwrap_or_default();
        let hint = match below.first() {
            Some(first) => format!(
                "; the mirrors of {} are one level below it: give {here}/{first}",
                below.iter().map(|j| format!("job {j}")).collect::<Vec<_>>().join(", ")
            ),
            None => String::new(),
        };
        return Err(Error::wrong_store(format!("the mirror at {here} is missing: it holds no manifest{hint}")));
    };
    let db = in_memory()?;
    let txn = db.begin_write()?;
    create_all(&txn)?;
    let mut meta = None;
    let mut replayed = Replayed::default();
    if newest.snapshot {
        let (header, entries, place) = read_snapshot(remote, newest.first_slot)?;
        meta = Some(snapshot::load(&txn, &header, &entries, &place)?);
    }
    let (next_slot, floor) = {
        let mut tables = Tables::open(&txn)?;
        // Each segment is replayed as it arrives and the log cut behind it: the view answers from the tables
        // and keeps no log, so a restore holds a window of segments, never the whole log.
        let base_floor = EpochFloor::at_base(&newest.history, newest.first_slot);
        let read = for_each_segment(remote, newest.first_slot, base_floor, |segment| {
            let place = remote.describe(&remote.layout.wal(segment.header.slot));
            for f in &segment.frames {
                tables.replay(&mut meta, f, &place)?;
                replayed.frame(f, &place)?;
            }
            match meta.as_mut() {
                Some(m) => tables.truncate_log(m, m.next_seq),
                None => Ok(()),
            }
        })?;
        if let Some(m) = meta.as_mut() {
            tables.truncate_log(m, m.next_seq)?;
            tables.write_meta(m)?;
        }
        read
    };
    txn.commit()?;
    Ok(Loaded { db, next_slot, floor, meta, replayed })
}

/// What a refresh read: the records applied, where the next one starts, and the state (or a fresh restore).
struct Refreshed {
    applied: u64,
    next_slot: u64,
    floor: EpochFloor,
    meta: Option<Meta>,
    reloaded: Option<Loaded>,
    replayed: Replayed,
}

fn refresh(
    remote: &Remote,
    db: &Database,
    mut slot: u64,
    mut floor: EpochFloor,
    mut replayed: Replayed,
) -> Result<Refreshed> {
    let txn = db.begin_write()?;
    let mut meta = read_meta(&txn.open_table(META)?, &txn.open_table(LOG)?)?;
    let mut applied = 0u64;
    {
        let mut tables = Tables::open(&txn)?;
        loop {
            let path = remote.layout.wal(slot);
            let Some(bytes) = remote.get(&path)? else { break };
            let place = remote.describe(&path);
            let segment = decode_segment(&bytes, slot, &place)?;
            slot += 1;
            if !floor.admit(&segment.header, &place)? {
                continue;
            }
            for f in &segment.frames {
                tables.replay(&mut meta, f, &place)?;
                replayed.frame(f, &place)?;
            }
            if let Some(m) = meta.as_mut() {
                // The view keeps no log: cut behind each segment, so a long catch-up holds one at a time.
                tables.truncate_log(m, m.next_seq)?;
            }
            applied += segment.frames.len() as u64;
        }
        if let Some(m) = meta.as_mut() {
            tables.truncate_log(m, m.next_seq)?;
            tables.write_meta(m)?;
        }
    }
    txn.commit()?;
    // The first absent slot is either the end of the log, or a slot the newest holder collected behind a newer
    // snapshot (possibly while this refresh read the ones before it); then only a fresh restore can continue.
    let manifests = read_manifests(remote)?;
    if manifests.last().is_some_and(|(_, m)| m.first_slot > slot) {
        let loaded = load(remote)?;
        let applied = loaded.meta.as_ref().map_or(0, |m| m.next_seq);
        let (next_slot, floor) = (loaded.next_slot, loaded.floor);
        return Ok(Refreshed { applied, next_slot, floor, meta: None, reloaded: Some(loaded), replayed });
    }
    Ok(Refreshed { applied, next_slot: slot, floor, meta, reloaded: None, replayed })
}

impl std::fmt::Debug for MirrorView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorView").finish_non_exhaustive()
    }
}
