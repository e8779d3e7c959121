//! Shipping: the writer thread's side of the mirror. The writer hands each committed group to an uploader thread with
//! a ticket (its group number); the uploader assigns slots in order and keeps up to
//! [`MIRROR_SLOTS_IN_FLIGHT_MAX`] segments in flight when somebody waits for them (one otherwise), acknowledging
//! them in slot order; a segment holds every group queued when its put began, so a slow object store costs fewer,
//! larger puts rather than one put per group, and a call waiting for its own put does not wait for another's. A
//! batch's acknowledgement waits for its group when the mode or a commit intent (any protocol record but a mark)
//! says so (the writer hands its replies to [`Progress`] and goes on); the writer itself waits only for room when
//! the asynchronous lag bound is reached. A maintenance thread makes snapshots (a group after which a snapshot is due ends its segment, so the snapshot names
//! the next slot), writes the manifest update that references each, and, after the minimum age, deletes what the
//! newest manifest no longer references.

mod maintainer;
mod progress;
mod putter;
mod uploader;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use redb::{Database, ReadableDatabase as _};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::limits::{MIRROR_LINGER_MS, MIRROR_SLOTS_IN_FLIGHT_MAX, MIRROR_SNAPSHOT_CHUNK_BYTES_MAX};
use crate::mirror::format::{EpochOpen, ManifestBody};
use crate::mirror::layout::ManifestName;
use crate::mirror::remote::Remote;
use crate::mirror::{MirrorMode, MirrorSettings};
use crate::types::{Epoch, JobId, TargetIdentity};
use crate::wal::tables::Meta;
use crate::wal::writer::{GroupKind, Mirrored, Shipped, Shipper};

use maintainer::{Collect, Maintainer, Maintenance};
use progress::Group;
pub(crate) use progress::Progress;
use uploader::Uploader;

/// What the open learnt that shipping needs.
pub(crate) struct ShipperStart {
    pub remote: Arc<Remote>,
    pub db: Arc<Database>,
    pub settings: MirrorSettings,
    pub clock: Arc<dyn Clock>,
    pub epoch: Epoch,
    pub writer_tag: u128,
    pub job: JobId,
    pub target: TargetIdentity,
    /// Every epoch opened so far, this writer's included.
    pub history: Vec<EpochOpen>,
    /// The slot of this writer's fence.
    pub fence_slot: u64,
    /// The first slot a stopped writer's void cannot reach (`read::EpochFloor::voids_end`).
    pub voids_end: u64,
    /// The records in the mirror since the snapshot the claim references.
    pub records_since_snapshot: u64,
    /// Their frames' bytes (those the open read back from the mirror or re-shipped).
    pub bytes_since_snapshot: u64,
    /// The newest manifest this writer wrote while opening (its claim, or the update after a redone read): what
    /// it references.
    pub claim: ManifestBody,
    /// The lowest sequence number the local log must keep now.
    pub keep_from: u64,
}

/// The writer thread's mirror.
pub(crate) struct MirrorShipper {
    db: Arc<Database>,
    mode: MirrorMode,
    snapshot_interval_records: u64,
    snapshot_interval_bytes: u64,
    /// The next group's ticket: tickets count this writer's groups from 1.
    next_ticket: u64,
    records_since_snapshot: u64,
    bytes_since_snapshot: u64,
    progress: Arc<Progress>,
    uploads: Option<mpsc::Sender<Group>>,
    maintenance: Option<mpsc::Sender<Maintenance>>,
    threads: Vec<JoinHandle<()>>,
}

impl MirrorShipper {
    pub(crate) fn start(start: ShipperStart) -> Result<(Self, Arc<Progress>)> {
        let progress = Arc::new(Progress::new(&start));
        let (upload_tx, upload_rx) = mpsc::channel::<Group>();
        let (maint_tx, maint_rx) = mpsc::channel::<Maintenance>();
        let mut threads = Vec::new();
        let mut uploader = Uploader {
            remote: start.remote.clone(),
            progress: progress.clone(),
            epoch: start.epoch,
            writer_tag: start.writer_tag,
            next_slot: start.fence_slot + 1,
            voids_end: start.voids_end,
            depth: u64::from(start.settings.puts_in_flight_max).clamp(1, MIRROR_SLOTS_IN_FLIGHT_MAX),
            carried: None,
            linger_ms: MIRROR_LINGER_MS,
            puts: None,
            putters: Vec::new(),
        };
        uploader.start_putters()?;
        threads.push(
            std::thread::Builder::new()
                .name("sinkpoint-mirror-upload".into())
                .spawn(move || uploader.run(&upload_rx))?,
        );
        let mut maintainer = Maintainer {
            remote: start.remote.clone(),
            progress: progress.clone(),
            clock: start.clock.clone(),
            gc_age_ms_min: start.settings.gc_age_ms_min,
            epoch: start.epoch,
            writer_tag: start.writer_tag,
            job: start.job,
            target: start.target,
            history: start.history,
            // A takeover that redid its read wrote update 1 after its claim: later updates follow it.
            update: start.claim.update,
            pending: VecDeque::from([Collect {
                // Aged from now on the monotonic clock, never from the claim's wall time: a little later than
                // the claim, so only ever later to collect.
                created_ms: start.clock.now_ms(),
                first_slot: start.claim.first_slot,
                name: ManifestName { epoch: start.epoch, update: start.claim.update },
            }]),
            newest: true,
            object_bytes_max: MIRROR_SNAPSHOT_CHUNK_BYTES_MAX,
            predecessors_collected: false,
        };
        threads.push(std::thread::Builder::new().name("sinkpoint-mirror-maintenance".into()).spawn(move || {
            for job in maint_rx {
                maintainer.run(job);
            }
        })?);
        let shipper = Self {
            db: start.db,
            mode: start.settings.mode,
            snapshot_interval_records: start.settings.snapshot_interval_records.max(1),
            next_ticket: 1,
            records_since_snapshot: start.records_since_snapshot,
            snapshot_interval_bytes: start.settings.snapshot_interval_bytes.max(1),
            bytes_since_snapshot: start.bytes_since_snapshot,
            progress: progress.clone(),
            uploads: Some(upload_tx),
            maintenance: Some(maint_tx),
            threads,
        };
        Ok((shipper, progress))
    }

    fn send_upload(&self, upload: Group) -> Result<()> {
        self.uploads
            .as_ref()
            .and_then(|tx| tx.send(upload).ok())
            .ok_or_else(|| Error::poisoned("the mirror's uploader has stopped".to_string()))
    }
}

impl Shipper for MirrorShipper {
    fn ship(&mut self, meta: &Meta, frames: Vec<Vec<u8>>, kind: GroupKind) -> Result<Shipped> {
        Progress::check(&self.progress.lock())?;
        let ticket = self.next_ticket;
        let records = frames.len() as u64;
        self.records_since_snapshot += records;
        self.bytes_since_snapshot += frames.iter().map(|f| f.len() as u64).sum::<u64>();
        let snapshot_due = self.maintenance.is_some()
            && (self.records_since_snapshot >= self.snapshot_interval_records
                || self.bytes_since_snapshot >= self.snapshot_interval_bytes);
        self.progress.wait_room(self.mode)?;
        self.progress.push(ticket, records);
        let first_seq = meta.next_seq - records;
        let waits = match kind {
            GroupKind::Waited => true,
            GroupKind::Durable => self.mode == MirrorMode::Synchronous,
            GroupKind::Lagging => false,
        };
        self.send_upload(Group { ticket, first_seq, frames, cut: snapshot_due, lingers: !waits })?;
        self.next_ticket += 1;
        if let Some(tx) = &self.maintenance {
            let job = if snapshot_due {
                self.records_since_snapshot = 0;
                self.bytes_since_snapshot = 0;
                // Begun right after this group's commit, before the next one: the state its cut stands for.
                let txn = Box::new(self.db.begin_read()?);
                Maintenance::Snapshot { ticket, next_seq: meta.next_seq, txn }
            } else {
                Maintenance::Tick
            };
            let _ = tx.send(job);
        }
        Ok(Shipped { keep_from: self.progress.keep_from(), wait_for: waits.then_some(ticket) })
    }

    fn settle(&mut self) -> Result<Option<u64>> {
        Progress::check(&self.progress.lock())?;
        let last = self.next_ticket - 1;
        if self.mode != MirrorMode::Synchronous || last == 0 {
            return Ok(None);
        }
        self.progress.hurry(last);
        Ok(Some(last))
    }

    fn when_mirrored(&mut self, ticket: u64, done: Mirrored) {
        self.progress.on_mirrored(ticket, done);
    }
}

impl Drop for MirrorShipper {
    fn drop(&mut self) {
        // The uploader finishes what was handed over (a close leaves nothing acked only locally that it can
        // still ship), then the maintenance thread its snapshot.
        self.uploads = None;
        self.maintenance = None;
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
