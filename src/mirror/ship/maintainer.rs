//! The maintenance thread: snapshots, the manifest update that references each, and, after the minimum age, the
//! deletion of what the newest manifest no longer references.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectMeta;
use redb::ReadTransaction;

use crate::clock::Clock;
use crate::create_once::Created;
use crate::error::{Error, Result};
use crate::mirror::format::{EpochOpen, ManifestBody, SnapshotHeader, decode_snapshot_chunk, encode_manifest};
use crate::mirror::layout::ManifestName;
use crate::mirror::read::list_manifest_names;
use crate::mirror::remote::Remote;
use crate::mirror::snapshot;
use crate::types::{Epoch, JobId, TargetIdentity};

use super::SnapshotSize;
use super::progress::{Failure, Progress};

pub(super) enum Maintenance {
    /// A snapshot of `txn`, the state right after the cut group `ticket` (`next_seq` is the next record's).
    Snapshot {
        ticket: u64,
        next_seq: u64,
        txn: Box<ReadTransaction>,
    },
    Tick,
}

/// An old range the newest manifest stopped referencing when `name` was written.
#[derive(Debug)]
pub(super) struct Collect {
    pub(super) created_ms: u64,
    pub(super) first_slot: u64,
    pub(super) name: ManifestName,
}

pub(super) struct Maintainer {
    pub(super) remote: Arc<Remote>,
    pub(super) progress: Arc<Progress>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) gc_age_ms_min: u64,
    pub(super) epoch: Epoch,
    pub(super) writer_tag: u128,
    pub(super) job: JobId,
    pub(super) target: TargetIdentity,
    pub(super) history: Vec<EpochOpen>,
    pub(super) update: u32,
    pub(super) pending: VecDeque<Collect>,
    /// False once a newer epoch's manifest was seen: deletes are then that writer's business.
    pub(super) newest: bool,
    /// The largest snapshot object put (a chunk): below what every reader accepts.
    pub(super) object_bytes_max: u64,
    /// Whether this writer has collected its predecessors' superseded manifests (once, on its first run).
    pub(super) predecessors_collected: bool,
}

impl Maintainer {
    pub(super) fn run(&mut self, job: Maintenance) {
        if let Maintenance::Snapshot { ticket, next_seq, txn } = job {
            let written = self.snapshot(ticket, next_seq, &txn);
            // The read transaction is let go before the writer may ask for the next snapshot.
            drop(txn);
            match written {
                Ok(size) => self.progress.snapshot_done(Some(size)),
                Err(e) => {
                    // A failed snapshot only delays truncation; the next interval tries again.
                    tracing::warn!(ticket, error = %e, "sinkpoint mirror snapshot failed");
                    self.progress.snapshot_done(None);
                }
            }
        }
        if let Err(e) = self.collect_due() {
            tracing::warn!(error = %e, "sinkpoint mirror collection failed");
        }
        if !self.predecessors_collected {
            self.predecessors_collected = true;
            if let Err(e) = self.collect_predecessors() {
                tracing::warn!(error = %e, "sinkpoint mirror: collecting older epochs' manifests failed");
            }
        }
    }

    /// Deletes older epochs' manifests that were superseded at least `gc_age_ms_min` ago: a
    /// manifest is superseded when the next one is written, and the listing's server times say when that was,
    /// measured against the newest manifest's (this writer's own, just written), so no clock of this machine
    /// is compared with the store's. A reader that could still use such a manifest listed it more than the
    /// minimum age ago, which the collection of slots already rules out. Without this, every short-lived
    /// writer (gone before its own collection is due) leaves its claim behind, and listings grow forever.
    pub(super) fn collect_predecessors(&mut self) -> Result<()> {
        if !self.newest {
            return Ok(());
        }
        let mut listed: Vec<(ManifestName, ObjectMeta)> = self
            .remote
            .list("manifest")?
            .into_iter()
            .filter_map(|m| self.remote.layout.parse_manifest(&m.location).map(|n| (n, m)))
            .collect();
        listed.sort_by_key(|(name, _)| *name);
        let names: Vec<ManifestName> = listed.iter().map(|(n, _)| *n).collect();
        if self.superseded(&names) {
            return Ok(());
        }
        let Some(now) = listed.iter().map(|(_, m)| m.last_modified).max() else { return Ok(()) };
        let age_min = i64::try_from(self.gc_age_ms_min).unwrap_or(i64::MAX);
        let mut deleted = 0;
        for pair in listed.windows(2) {
            let [(name, meta), (_, next)] = pair else { continue };
            if name.epoch < self.epoch && (now - next.last_modified).num_milliseconds() >= age_min {
                self.remote.delete(&meta.location)?;
                deleted += 1;
            }
        }
        tracing::debug!(deleted, "sinkpoint mirror: older epochs' superseded manifests collected");
        Ok(())
    }

    /// Writes the snapshot of `txn` and the manifest update naming it; returns its size.
    pub(super) fn snapshot(&mut self, ticket: u64, next_seq: u64, txn: &ReadTransaction) -> Result<SnapshotSize> {
        // Only a snapshot whose every earlier slot is in the mirror describes the mirror's history; the segment
        // that holds the cut group ends with it, so the snapshot stands for the state before the next slot.
        let slot = self.progress.wait_cut(ticket)? + 1;
        let header = SnapshotHeader { slot, next_seq, epoch: self.epoch, writer_tag: self.writer_tag };
        let remote = &self.remote;
        let mut bytes_put = 0u64;
        // Chunks 1… are put as they fill, chunk 0 last: no chunk over what a reader accepts is ever put, and
        // the manifest below references the snapshot only once all of it is there.
        let mut put_chunk = |chunk: u32, bytes: Vec<u8>| {
            bytes_put += bytes.len() as u64;
            match remote.put_settled(&remote.layout.snapshot_chunk(slot, chunk), &Bytes::from(bytes))? {
                Created::Ours => Ok(()),
                // Another writer began a snapshot of this slot; mixing its chunks with ours is not sound.
                Created::Taken(_) => Err(Error::from(std::io::Error::other(format!(
                    "{} was put by another writer; this snapshot is abandoned",
                    remote.describe(&remote.layout.snapshot_chunk(slot, chunk))
                )))),
            }
        };
        let (first, entries) = snapshot::build(txn, &header, self.object_bytes_max, &mut put_chunk)?;
        let size = SnapshotSize { entries, bytes: bytes_put + first.len() as u64 };
        let bytes = Bytes::from(first);
        let path = self.remote.layout.snapshot(slot);
        if let Created::Taken(found) = self.remote.put_settled(&path, &bytes)? {
            // Another writer's snapshot of the same slot is the same history, and its chunks were all put before
            // its chunk 0; that chunk only has to be sound.
            decode_snapshot_chunk(&found, slot, &self.remote.describe(&path))?;
        }
        self.update += 1;
        let created_ms = self.clock.now_ms();
        let wall_ms = self.clock.wall_ms();
        let mut history = self.history.clone();
        let excess = history.len().saturating_sub(crate::limits::MIRROR_HISTORY_EPOCHS_MAX);
        history.drain(..excess);
        let body = ManifestBody {
            epoch: self.epoch,
            update: self.update,
            job: self.job.clone(),
            target: self.target.clone(),
            writer_tag: self.writer_tag,
            first_slot: slot,
            snapshot: true,
            created_ms: wall_ms,
            history,
        };
        let name = ManifestName { epoch: self.epoch, update: self.update };
        let path = self.remote.layout.manifest(name);
        if let Created::Taken(_) = self.remote.put_settled(&path, &Bytes::from(encode_manifest(&body)?))? {
            return Err(Error::corrupt(format!("{} was written by another writer", self.remote.describe(&path))));
        }
        self.progress.set_keep_from(next_seq);
        self.pending.push_back(Collect { created_ms, first_slot: slot, name });
        tracing::debug!(
            slot,
            next_seq,
            entries = size.entries,
            bytes = size.bytes,
            "sinkpoint mirror snapshot written"
        );
        Ok(size)
    }

    /// Deletes what the newest due manifest no longer references, once it is old enough, and only while this
    /// writer holds the newest epoch.
    pub(super) fn collect_due(&mut self) -> Result<()> {
        let now = self.clock.now_ms();
        let mut due = None;
        while let Some(front) = self.pending.front()
            && now.saturating_sub(front.created_ms) >= self.gc_age_ms_min
        {
            due = self.pending.pop_front();
        }
        let Some(due) = due else { return Ok(()) };
        if !self.newest {
            return Ok(());
        }
        let names = list_manifest_names(&self.remote)?;
        if self.superseded(&names) {
            return Ok(());
        }
        for name in names.into_iter().filter(|n| *n < due.name) {
            self.remote.delete(&self.remote.layout.manifest(name))?;
        }
        for dir in ["wal", "snapshot"] {
            for meta in self.remote.list(dir)? {
                if self.remote.layout.parse_slot(&meta.location, dir).is_some_and(|s| s < due.first_slot) {
                    self.remote.delete(&meta.location)?;
                }
            }
        }
        tracing::debug!(first_slot = due.first_slot, "sinkpoint mirror collected");
        // A claim that landed during the deletes is found now rather than at this writer's next slot.
        self.superseded(&list_manifest_names(&self.remote)?);
        Ok(())
    }

    /// Whether `names` show a newer epoch's manifest; if so this writer is fenced, and stops the store at once:
    /// its next slot may lie beyond the newer writer's fence, so waiting for a slot to be taken is not enough.
    pub(super) fn superseded(&mut self, names: &[ManifestName]) -> bool {
        let Some(newer) = names.last().filter(|n| n.epoch > self.epoch) else { return false };
        self.newest = false;
        self.progress.fail(Failure {
            fenced: true,
            message: format!(
                "epoch {} claimed the mirror at {} after this writer (epoch {}): this writer is fenced; stop it",
                newer.epoch,
                self.remote.describe(self.remote.layout.prefix()),
                self.epoch
            ),
        });
        true
    }
}
