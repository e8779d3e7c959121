//! What the mirror has acknowledged: the groups handed to the uploader, the slots landed in order, the replies
//! waiting for them, and why the mirror stopped, if it did.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::limits::MIRROR_QUEUED_GROUPS_MAX;
use crate::mirror::read::list_manifest_names;
use crate::mirror::remote::Remote;
use crate::mirror::{MirrorLag, MirrorMode};
use crate::types::Epoch;
use crate::wal::writer::{Mirrored, Shared};

use super::{Schedule, ShipperStart, Since, SnapshotSize};

/// Why the mirror stopped taking segments.
#[derive(Clone, Debug)]
pub(super) struct Failure {
    pub(super) fenced: bool,
    pub(super) message: String,
}

impl Failure {
    pub(super) fn error(&self) -> Error {
        if self.fenced { Error::fenced(self.message.clone()) } else { Error::poisoned(self.message.clone()) }
    }

    pub(super) fn from_error(e: &Error) -> Self {
        Failure { fenced: e.kind() == crate::ErrorKind::Fenced, message: e.message() }
    }
}

/// A committed group handed to the uploader.
pub(super) struct Group {
    pub(super) ticket: u64,
    pub(super) first_seq: u64,
    pub(super) frames: Vec<Vec<u8>>,
    /// A snapshot of the state right after this group is due: the segment holding it ends with it.
    pub(super) cut: bool,
    /// Nobody waits for this group to be in the mirror (it was committed without an fsync, or durably under an
    /// asynchronous mirror): the uploader may hold it for the groups that follow.
    pub(super) lingers: bool,
}

impl Group {
    pub(super) fn bytes(&self) -> usize {
        self.frames.iter().map(Vec::len).sum()
    }
}

#[derive(Debug)]
pub(super) struct Queued {
    pub(super) ticket: u64,
    pub(super) records: u64,
    pub(super) at_ms: u64,
}

#[derive(Default)]
pub(super) struct ProgressState {
    /// Groups handed to the uploader and not yet in the mirror, in ticket order.
    pub(super) queued: VecDeque<Queued>,
    /// The highest ticket in the mirror (every lower one is there too); 0 before the first.
    pub(super) mirrored: u64,
    /// The slot of each segment that ended with a cut group, by that group's ticket, until the maintenance
    /// thread takes it for its snapshot.
    pub(super) cuts: BTreeMap<u64, u64>,
    pub(super) failure: Option<Failure>,
    /// The lowest sequence number the local log must keep.
    pub(super) keep_from: u64,
    /// The lowest slot of this writer's that has not landed: segments are acknowledged in slot order.
    pub(super) ack_slot: u64,
    /// Segments that landed above `ack_slot`, by slot, until the ones below them land.
    pub(super) landed_ahead: BTreeMap<u64, Landing>,
    /// The writer's batches waiting to be acked, by the ticket each waits for (in ticket order).
    pub(super) deferred: VecDeque<(u64, Mirrored)>,
    /// A durable barrier waits for every group up to this ticket, unsynced ones included: until they are in the
    /// mirror, the uploader does not linger on them.
    pub(super) hurry_until: u64,
    /// The newest snapshot this writer wrote (or, before its first, the estimate the open made of the state).
    pub(super) snapshot: SnapshotSize,
    /// A snapshot was asked of the maintenance thread and is not written (or abandoned) yet.
    pub(super) snapshot_in_flight: bool,
}

/// A segment that landed: the last group it holds, and whether that group was cut.
#[derive(Clone, Copy, Debug)]
pub(super) struct Landing {
    pub(super) ticket: u64,
    pub(super) cut: bool,
}

/// The upload progress, shared by the writer thread, the uploader, the maintenance thread and the store's
/// `flush` and `mirror_lag`.
pub(crate) struct Progress {
    pub(super) state: Mutex<ProgressState>,
    pub(super) changed: Condvar,
    pub(super) clock: Arc<dyn Clock>,
    /// The store's shared state: a failure found by the uploader stops every call, reads included.
    pub(super) shared: std::sync::OnceLock<Arc<Shared>>,
    /// The mirror and this writer's epoch, to ask whether a newer epoch claimed it.
    pub(super) remote: Arc<Remote>,
    pub(super) epoch: Epoch,
    /// Callers blocked on the uploader now (in `wait_all`, or a writer waiting for room under the lag bounds):
    /// while there is one, the uploader puts what it holds instead of lingering.
    pub(super) waiting: AtomicUsize,
}

/// Counts a caller blocked on the uploader for as long as it waits.
pub(super) struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    pub(super) fn new(count: &'a AtomicUsize) -> Self {
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
    pub(super) fn new(start: &ShipperStart) -> Self {
        let state = ProgressState {
            keep_from: start.keep_from,
            ack_slot: start.fence_slot + 1,
            snapshot: start.state_size,
            ..ProgressState::default()
        };
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

    pub(super) fn lock(&self) -> MutexGuard<'_, ProgressState> {
        // A panicking holder leaves plain counters behind; they stay meaningful.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn wait<'a>(&self, guard: MutexGuard<'a, ProgressState>) -> MutexGuard<'a, ProgressState> {
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

    pub(super) fn check(state: &ProgressState) -> Result<()> {
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
    pub(super) fn wait_cut(&self, ticket: u64) -> Result<u64> {
        let mut state = self.lock();
        loop {
            Self::check(&state)?;
            if let Some(slot) = state.cuts.remove(&ticket) {
                return Ok(slot);
            }
            state = self.wait(state);
        }
    }

    pub(super) fn wait_room(&self, mode: MirrorMode) -> Result<()> {
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

    pub(super) fn push(&self, ticket: u64, records: u64) {
        let at_ms = self.clock.now_ms();
        self.lock().queued.push_back(Queued { ticket, records, at_ms });
    }

    /// Runs `done` once the group `ticket` is in the mirror, or with the failure that stopped it.
    pub(super) fn on_mirrored(&self, ticket: u64, done: Mirrored) {
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
    pub(super) fn due(&self, state: &mut ProgressState) -> Vec<Mirrored> {
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
    pub(super) fn hurry(&self, ticket: u64) {
        let mut state = self.lock();
        state.hurry_until = state.hurry_until.max(ticket);
    }

    /// Whether somebody waits for everything handed over so far: a caller blocked on the uploader, or a barrier.
    pub(super) fn hurried(&self) -> bool {
        if self.waiting.load(Ordering::Acquire) > 0 {
            return true;
        }
        let state = self.lock();
        state.hurry_until > state.mirrored
    }

    /// The segment at `slot`, holding every group up to `ticket`, is in the mirror. It is acknowledged once
    /// every slot below it landed too: a group is in the mirror only when a reader, which stops at the first
    /// absent slot, finds it.
    pub(super) fn landed(&self, ticket: u64, slot: u64, cut: bool) {
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
    pub(super) fn skip_void(&self, slot: u64) {
        let mut state = self.lock();
        debug_assert!(state.ack_slot == slot && state.landed_ahead.is_empty(), "a void skipped with puts in flight");
        state.ack_slot = slot + 1;
    }

    /// Whether a segment may be put in `slot` with at most `depth` of this writer's slots in flight (true once
    /// the mirror failed, so that nothing waits for room that will never come).
    pub(super) fn has_room(&self, slot: u64, depth: u64) -> bool {
        let state = self.lock();
        state.failure.is_some() || slot < state.ack_slot + depth
    }

    pub(super) fn fail(&self, failure: Failure) {
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

    pub(super) fn failed(&self) -> bool {
        self.lock().failure.is_some()
    }

    /// The maintenance thread is done with the snapshot it was asked for: `written` is its size, or `None` when
    /// it was abandoned.
    pub(super) fn snapshot_done(&self, written: Option<SnapshotSize>) {
        let mut state = self.lock();
        state.snapshot_in_flight = false;
        if let Some(size) = written {
            state.snapshot = size;
        }
    }

    /// Whether a snapshot is due after the log `since` the last one; if it is, it is in flight from now on.
    pub(super) fn take_snapshot_due(&self, schedule: &Schedule, since: Since) -> bool {
        let mut state = self.lock();
        let due = schedule.due(since, state.snapshot, state.snapshot_in_flight);
        state.snapshot_in_flight |= due;
        due
    }

    pub(super) fn set_keep_from(&self, seq: u64) {
        let mut state = self.lock();
        state.keep_from = state.keep_from.max(seq);
    }

    pub(super) fn keep_from(&self) -> u64 {
        self.lock().keep_from
    }
}
