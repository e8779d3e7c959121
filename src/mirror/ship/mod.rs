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
    /// How large the state is, as far as the open can tell cheaply: until this writer's first snapshot, it
    /// stands for the newest snapshot in the schedule.
    pub state_size: SnapshotSize,
}

/// The size of a snapshot: its entries (table rows) and its bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SnapshotSize {
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
}

/// The log shipped since the last snapshot was asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Since {
    pub(super) records: u64,
    pub(super) bytes: u64,
}

/// When a snapshot is due (`MirrorSettings`' intervals and log ratio).
#[derive(Clone, Copy, Debug)]
pub(super) struct Schedule {
    records_min: u64,
    bytes_min: u64,
    ratio_percent: u64,
    records_max: u64,
}

impl Schedule {
    fn new(settings: &MirrorSettings) -> Self {
        Self {
            records_min: settings.snapshot_interval_records.max(1),
            bytes_min: settings.snapshot_interval_bytes.max(1),
            ratio_percent: u64::from(settings.snapshot_log_ratio_percent),
            records_max: settings.snapshot_log_records_max.max(1),
        }
    }

    /// Whether the log `since` the last snapshot (of size `last`) is long enough for the next one. With a
    /// ratio, the log must reach that share of the last snapshot too (in records, no more than the most the
    /// settings let the log grow to, and never less than the floor), and no snapshot is asked for while one is
    /// `in_flight` (a queued one would hold a read transaction and redo the same work); with none, every interval
    /// is taken, as the settings say.
    pub(super) fn due(&self, since: Since, last: SnapshotSize, in_flight: bool) -> bool {
        if self.ratio_percent == 0 {
            return since.records >= self.records_min || since.bytes >= self.bytes_min;
        }
        if in_flight {
            return false;
        }
        let share = |size: u64| u64::try_from(u128::from(size) * u128::from(self.ratio_percent) / 100);
        let grown = |size: u64, floor: u64, max: u64| floor.max(share(size).unwrap_or(u64::MAX).min(max));
        since.records >= grown(last.entries, self.records_min, self.records_max)
            || since.bytes >= grown(last.bytes, self.bytes_min, u64::MAX)
    }
}

/// The writer thread's mirror.
pub(crate) struct MirrorShipper {
    db: Arc<Database>,
    mode: MirrorMode,
    schedule: Schedule,
    /// The next group's ticket: tickets count this writer's groups from 1.
    next_ticket: u64,
    since_snapshot: Since,
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
            schedule: Schedule::new(&start.settings),
            next_ticket: 1,
            since_snapshot: Since { records: start.records_since_snapshot, bytes: start.bytes_since_snapshot },
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
        self.since_snapshot.records += records;
        self.since_snapshot.bytes += frames.iter().map(|f| f.len() as u64).sum::<u64>();
        let snapshot_due =
            self.maintenance.is_some() && self.progress.take_snapshot_due(&self.schedule, self.since_snapshot);
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
                self.since_snapshot = Since::default();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(records_min: u64, bytes_min: u64, ratio_percent: u64) -> Schedule {
        Schedule { records_min, bytes_min, ratio_percent, records_max: u64::MAX }
    }

    fn since(records: u64, bytes: u64) -> Since {
        Since { records, bytes }
    }

    #[test]
    fn without_a_ratio_every_interval_is_taken_whatever_the_state_and_the_snapshot_in_flight() {
        let fixed = schedule(10, 1_000, 0);
        let large = SnapshotSize { entries: 1_000_000, bytes: 1 << 30 };
        assert!(!fixed.due(since(9, 999), large, false));
        assert!(fixed.due(since(10, 0), large, true), "the record interval");
        assert!(fixed.due(since(0, 1_000), large, true), "the byte interval");
    }

    #[test]
    fn with_a_ratio_the_log_must_also_reach_that_share_of_the_last_snapshot() {
        let growing = schedule(10, 1_000, 100);
        let last = SnapshotSize { entries: 500, bytes: 50_000 };
        assert!(!growing.due(since(499, 49_999), last, false), "past both floors, short of the snapshot");
        assert!(growing.due(since(500, 0), last, false), "as many records as the snapshot's entries");
        assert!(growing.due(since(0, 50_000), last, false), "as many bytes as the snapshot's");
        let half = schedule(10, 1_000, 50);
        assert!(half.due(since(250, 0), last, false), "half the entries at 50 percent");
        assert!(!half.due(since(249, 0), last, false));
        // A small state: the floors.
        let small = SnapshotSize { entries: 3, bytes: 100 };
        assert!(!growing.due(since(9, 999), small, false));
        assert!(growing.due(since(10, 0), small, false));
    }

    #[test]
    fn the_ratio_grows_the_record_interval_up_to_the_most_the_settings_allow_and_never_below_the_floor() {
        let capped = Schedule { records_max: 1_000, ..schedule(10, u64::MAX, 100) };
        let large = SnapshotSize { entries: 1_000_000, bytes: 0 };
        assert!(!capped.due(since(999, 0), large, false));
        assert!(capped.due(since(1_000, 0), large, false), "the cap, far below the state's entries");
        let below_the_floor = Schedule { records_max: 5, ..schedule(10, u64::MAX, 100) };
        assert!(!below_the_floor.due(since(9, 0), large, false), "a cap under the floor does not lower it");
        assert!(below_the_floor.due(since(10, 0), large, false));
    }

    #[test]
    fn with_a_ratio_no_snapshot_is_asked_for_while_one_is_in_flight() {
        let growing = schedule(10, 1_000, 100);
        let last = SnapshotSize { entries: 5, bytes: 5 };
        assert!(growing.due(since(u64::MAX, u64::MAX), last, false));
        assert!(!growing.due(since(u64::MAX, u64::MAX), last, true));
    }

    #[test]
    fn a_huge_snapshot_does_not_overflow_the_threshold() {
        let growing = schedule(10, 1_000, 10_000);
        let last = SnapshotSize { entries: u64::MAX / 2, bytes: u64::MAX / 2 };
        assert!(!growing.due(since(u64::MAX - 1, u64::MAX - 1), last, false));
        assert!(growing.due(since(u64::MAX, 0), last, false));
    }
}
