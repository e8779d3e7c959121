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

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectMeta;
use redb::{Database, ReadTransaction, ReadableDatabase as _};

use crate::error::{Error, Result};
use crate::limits::{
    MIRROR_LINGER_MS, MIRROR_QUEUED_GROUPS_MAX, MIRROR_SEGMENT_FRAMES_MAX, MIRROR_SLOTS_IN_FLIGHT_MAX,
    MIRROR_SNAPSHOT_CHUNK_BYTES_MAX, MIRROR_TAIL_SEGMENT_BYTES_MAX,
};
use crate::mirror::clock::Clock;
use crate::mirror::format::{
    EpochOpen, ManifestBody, SegmentHeader, SegmentKind, SnapshotHeader, decode_segment, decode_snapshot_chunk,
    encode_manifest, encode_segment,
};
use crate::mirror::layout::ManifestName;
use crate::mirror::read::list_manifest_names;
use crate::mirror::remote::{Remote, Settled};
use crate::mirror::{MirrorLag, MirrorMode, MirrorSettings, snapshot};
use crate::types::{Epoch, JobId, TargetIdentity};
use crate::wal::tables::Meta;
use crate::wal::writer::{GroupKind, Mirrored, Shared, Shipped, Shipper};

/// Why the mirror stopped taking segments.
#[derive(Clone, Debug)]
struct Failure {
    fenced: bool,
    message: String,
}

impl Failure {
    fn error(&self) -> Error {
        if self.fenced { Error::fenced(self.message.clone()) } else { Error::poisoned(self.message.clone()) }
    }

    fn from_error(e: &Error) -> Self {
        Failure { fenced: e.kind() == crate::ErrorKind::Fenced, message: e.message() }
    }
}

/// A committed group handed to the uploader.
struct Group {
    ticket: u64,
    first_seq: u64,
    frames: Vec<Vec<u8>>,
    /// A snapshot of the state right after this group is due: the segment holding it ends with it.
    cut: bool,
    /// Nobody waits for this group to be in the mirror (it was committed without an fsync, or durably under an
    /// asynchronous mirror): the uploader may hold it for the groups that follow.
    lingers: bool,
}

impl Group {
    fn bytes(&self) -> usize {
        self.frames.iter().map(Vec::len).sum()
    }
}

#[derive(Debug)]
struct Queued {
    ticket: u64,
    records: u64,
    at_ms: u64,
}

#[derive(Default)]
struct ProgressState {
    /// Groups handed to the uploader and not yet in the mirror, in ticket order.
    queued: VecDeque<Queued>,
    /// The highest ticket in the mirror (every lower one is there too); 0 before the first.
    mirrored: u64,
    /// The slot of each segment that ended with a cut group, by that group's ticket, until the maintenance
    /// thread takes it for its snapshot.
    cuts: BTreeMap<u64, u64>,
    failure: Option<Failure>,
    /// The lowest sequence number the local log must keep.
    keep_from: u64,
    /// The lowest slot of this writer's that has not landed: segments are acknowledged in slot order.
    ack_slot: u64,
    /// Segments that landed above `ack_slot`, by slot, until the ones below them land.
    landed_ahead: BTreeMap<u64, Landing>,
    /// The writer's batches waiting to be acked, by the ticket each waits for (in ticket order).
    deferred: VecDeque<(u64, Mirrored)>,
    /// A durable barrier waits for every group up to this ticket, unsynced ones included: until they are in the
    /// mirror, the uploader does not linger on them.
    hurry_until: u64,
}

/// A segment that landed: the last group it holds, and whether that group was cut.
#[derive(Clone, Copy, Debug)]
struct Landing {
    ticket: u64,
    cut: bool,
}

/// The upload progress, shared by the writer thread, the uploader, the maintenance thread and the store's
/// `flush` and `mirror_lag`.
pub(crate) struct Progress {
    state: Mutex<ProgressState>,
    changed: Condvar,
    clock: Arc<dyn Clock>,
    /// The store's shared state: a failure found by the uploader stops every call, reads included.
    shared: std::sync::OnceLock<Arc<Shared>>,
    /// The mirror and this writer's epoch, to ask whether a newer epoch claimed it.
    remote: Arc<Remote>,
    epoch: Epoch,
    /// Callers blocked on the uploader now (in `wait_all`, or a writer waiting for room under the lag bounds):
    /// while there is one, the uploader puts what it holds instead of lingering.
    waiting: AtomicUsize,
}

/// Counts a caller blocked on the uploader for as long as it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Progress {
    fn new(start: &ShipperStart) -> Self {
        let state =
            ProgressState { keep_from: start.keep_from, ack_slot: start.fence_slot + 1, ..ProgressState::default() };
        Self {
            state: Mutex::new(state),
            changed: Condvar::new(),
            clock: start.clock.clone(),
            shared: std::sync::OnceLock::new(),
            remote: start.remote.clone(),
            epoch: start.epoch,
            waiting: AtomicUsize::new(0),
        }
    }

    /// Fails with `Fenced`, and stops the store, if a newer epoch than this writer's claimed the mirror: a
    /// writer that finds its job's state gone asks this first, since a takeover, not a loss, explains it.
    pub(crate) fn refuse_if_superseded(&self) -> Result<()> {
        let newest = list_manifest_names(&self.remote)?.last().map_or(0, |n| n.epoch);
        if newest <= self.epoch {
            return Ok(());
        }
        let message = format!(
            "epoch {newest} claimed the mirror at {} after this writer (epoch {}): this writer is fenced; stop it",
            self.remote.describe(self.remote.layout.prefix()),
            self.epoch
        );
        if let Some(shared) = self.shared.get() {
            shared.fence(message.clone());
        }
        Err(Error::fenced(message))
    }

    /// Makes a mirror failure stop the store at once, not only at its next write.
    pub(crate) fn attach(&self, shared: Arc<Shared>) {
        let _ = self.shared.set(shared);
    }

    fn lock(&self) -> MutexGuard<'_, ProgressState> {
        // A panicking holder leaves plain counters behind; they stay meaningful.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, ProgressState>) -> MutexGuard<'a, ProgressState> {
        // A timeout, so that a bound on the clock is re-read even when nothing lands.
        match self.changed.wait_timeout(guard, std::time::Duration::from_millis(20)) {
            Ok((g, _)) => g,
            Err(e) => e.into_inner().0,
        }
    }

    /// How far the mirror is behind.
    pub(crate) fn lag(&self) -> MirrorLag {
        let state = self.lock();
        let now = self.clock.now_ms();
        MirrorLag {
            groups: state.queued.len() as u64,
            records: state.queued.iter().map(|q| q.records).sum(),
            oldest_ms: state.queued.front().map_or(0, |q| now.saturating_sub(q.at_ms)),
        }
    }

    fn check(state: &ProgressState) -> Result<()> {
        state.failure.as_ref().map_or(Ok(()), |f| Err(f.error()))
    }

    /// Waits until every group handed over so far is in the mirror (or the mirror failed).
    pub(crate) fn wait_all(&self) -> Result<()> {
        let _waiting = Waiting::new(&self.waiting);
        let mut state = self.lock();
        loop {
            Self::check(&state)?;
            if state.queued.is_empty() {
                return Ok(());
            }
            state = self.wait(state);
        }
    }

    /// Waits until the cut group `ticket` is in the mirror; the slot of the segment it ended.
    fn wait_cut(&self, ticket: u64) -> Result<u64> {
        let mut state = self.lock();
        loop {
            Self::check(&state)?;
            if let Some(slot) = state.cuts.remove(&ticket) {
                return Ok(slot);
            }
            state = self.wait(state);
        }
    }

    fn wait_room(&self, mode: MirrorMode) -> Result<()> {
        let (groups_max, lag_ms_max) = match mode {
            MirrorMode::Asynchronous { lag_batches_max, lag_ms_max } => (lag_batches_max.max(1) as usize, lag_ms_max),
            // Every kind: the writer no longer waits for a synchronous group itself, so all of them queue.
            MirrorMode::Synchronous => (MIRROR_QUEUED_GROUPS_MAX, u64::MAX),
        };
        let mut state = self.lock();
        // Counted only once blocked: a writer with room must not cut the uploader's linger short.
        let mut waiting = None;
        loop {
            Self::check(&state)?;
            let now = self.clock.now_ms();
            let full = state.queued.len() >= groups_max;
            let old = state.queued.front().is_some_and(|q| now.saturating_sub(q.at_ms) >= lag_ms_max);
            if !full && !old {
                return Ok(());
            }
            waiting.get_or_insert_with(|| Waiting::new(&self.waiting));
            state = self.wait(state);
        }
    }

    fn push(&self, ticket: u64, records: u64) {
        let at_ms = self.clock.now_ms();
        self.lock().queued.push_back(Queued { ticket, records, at_ms });
    }

    /// Runs `done` once the group `ticket` is in the mirror, or with the failure that stopped it.
    fn on_mirrored(&self, ticket: u64, done: Mirrored) {
        let mut state = self.lock();
        let now = match &state.failure {
            Some(failure) => Some(Err(failure.error())),
            None if state.mirrored >= ticket => Some(Ok(())),
            None => None,
        };
        match now {
            Some(result) => {
                drop(state);
                done(result);
            }
            None => {
                debug_assert!(state.deferred.back().is_none_or(|(t, _)| *t <= ticket), "deferred out of order");
                state.deferred.push_back((ticket, done));
            }
        }
    }

    /// Takes the deferred acknowledgements that are due: those the mirror now holds, or all once it failed.
    fn due(&self, state: &mut ProgressState) -> Vec<Mirrored> {
        let mut due = Vec::new();
        while let Some((ticket, _)) = state.deferred.front()
            && (state.failure.is_some() || *ticket <= state.mirrored)
        {
            if let Some((_, done)) = state.deferred.pop_front() {
                due.push(done);
            }
        }
        due
    }

    /// A durable barrier acks once every group up to `ticket` is in the mirror: the uploader stops lingering on
    /// them.
    fn hurry(&self, ticket: u64) {
        let mut state = self.lock();
        state.hurry_until = state.hurry_until.max(ticket);
    }

    /// Whether somebody waits for everything handed over so far: a caller blocked on the uploader, or a barrier.
    fn hurried(&self) -> bool {
        if self.waiting.load(Ordering::Acquire) > 0 {
            return true;
        }
        let state = self.lock();
        state.hurry_until > state.mirrored
    }

    /// The segment at `slot`, holding every group up to `ticket`, is in the mirror. It is acknowledged once
    /// every slot below it landed too: a group is in the mirror only when a reader, which stops at the first
    /// absent slot, finds it.
    fn landed(&self, ticket: u64, slot: u64, cut: bool) {
        let mut state = self.lock();
        debug_assert!(slot >= state.ack_slot, "slot {slot} landed twice");
        state.landed_ahead.insert(slot, Landing { ticket, cut });
        loop {
            let slot = state.ack_slot;
            let Some(landing) = state.landed_ahead.remove(&slot) else { break };
            debug_assert!(
                state.queued.front().is_some_and(|q| q.ticket <= landing.ticket),
                "landed a group not queued"
            );
            while state.queued.front().is_some_and(|q| q.ticket <= landing.ticket) {
                state.queued.pop_front();
            }
            state.mirrored = landing.ticket;
            if landing.cut {
                state.cuts.insert(landing.ticket, slot);
            }
            state.ack_slot += 1;
        }
        let due = self.due(&mut state);
        // After a failure nothing more is acknowledged, even what landed: the store has stopped.
        let result = state.failure.as_ref().map_or(Ok(()), |f| Err(f.error()));
        drop(state);
        self.changed.notify_all();
        for done in due {
            done(result.clone());
        }
    }

    /// `slot` holds a stopped writer's void and none of this writer's segments: the next one is acknowledged
    /// after it. Only while nothing of this writer's is in flight.
    fn skip_void(&self, slot: u64) {
        let mut state = self.lock();
        debug_assert!(state.ack_slot == slot && state.landed_ahead.is_empty(), "a void skipped with puts in flight");
        state.ack_slot = slot + 1;
    }

    /// Whether a segment may be put in `slot` with at most `depth` of this writer's slots in flight (true once
    /// the mirror failed, so that nothing waits for room that will never come).
    fn has_room(&self, slot: u64, depth: u64) -> bool {
        let state = self.lock();
        state.failure.is_some() || slot < state.ack_slot + depth
    }

    fn fail(&self, failure: Failure) {
        let mut state = self.lock();
        if state.failure.is_none() {
            tracing::error!(message = %failure.message, fenced = failure.fenced, "sinkpoint mirror stopped");
            if let Some(shared) = self.shared.get() {
                if failure.fenced {
                    shared.fence(failure.message.clone());
                } else {
                    shared.poison(failure.message.clone());
                }
            }
            state.failure = Some(failure);
        }
        let due = self.due(&mut state);
        let error = state.failure.as_ref().map(Failure::error);
        drop(state);
        self.changed.notify_all();
        for done in due {
            done(Err(error.clone().unwrap_or_else(|| Error::bug("a failure without its error"))));
        }
    }

    fn failed(&self) -> bool {
        self.lock().failure.is_some()
    }

    fn set_keep_from(&self, seq: u64) {
        let mut state = self.lock();
        state.keep_from = state.keep_from.max(seq);
    }

    fn keep_from(&self) -> u64 {
        self.lock().keep_from
    }
}

/// What a put of a segment found.
#[derive(Debug, PartialEq, Eq)]
enum Put {
    Landed,
    /// The slot holds a stopped writer's void (a lower epoch, where `voids` allows one): the segment goes in the
    /// next slot.
    Void,
}

/// Puts one segment and says whether this writer may go on: a slot taken by an equal or higher epoch fences it;
/// one taken by a lower epoch is a void if `voids` (the slot is below the first one voids cannot reach) and an
/// altered mirror otherwise.
fn put_segment(
    remote: &Remote,
    slot: u64,
    bytes: &Bytes,
    epoch: Epoch,
    voids: bool,
) -> std::result::Result<Put, Failure> {
    let path = remote.layout.wal(slot);
    let place = remote.describe(&path);
    match remote.put_settled(&path, bytes) {
        Ok(Settled::Landed) => Ok(Put::Landed),
        Ok(Settled::Taken(found)) => match decode_segment(&found, slot, &place) {
            Ok(other) if other.header.epoch < epoch && voids => {
                tracing::info!(slot, epoch = other.header.epoch, "sinkpoint mirror: skipped a stopped writer's void");
                Ok(Put::Void)
            }
            Ok(other) if other.header.epoch >= epoch => Err(Failure {
                fenced: true,
                message: format!(
                    "{place} is taken by epoch {} (writer {:032x}): a newer writer has taken over, and this writer \
                     (epoch {epoch}) is fenced; its last group is not in the mirror",
                    other.header.epoch, other.header.writer_tag
                ),
            }),
            Ok(other) => Err(Failure {
                fenced: false,
                message: format!(
                    "{place} is taken by the lower epoch {} after this writer (epoch {epoch}) fenced it: the mirror \
                     was altered",
                    other.header.epoch
                ),
            }),
            Err(e) => Err(Failure { fenced: false, message: format!("{place} is taken by a damaged object: {e}") }),
        },
        Err(e) => Err(Failure::from_error(&e)),
    }
}

enum Maintenance {
    /// A snapshot of `txn`, the state right after the cut group `ticket` (`next_seq` is the next record's).
    Snapshot {
        ticket: u64,
        next_seq: u64,
        txn: Box<ReadTransaction>,
    },
    Tick,
}

/// The steps in which the uploader lingers, in milliseconds: how late it may notice a caller waiting for
/// everything.
const LINGER_STEP_MS: u64 = 2;

/// How often the uploader looks again for room to put while every slot it may use is in flight, in
/// milliseconds: a put takes tens of them, so the delay it adds is small, and groups keep joining the segment
/// meanwhile.
const ROOM_STEP_MS: u64 = 1;

/// A segment handed to a putter: its slot, its frames from `first_seq`, and the last group it holds.
struct SegmentPut {
    slot: u64,
    first_seq: u64,
    frames: Vec<Vec<u8>>,
    last_ticket: u64,
    cut: bool,
}

/// The uploader: slots in order, each segment holding every group queued when its put began (up to a cut,
/// [`MIRROR_TAIL_SEGMENT_BYTES_MAX`] and [`MIRROR_SEGMENT_FRAMES_MAX`]); up to [`MIRROR_SLOTS_IN_FLIGHT_MAX`]
/// slots in flight, put by as many putter threads, when the segment holds a group somebody waits for, one
/// otherwise (so what nobody waits for still folds into one put behind the one in flight).
///
/// Several puts in flight mean slot `s + 1` can land while slot `s` never does (this writer stopped). Nothing in
/// `s + 1` was acknowledged (acknowledgements go in slot order), a reader stops at `s`, and the takeover that
/// fences `s` makes `s + 1` a *void*: a lower epoch after a higher one, skipped by readers (`read::EpochFloor`).
/// A writer's first slots after its epoch began may therefore hold voids; it puts those one at a time and moves a
/// segment that meets one to the next slot.
struct Uploader {
    remote: Arc<Remote>,
    progress: Arc<Progress>,
    epoch: Epoch,
    writer_tag: u128,
    next_slot: u64,
    /// The first slot a stopped writer's void cannot reach: below it, one put at a time.
    voids_end: u64,
    /// The most slots in flight for a segment somebody waits for (`MirrorSettings::puts_in_flight_max`).
    depth: u64,
    /// A group taken from the queue that did not fit the last segment.
    carried: Option<Group>,
    /// How long a segment that ends with a group nobody waits for (an unsynced one, or any durable one under an
    /// asynchronous mirror) waits for the groups behind it. A group that is waited for ends the wait when it
    /// arrives, and so does a caller blocked on the uploader (`flush`, a synchronous mirror's durable barrier, a
    /// writer at the lag bound): nobody waits for the linger itself.
    linger_ms: u64,
    /// To the putter threads; `None` once the uploader is done.
    puts: Option<mpsc::Sender<SegmentPut>>,
    putters: Vec<JoinHandle<()>>,
}

impl Uploader {
    /// Starts the putter threads.
    fn start_putters(&mut self) -> Result<()> {
        let (tx, rx) = mpsc::channel::<SegmentPut>();
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..self.depth {
            let putter = Putter {
                remote: self.remote.clone(),
                progress: self.progress.clone(),
                epoch: self.epoch,
                writer_tag: self.writer_tag,
            };
            let rx = rx.clone();
            let thread =
                std::thread::Builder::new().name(format!("sinkpoint-mirror-put-{n}")).spawn(move || putter.run(&rx))?;
            self.putters.push(thread);
        }
        self.puts = Some(tx);
        Ok(())
    }

    fn run(mut self, groups: &mpsc::Receiver<Group>) {
        while let Some(first) = self.carried.take().or_else(|| groups.recv().ok()) {
            let batch = self.fill(first, groups);
            if self.progress.failed() {
                continue;
            }
            let put = segment_put(self.next_slot, batch);
            if put.slot < self.voids_end {
                self.put_among_voids(put);
            } else {
                self.next_slot += 1;
                if self.puts.as_ref().is_none_or(|tx| tx.send(put).is_err()) {
                    self.progress.fail(Failure { fenced: false, message: "the mirror's putters stopped".into() });
                }
            }
        }
        // The putters finish what they were handed.
        self.puts = None;
        for putter in self.putters.drain(..) {
            let _ = putter.join();
        }
    }

    /// Puts a segment below `voids_end`, where nothing else of this writer's is in flight: a void moves it to the
    /// next slot.
    fn put_among_voids(&mut self, mut put: SegmentPut) {
        loop {
            let voids = put.slot < self.voids_end;
            match encode_put(&self.remote, &put, self.epoch, self.writer_tag, voids) {
                Ok(Put::Landed) => {
                    self.next_slot = put.slot + 1;
                    self.progress.landed(put.last_ticket, put.slot, put.cut);
                    return;
                }
                Ok(Put::Void) => {
                    self.progress.skip_void(put.slot);
                    put.slot += 1;
                }
                Err(failure) => return self.progress.fail(failure),
            }
        }
    }

    /// Whether somebody waits for `batch` (or for the uploader): then it may go with others in flight, and not
    /// linger.
    fn urgent(&self, batch: &[Group]) -> bool {
        batch.iter().any(|g| !g.lingers) || self.progress.hurried()
    }

    /// `first` and every group queued behind it that fits one segment; if nobody waits for them, also the groups
    /// that arrive within the linger, up to the first one somebody waits for (a `SealWindow`'s durable seal under
    /// a synchronous mirror, a commit intent under either): one put for a window's seals, or for an asynchronous
    /// worker's stage calls and their commit, instead of one each. While the segment has no room to go (every slot
    /// it may use is in flight), the groups arriving meanwhile join it too.
    fn fill(&mut self, first: Group, groups: &mpsc::Receiver<Group>) -> Vec<Group> {
        let (mut bytes, mut frames) = (first.bytes(), first.frames.len());
        let mut batch = vec![first];
        let deadline_ms = self.progress.clock.now_ms().saturating_add(self.linger_ms);
        // Cleared when the linger ends, whatever the clock says (a manual clock never advances).
        let mut lingering = self.linger_ms > 0;
        while batch.last().is_some_and(|last| !last.cut) {
            let next = match groups.try_recv() {
                Ok(next) => next,
                Err(_) => {
                    let urgent = self.urgent(&batch);
                    let waited = if !urgent && lingering {
                        let next = self.linger(groups, deadline_ms);
                        lingering = next.is_some();
                        next
                    } else {
                        let depth = if urgent { self.depth } else { 1 };
                        if self.progress.has_room(self.next_slot, depth) {
                            break;
                        }
                        wait_step(groups)
                    };
                    match waited {
                        Some(next) => next,
                        None => continue,
                    }
                }
            };
            let fits = bytes + next.bytes() <= MIRROR_TAIL_SEGMENT_BYTES_MAX
                && frames + next.frames.len() <= MIRROR_SEGMENT_FRAMES_MAX as usize;
            if !fits {
                self.carried = Some(next);
                break;
            }
            bytes += next.bytes();
            frames += next.frames.len();
            batch.push(next);
        }
        batch
    }

    /// The next group if it arrives before `deadline_ms` (on the injected clock) and nobody blocks on the uploader
    /// meanwhile. Waits in steps of [`LINGER_STEP_MS`], at most `linger_ms` in all: a manual clock never
    /// advances, and a `flush` begun during the linger is seen within a step.
    fn linger(&self, groups: &mpsc::Receiver<Group>, deadline_ms: u64) -> Option<Group> {
        for _ in 0..self.linger_ms.div_ceil(LINGER_STEP_MS) {
            let left_ms = deadline_ms.saturating_sub(self.progress.clock.now_ms());
            if left_ms == 0 || self.progress.hurried() {
                break;
            }
            match groups.recv_timeout(Duration::from_millis(left_ms.min(LINGER_STEP_MS))) {
                Ok(next) => return Some(next),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        None
    }
}

/// Waits one step for room, taking a group that arrives meanwhile.
fn wait_step(groups: &mpsc::Receiver<Group>) -> Option<Group> {
    match groups.recv_timeout(Duration::from_millis(ROOM_STEP_MS)) {
        Ok(next) => Some(next),
        Err(mpsc::RecvTimeoutError::Timeout) => None,
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The writer is gone (a close): nothing more will join, but the segment still waits for its room.
            std::thread::sleep(Duration::from_millis(ROOM_STEP_MS));
            None
        }
    }
}

/// The segment of `batch` at `slot`.
fn segment_put(slot: u64, batch: Vec<Group>) -> SegmentPut {
    let first_seq = batch.first().map_or(0, |g| g.first_seq);
    let last_ticket = batch.last().map_or(0, |g| g.ticket);
    let cut = batch.last().is_some_and(|g| g.cut);
    let mut frames: Vec<Vec<u8>> = Vec::with_capacity(batch.iter().map(|g| g.frames.len()).sum());
    for group in batch {
        debug_assert_eq!(group.first_seq, first_seq + frames.len() as u64, "groups of a segment are dense");
        frames.extend(group.frames);
    }
    SegmentPut { slot, first_seq, frames, last_ticket, cut }
}

/// Encodes `put` for its slot and puts it.
fn encode_put(
    remote: &Remote,
    put: &SegmentPut,
    epoch: Epoch,
    writer_tag: u128,
    voids: bool,
) -> std::result::Result<Put, Failure> {
    let header =
        SegmentHeader { kind: SegmentKind::Group, slot: put.slot, epoch, writer_tag, first_seq: put.first_seq };
    let bytes = encode_segment(&header, &put.frames).map_err(|e| Failure::from_error(&e))?;
    put_segment(remote, put.slot, &Bytes::from(bytes), epoch, voids)
}

/// A putter thread: puts the segments the uploader hands it, one at a time, and reports each landing (the
/// progress acknowledges them in slot order).
struct Putter {
    remote: Arc<Remote>,
    progress: Arc<Progress>,
    epoch: Epoch,
    writer_tag: u128,
}

impl Putter {
    fn run(self, puts: &Mutex<mpsc::Receiver<SegmentPut>>) {
        loop {
            // One putter waits on the channel at a time; the others wait for the lock.
            let next = puts.lock().unwrap_or_else(|e| e.into_inner()).recv();
            let Ok(put) = next else { return };
            if self.progress.failed() {
                continue;
            }
            match encode_put(&self.remote, &put, self.epoch, self.writer_tag, false) {
                Ok(_) => self.progress.landed(put.last_ticket, put.slot, put.cut),
                Err(failure) => self.progress.fail(failure),
            }
        }
    }
}

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

/// An old range the newest manifest stopped referencing when `name` was written.
#[derive(Debug)]
struct Collect {
    created_ms: u64,
    first_slot: u64,
    name: ManifestName,
}

struct Maintainer {
    remote: Arc<Remote>,
    progress: Arc<Progress>,
    clock: Arc<dyn Clock>,
    gc_age_ms_min: u64,
    epoch: Epoch,
    writer_tag: u128,
    job: JobId,
    target: TargetIdentity,
    history: Vec<EpochOpen>,
    update: u32,
    pending: VecDeque<Collect>,
    /// False once a newer epoch's manifest was seen: deletes are then that writer's business.
    newest: bool,
    /// The largest snapshot object put (a chunk): below what every reader accepts.
    object_bytes_max: u64,
    /// Whether this writer has collected its predecessors' superseded manifests (once, on its first run).
    predecessors_collected: bool,
}

impl Maintainer {
    fn run(&mut self, job: Maintenance) {
        if let Maintenance::Snapshot { ticket, next_seq, txn } = job
            && let Err(e) = self.snapshot(ticket, next_seq, &txn)
        {
            // A failed snapshot only delays truncation; the next interval tries again.
            tracing::warn!(ticket, error = %e, "sinkpoint mirror snapshot failed");
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
    fn collect_predecessors(&mut self) -> Result<()> {
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

    fn snapshot(&mut self, ticket: u64, next_seq: u64, txn: &ReadTransaction) -> Result<()> {
        // Only a snapshot whose every earlier slot is in the mirror describes the mirror's history; the segment
        // that holds the cut group ends with it, so the snapshot stands for the state before the next slot.
        let slot = self.progress.wait_cut(ticket)? + 1;
        let header = SnapshotHeader { slot, next_seq, epoch: self.epoch, writer_tag: self.writer_tag };
        let remote = &self.remote;
        // Chunks 1… are put as they fill, chunk 0 last: no chunk over what a reader accepts is ever put, and
        // the manifest below references the snapshot only once all of it is there.
        let mut put_chunk = |chunk: u32, bytes: Vec<u8>| match remote
            .put_settled(&remote.layout.snapshot_chunk(slot, chunk), &Bytes::from(bytes))?
        {
            Settled::Landed => Ok(()),
            // Another writer began a snapshot of this slot; mixing its chunks with ours is not sound.
            Settled::Taken(_) => Err(Error::from(std::io::Error::other(format!(
                "{} was put by another writer; this snapshot is abandoned",
                remote.describe(&remote.layout.snapshot_chunk(slot, chunk))
            )))),
        };
        let bytes = Bytes::from(snapshot::build(txn, &header, self.object_bytes_max, &mut put_chunk)?);
        let path = self.remote.layout.snapshot(slot);
        if let Settled::Taken(found) = self.remote.put_settled(&path, &bytes)? {
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
        if let Settled::Taken(_) = self.remote.put_settled(&path, &Bytes::from(encode_manifest(&body)?))? {
            return Err(Error::corrupt(format!("{} was written by another writer", self.remote.describe(&path))));
        }
        self.progress.set_keep_from(next_seq);
        self.pending.push_back(Collect { created_ms, first_slot: slot, name });
        tracing::debug!(slot, next_seq, "sinkpoint mirror snapshot written");
        Ok(())
    }

    /// Deletes what the newest due manifest no longer references, once it is old enough, and only while this
    /// writer holds the newest epoch.
    fn collect_due(&mut self) -> Result<()> {
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
    fn superseded(&mut self, names: &[ManifestName]) -> bool {
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
