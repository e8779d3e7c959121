//! Opening a store through its mirror: read the mirror's log, reconcile the local file with it (restoring it
//! when it is missing), claim the next epoch, re-list the manifests (redoing the read from a newer base a racing
//! collection may use, named in update 1), and fence the slot after the log with this writer's `Open`.
//!
//! Everything local happens in one redb write transaction that commits only after the fence landed, so a
//! failed open leaves the local file as it was. The mirror only gains immutable objects whose history is
//! consistent whatever happens next: a claim, re-shipped records of the local tail, the fence.

use std::sync::Arc;

use bytes::Bytes;
use redb::{Database, WriteTransaction};

use crate::clock::Clock;
use crate::create_once::Created;
use crate::error::{Error, Result};
use crate::limits::{MIRROR_CLAIM_ATTEMPTS_MAX, MIRROR_FENCE_ATTEMPTS_MAX, MIRROR_TAIL_SEGMENT_BYTES_MAX};
use crate::mirror::format::{
    EpochOpen, ManifestBody, Segment, SegmentHeader, SegmentKind, SnapshotEntry, SnapshotHeader, decode_segment,
    encode_manifest, encode_segment,
};
use crate::mirror::layout::ManifestName;
use crate::mirror::read::{
    EpochFloor, for_each_segment, list_manifest_names, opens_in, read_manifests, read_newest, read_snapshot,
};
use crate::mirror::remote::Remote;
use crate::mirror::ship::{MirrorShipper, Progress, ShipperStart, SnapshotSize};
use crate::mirror::{Mark, MirrorConfig, read_mark, snapshot, write_mark};
use crate::types::Epoch;
use crate::wal::apply::Tables;
use crate::wal::frame;
use crate::wal::record::Record;
use crate::wal::tables::{Identity, LOG, META, Meta, create_all, read_meta};

/// A store opened through its mirror.
pub(crate) struct Opened {
    pub meta: Meta,
    pub created: bool,
    pub shipper: MirrorShipper,
    pub progress: Arc<Progress>,
}

fn diverged(message: String) -> Error {
    Error::corrupt(format!("diverged: {message}; delete the local file to restore it from the mirror"))
}

/// What an open read from the mirror and reconciled with the local file, inside its write transaction.
struct Reconciled {
    /// The newest manifest read (its epoch, and what the claim copies); `None` for an empty mirror.
    prior: Option<(ManifestName, ManifestBody)>,
    /// The highest epoch seen, locally or in the mirror.
    floor: Epoch,
    has_snapshot: bool,
    /// The first absent slot of the log.
    next_slot: u64,
    /// The void rule's floor there: a later slot holding a lower epoch is a stopped writer's void.
    slot_floor: EpochFloor,
    /// The bytes of the log's frames from the base (what snapshots are paced by).
    frame_bytes: u64,
    /// Every opening up to the log's end.
    history: Vec<EpochOpen>,
    start_seq: u64,
    end_seq: u64,
    /// Local records beyond the mirror's log, to re-ship before the fence.
    local_tail: Vec<Vec<u8>>,
    /// The state at the mirror's end, as replayed into the transaction.
    meta: Option<Meta>,
}

/// Opens `db` through the mirror of `config` as a writer tagged `writer_tag`, in five named steps: read the
/// mirror's log and reconcile the local file with it, claim the next epoch, fence the log, commit locally, start
/// shipping. Each step's argument is in docs/protocols/mirror.md, "Takeover and fencing".
pub(crate) fn open(db: &Arc<Database>, identity: &Identity, writer_tag: u128, config: MirrorConfig) -> Result<Opened> {
    let MirrorConfig { store, prefix, settings: mirror_settings, clock } = config;
    let remote = Arc::new(Remote::new(store, prefix, mirror_settings.request_timeout_ms)?);
    let location = remote.describe(remote.layout.prefix());
    let txn = db.begin_write()?;
    let read = read_and_reconcile(&txn, identity, &remote, &location, read_manifests(&remote)?.pop())?;
    let (txn, mut read, claim) = claim_epoch(db, txn, identity, &remote, &location, read, writer_tag, clock.as_ref())?;
    let epoch = claim.epoch;
    let mut tables = Tables::open(&txn)?;
    let fenced = fence(&mut tables, identity, &remote, &location, &mut read, epoch, writer_tag)?;
    let Fenced { slot: fence_slot, created, mut meta } = fenced;
    // A store restored from (or kept beside) an older format's mirror is this format with less in it.
    meta.format_version = crate::wal::tables::STORE_FORMAT_VERSION;
    if meta.epoch != epoch || meta.writer_tag != writer_tag {
        return Err(Error::bug(format!("the fence left epoch {}, not {epoch}", meta.epoch)));
    }
    tables.write_meta(&meta)?;
    drop(tables);
    write_mark(&txn, &Mark { location: location.clone(), epoch })?;
    txn.commit()?;
    tracing::info!(epoch, fence_slot, created, mirror = %location, "sinkpoint mirror fenced");

    let voids_end = read.slot_floor.voids_end();
    let Reconciled { has_snapshot, frame_bytes, history, start_seq, local_tail, .. } = read;
    let (shipper, progress) = MirrorShipper::start(ShipperStart {
        remote,
        db: db.clone(),
        settings: mirror_settings,
        clock,
        epoch,
        writer_tag,
        job: identity.job.clone(),
        target: identity.target.clone(),
        history,
        fence_slot,
        voids_end,
        records_since_snapshot: meta.next_seq - start_seq,
        bytes_since_snapshot: frame_bytes + local_tail.iter().map(|f| f.len() as u64).sum::<u64>(),
        claim,
        keep_from: if has_snapshot { start_seq } else { 0 },
        // The bytes are not known before this writer's first snapshot: until then the byte interval is the floor.
        state_size: SnapshotSize {
            entries: crate::mirror::snapshot::entries_about(&redb::ReadableDatabase::begin_read(&**db)?)?,
            bytes: 0,
        },
    })?;
    Ok(Opened { meta, created, shipper, progress })
}

/// Claims the epoch above everything `read` saw, copying what was read, after everything read was checked (so a
/// refused open leaves no claim). A collection that listed the manifests before the claim landed may still
/// delete below the base of a manifest written since the read: the read is then redone from there, in a new
/// transaction, and named by an update of this epoch before the fence, so the fence never lands below a live
/// writer's end. Returns the transaction and the read the fence builds on, and the claim.
#[expect(clippy::too_many_arguments, reason = "the parts of one open, each used once")]
fn claim_epoch(
    db: &Database,
    txn: WriteTransaction,
    identity: &Identity,
    remote: &Remote,
    location: &str,
    read: Reconciled,
    writer_tag: u128,
    clock: &dyn Clock,
) -> Result<(WriteTransaction, Reconciled, ManifestBody)> {
    let claim = claim(remote, read.floor + 1, read.prior.as_ref().map(|p| &p.1), identity, writer_tag, clock)?;
    let Some(newer) = superseded_read(remote, claim.epoch, &read)? else { return Ok((txn, read, claim)) };
    txn.abort()?;
    let txn = db.begin_write()?;
    let read = read_and_reconcile(&txn, identity, remote, location, Some(newer))?;
    let claim = write_update(remote, &claim, read.prior.as_ref().map(|p| &p.1), clock)?;
    Ok((txn, read, claim))
}

/// Where this writer's fence landed, and the state it left.
struct Fenced {
    slot: u64,
    /// Whether the fence also carried the store's `Create` (a new store).
    created: bool,
    meta: Meta,
}

/// Fences the log for `epoch`: re-ships the local tail the mirror lacks, then puts this writer's `Open` in the
/// next free slot. A lower-epoch segment that wins a slot first is replayed (or must equal the tail it races),
/// unless it is a void (below an epoch already in the log, this writer's own once one of its segments landed),
/// which is skipped; an equal or higher one fences this writer.
fn fence(
    tables: &mut Tables<'_>,
    identity: &Identity,
    remote: &Remote,
    location: &str,
    read: &mut Reconciled,
    epoch: Epoch,
    writer_tag: u128,
) -> Result<Fenced> {
    let mut shipped = read.end_seq;
    let slots = read.next_slot..read.next_slot + u64::from(MIRROR_FENCE_ATTEMPTS_MAX);
    for slot in slots {
        let (kind, frames, first_seq) = next_fence_segment(identity, read, shipped, epoch, writer_tag)?;
        let header = SegmentHeader { kind, slot, epoch, writer_tag, first_seq };
        let bytes = Bytes::from(encode_segment(&header, &frames)?);
        let path = remote.layout.wal(slot);
        let place = remote.describe(&path);
        match remote.put_settled(&path, &bytes)? {
            Created::Ours if kind == SegmentKind::Fence => {
                read.slot_floor.admit(&header, &place)?;
                for f in &frames {
                    tables.replay(&mut read.meta, f, &place)?;
                }
                let open_seq = first_seq + frames.len() as u64 - 1;
                read.history.push(EpochOpen { epoch, writer_tag, seq: open_seq, slot });
                let meta = read.meta.take().ok_or_else(|| Error::bug("no meta after the fence"))?;
                return Ok(Fenced { slot, created: frames.len() == 2, meta });
            }
            Created::Ours => {
                read.slot_floor.admit(&header, &place)?;
                shipped += frames.len() as u64;
            }
            Created::Taken(found) => {
                shipped = absorb_older_segment(tables, read, &found, slot, shipped, epoch, &place)?
            }
        }
    }
    Err(Error::poisoned(format!(
        "could not fence the mirror at {location} within {MIRROR_FENCE_ATTEMPTS_MAX} slots: an older writer keeps \
         winning them"
    )))
}

/// The next segment a fencing open puts: a chunk of the local tail not yet shipped (from seq `shipped`), or,
/// once it is all shipped, the fence itself (`Open`, preceded by `Create` for a new store).
fn next_fence_segment(
    identity: &Identity,
    read: &Reconciled,
    shipped: u64,
    epoch: Epoch,
    writer_tag: u128,
) -> Result<(SegmentKind, Vec<Vec<u8>>, u64)> {
    let tail_at = (shipped - read.end_seq) as usize;
    if let Some(rest) = read.local_tail.get(tail_at..).filter(|rest| !rest.is_empty()) {
        let mut bytes = 0;
        let chunk: Vec<Vec<u8>> = rest
            .iter()
            .take_while(|f| {
                bytes += f.len();
                bytes <= MIRROR_TAIL_SEGMENT_BYTES_MAX
            })
            .cloned()
            .collect();
        // One frame over the segment bound still goes, alone.
        let chunk = if chunk.is_empty() { rest[..1].to_vec() } else { chunk };
        return Ok((SegmentKind::Group, chunk, shipped));
    }
    let mut frames = Vec::new();
    let first_seq = read.meta.as_ref().map_or(0, |m| m.next_seq);
    if read.meta.is_none() {
        frames.push(frame::encode(0, 0, &identity.create_record().to_payload()?)?);
    }
    let open_seq = first_seq + frames.len() as u64;
    frames.push(frame::encode(open_seq, epoch, &Record::Open { writer_tag }.to_payload()?)?);
    Ok((SegmentKind::Fence, frames, first_seq))
}

/// A segment another writer put in `slot` first, while this one was fencing: a newer or equal epoch fences this
/// writer; an older one must continue the log at `shipped` and agree with the local tail where they overlap, and
/// is replayed beyond it. Returns the seq after it.
fn absorb_older_segment(
    tables: &mut Tables<'_>,
    read: &mut Reconciled,
    found: &Bytes,
    slot: u64,
    shipped: u64,
    epoch: Epoch,
    place: &str,
) -> Result<u64> {
    let other = decode_segment(found, slot, place)?;
    if other.header.epoch >= epoch {
        return Err(Error::fenced(format!(
            "{place} was taken by epoch {} while this writer (epoch {epoch}) was opening",
            other.header.epoch
        )));
    }
    if !read.slot_floor.admit(&other.header, place)? {
        tracing::info!(slot, epoch = other.header.epoch, "sinkpoint mirror: skipped a stopped writer's void");
        return Ok(shipped);
    }
    if other.header.first_seq != shipped {
        return Err(Error::corrupt(format!(
            "{place}: begins at seq {}, but the log before it ends at seq {shipped}",
            other.header.first_seq
        )));
    }
    for (i, f) in other.frames.iter().enumerate() {
        let seq = shipped + i as u64;
        match read.local_tail.get((seq - read.end_seq) as usize) {
            Some(mine) if mine == f => {}
            Some(_) => {
                return Err(diverged(format!(
                    "the local store's record at seq {seq} differs from the one epoch {} put at {place}",
                    other.header.epoch
                )));
            }
            None => tables.replay(&mut read.meta, f, place)?,
        }
    }
    read.history.extend(opens_in(&other));
    Ok(other.end_seq())
}

/// Reads the mirror's log from the base of `prior` (the newest manifest) and reconciles the local file with it
/// inside `txn`: the local state brought to the mirror's end, or the local tail the mirror lacks found (to
/// re-ship, if no newer epoch fenced it), or a history the mirror never had refused.
fn read_and_reconcile(
    txn: &WriteTransaction,
    identity: &Identity,
    remote: &Remote,
    location: &str,
    prior: Option<(ManifestName, ManifestBody)>,
) -> Result<Reconciled> {
    create_all(txn)?;
    let local = read_meta(&txn.open_table(META)?, &txn.open_table(LOG)?)?;
    let mark = read_mark(txn)?;
    if let Some(m) = &local {
        identity.check(m)?;
    }

    let prior_body = prior.as_ref().map(|(_, body)| body.clone());
    match (&prior_body, &local) {
        (None, Some(_)) if mark.is_some() => {
            return Err(Error::wrong_store(format!(
                "the mirror at {location} is missing (no manifest), though the local store was mirrored there: \
                 the prefix was deleted or is wrong; refusing to start afresh"
            )));
        }
        (None, Some(_)) => {
            return Err(Error::wrong_store(format!(
                "the local store was created without a mirror; attaching the empty mirror at {location} to it \
                 is not supported"
            )));
        }
        // No mark means this local store was never opened through any mirror, so a non-empty mirror holds
        // another store's history: refusing must not advise deleting the local file, which holds data of its own.
        (Some(_), Some(_)) if mark.is_none() => {
            return Err(Error::wrong_store(format!(
                "the local store was created without a mirror, so it is not the store mirrored at {location}: \
                 open it without the mirror, or open the mirror with another local path"
            )));
        }
        (None, None) if !identity.create_if_missing => {
            return Err(Error::wrong_store(format!(
                "the store is missing: no local store, and no manifest in the mirror at {location}"
            )));
        }
        (Some(p), _) if p.job != identity.job || p.target != identity.target => {
            return Err(Error::wrong_store(format!(
                "the mirror at {location} belongs to job {} and target {}, not {} and {}",
                p.job, p.target, identity.job, identity.target
            )));
        }
        _ => {}
    }
    let floor = prior
        .iter()
        .map(|(n, _)| n.epoch)
        .chain(local.as_ref().map(|m| m.epoch))
        .chain(mark.as_ref().map(|m| m.epoch))
        .max()
        .unwrap_or(0);
    let (first_slot, has_snapshot) = prior_body.as_ref().map_or((0, false), |p| (p.first_slot, p.snapshot));
    let history = prior_body.as_ref().map(|p| p.history.clone()).unwrap_or_default();
    let mut stream = Stream {
        txn,
        remote,
        local: local.as_ref(),
        has_snapshot,
        first_slot,
        started: None,
        history,
        end_seq: None,
        frame_bytes: 0,
        mismatch: None,
        replay_error: None,
    };
    // Each segment is compared and replayed as it arrives, so an open holds a window of the log, not all of it:
    // its memory is bounded by the read window, not by the job's history.
    let base_floor = EpochFloor::at_base(prior_body.as_ref().map_or(&[], |p| &p.history), first_slot);
    let (next_slot, slot_floor) = for_each_segment(remote, first_slot, base_floor, |segment| stream.segment(&segment))?;
    let streamed = stream.finish(location)?;
    Ok(Reconciled { prior, floor, has_snapshot, next_slot, slot_floor, ..streamed })
}

/// The state of a streamed read of the mirror's log into the open's transaction. Errors of a later segment are
/// held until [`Stream::finish`], after the history check, so a fenced local tail is reported as fenced, not as
/// a mismatch.
struct Stream<'t> {
    txn: &'t WriteTransaction,
    remote: &'t Remote,
    local: Option<&'t Meta>,
    has_snapshot: bool,
    first_slot: u64,
    /// Set at the first segment (or at the end of an empty log).
    started: Option<Started<'t>>,
    history: Vec<EpochOpen>,
    end_seq: Option<u64>,
    frame_bytes: u64,
    /// The first local record that differs from the mirror's, or is missing.
    mismatch: Option<Error>,
    /// The first record that did not replay; later ones are not replayed.
    replay_error: Option<Error>,
}

/// Where the replay starts: the mirror's first sequence number, and the state replayed into from there.
struct Started<'t> {
    start_seq: u64,
    /// Records below this are already in `meta` (the local file's, or the snapshot's).
    applied_to: u64,
    meta: Option<Meta>,
    tables: Tables<'t>,
}

impl<'t> Stream<'t> {
    /// Decides where the state comes from, given the log's first sequence number: the local file when it
    /// reaches the log, else the snapshot (`snap`, when already read) or nothing.
    fn start(&mut self, start_seq: u64, snap: Option<(SnapshotHeader, Vec<SnapshotEntry>, String)>) -> Result<()> {
        if !self.has_snapshot && start_seq != 0 {
            return Err(Error::corrupt(format!(
                "{} begins at seq {start_seq}, though no snapshot precedes it",
                self.remote.describe(&self.remote.layout.wal(self.first_slot))
            )));
        }
        let reload = self.local.is_none_or(|lm| lm.next_seq < start_seq);
        let meta = match (reload, self.has_snapshot) {
            (false, _) => self.local.cloned(),
            (true, false) => None,
            (true, true) => {
                let (header, entries, place) = match snap {
                    Some(s) => s,
                    None => read_snapshot(self.remote, self.first_slot)?,
                };
                if header.next_seq != start_seq {
                    return Err(Error::corrupt(format!(
                        "{place}: at seq {}, but its first slot at seq {start_seq}",
                        header.next_seq
                    )));
                }
                Some(snapshot::load(self.txn, &header, &entries, &place)?)
            }
        };
        let applied_to = meta.as_ref().map_or(0, |m| m.next_seq);
        self.started = Some(Started { start_seq, applied_to, meta, tables: Tables::open(self.txn)? });
        Ok(())
    }

    /// Compares one checked segment with the local log where they overlap, and replays what the state lacks.
    fn segment(&mut self, segment: &Segment) -> Result<()> {
        if self.started.is_none() {
            self.start(segment.header.first_seq, None)?;
        }
        let started = self.started.as_mut().ok_or_else(|| Error::bug("the stream was not started"))?;
        self.history.extend(opens_in(segment));
        let place = self.remote.describe(&self.remote.layout.wal(segment.header.slot));
        for (i, f) in segment.frames.iter().enumerate() {
            let seq = segment.header.first_seq + i as u64;
            self.frame_bytes += f.len() as u64;
            if let Some(lm) = self.local
                && self.mismatch.is_none()
                && (lm.log_start..lm.next_seq).contains(&seq)
            {
                self.mismatch = match started.tables.log_frame(seq)? {
                    None => {
                        Some(Error::corrupt(format!("the local log lacks seq {seq} (it keeps {} on)", lm.log_start)))
                    }
                    Some(mine) if mine != *f => {
                        Some(diverged(format!("the local record at seq {seq} differs from the mirror's at {place}")))
                    }
                    Some(_) => None,
                };
            }
            if seq >= started.applied_to && self.mismatch.is_none() && self.replay_error.is_none() {
                self.replay_error = started.tables.replay(&mut started.meta, f, &place).err();
            }
        }
        self.end_seq = Some(segment.end_seq());
        Ok(())
    }

    /// After the last segment: the history check, then any mismatch, the local tail the mirror lacks, and any
    /// replay error, in that order.
    fn finish(mut self, location: &str) -> Result<Reconciled> {
        if self.started.is_none() {
            let snap = if self.has_snapshot { Some(read_snapshot(self.remote, self.first_slot)?) } else { None };
            let start_seq = snap.as_ref().map_or(0, |s| s.0.next_seq);
            self.start(start_seq, snap)?;
        }
        let started = self.started.take().ok_or_else(|| Error::bug("the stream was not started"))?;
        let end_seq = self.end_seq.unwrap_or(started.start_seq);
        let mut local_tail: Vec<Vec<u8>> = Vec::new();
        if let Some(lm) = self.local {
            if let Some(next) = check_history(lm, &self.history, location)?
                && lm.next_seq > next.seq
            {
                // Nothing is damaged: this file's writer was fenced, its tail never acknowledged in synchronous
                // mode, so the advice is a fenced writer's, not a corrupt store's.
                return Err(Error::fenced(format!(
                    "the local store holds records of epoch {} from seq {} to {} that the mirror at {location} \
                     does not: epoch {} fenced them at {}; this local file was superseded by epoch {}, and nothing \
                     is damaged: reopen with a new local path, or delete the local file to restore it from the mirror",
                    lm.epoch,
                    next.seq,
                    lm.next_seq - 1,
                    next.epoch,
                    self.remote.describe(&self.remote.layout.wal(next.slot)),
                    next.epoch
                )));
            }
            if let Some(e) = self.mismatch {
                return Err(e);
            }
            for seq in end_seq..lm.next_seq {
                let f = started.tables.log_frame(seq)?.ok_or_else(|| {
                    Error::corrupt(format!("the local log lacks seq {seq}, which the mirror lacks too"))
                })?;
                local_tail.push(f);
            }
        }
        if let Some(e) = self.replay_error {
            return Err(e);
        }
        Ok(Reconciled {
            prior: None,
            floor: 0,
            has_snapshot: self.has_snapshot,
            next_slot: 0,
            slot_floor: EpochFloor::default(),
            frame_bytes: self.frame_bytes,
            history: self.history,
            start_seq: started.start_seq,
            end_seq,
            local_tail,
            meta: started.meta,
        })
    }
}

/// After the claim landed: the newest manifest of an older epoch, if its base is above the one `read` started
/// from. A collection deletes only below the base of a manifest its holder wrote before the listing that found
/// no newer epoch, and that listing came before this claim landed (every later one sees it and deletes nothing),
/// so this one listing shows every base a deletion can still use.
fn superseded_read(remote: &Remote, epoch: Epoch, read: &Reconciled) -> Result<Option<(ManifestName, ManifestBody)>> {
    let older: Vec<ManifestName> = list_manifest_names(remote)?.into_iter().filter(|n| n.epoch < epoch).collect();
    if older.last() == read.prior.as_ref().map(|p| &p.0) {
        return Ok(None);
    }
    let base = read.prior.as_ref().map_or(0, |p| p.1.first_slot);
    Ok(read_newest(remote, &older)?.filter(|(_, body)| body.first_slot > base))
}

/// Writes this epoch's next manifest update naming `base`'s snapshot and history, so that a reader starts where
/// the redone read did, never at the stale base the claim copied.
fn write_update(
    remote: &Remote,
    claim: &ManifestBody,
    base: Option<&ManifestBody>,
    clock: &dyn Clock,
) -> Result<ManifestBody> {
    let base = base.ok_or_else(|| Error::bug("a takeover's read was redone without a manifest"))?;
    let body = ManifestBody {
        update: claim.update + 1,
        first_slot: base.first_slot,
        snapshot: base.snapshot,
        history: base.history.clone(),
        created_ms: clock.wall_ms(),
        ..claim.clone()
    };
    let path = remote.layout.manifest(ManifestName { epoch: body.epoch, update: body.update });
    match remote.put_settled(&path, &Bytes::from(encode_manifest(&body)?))? {
        Created::Ours => Ok(body),
        Created::Taken(_) => Err(Error::fenced(format!(
            "{} was written by another writer of epoch {}: this writer's claim was taken over",
            remote.describe(&path),
            body.epoch
        ))),
    }
}

/// Claims the first free epoch from `first`: creating its manifest is the claim.
fn claim(
    remote: &Remote,
    first: Epoch,
    prior: Option<&ManifestBody>,
    identity: &Identity,
    writer_tag: u128,
    clock: &dyn Clock,
) -> Result<ManifestBody> {
    for epoch in first..first + u64::from(MIRROR_CLAIM_ATTEMPTS_MAX) {
        let body = ManifestBody {
            epoch,
            update: 0,
            job: identity.job.clone(),
            target: identity.target.clone(),
            writer_tag,
            first_slot: prior.map_or(0, |p| p.first_slot),
            snapshot: prior.is_some_and(|p| p.snapshot),
            created_ms: clock.wall_ms(),
            history: prior.map(|p| p.history.clone()).unwrap_or_default(),
        };
        let path = remote.layout.manifest(ManifestName { epoch, update: 0 });
        match remote.put_settled(&path, &Bytes::from(encode_manifest(&body)?))? {
            Created::Ours => return Ok(body),
            Created::Taken(_) => {
                tracing::info!(epoch, "sinkpoint mirror: epoch claimed by another writer, trying the next")
            }
        }
    }
    Err(Error::poisoned(format!(
        "could not claim an epoch in the mirror at {} within {MIRROR_CLAIM_ATTEMPTS_MAX} attempts",
        remote.describe(remote.layout.prefix())
    )))
}

/// Finds the local store's epoch in the mirror's history and returns the opening after it, if any: the local
/// log may not reach past that opening's `Open` record.
fn check_history(local: &Meta, history: &[EpochOpen], location: &str) -> Result<Option<EpochOpen>> {
    let Some(i) = history.iter().position(|h| h.epoch == local.epoch) else {
        if history.first().is_some_and(|h| local.epoch < h.epoch) {
            return Err(diverged(format!(
                "the local store (epoch {}) is older than the history the mirror at {location} keeps (from epoch {}), \
                 so it cannot be checked against it",
                local.epoch,
                history.first().map_or(0, |h| h.epoch)
            )));
        }
        return Err(diverged(format!(
            "the local store's epoch {} was never opened through the mirror at {location}",
            local.epoch
        )));
    };
    if history[i].writer_tag != local.writer_tag {
        return Err(diverged(format!(
            "epoch {} was opened through the mirror at {location} by another writer ({:032x}, not {:032x})",
            local.epoch, history[i].writer_tag, local.writer_tag
        )));
    }
    Ok(history.get(i + 1).copied())
}
