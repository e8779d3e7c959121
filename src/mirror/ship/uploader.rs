//! The uploader thread: assigns slots in order, batches the queued groups into segments and keeps up to
//! [`crate::limits::MIRROR_SLOTS_IN_FLIGHT_MAX`] segment puts in flight, acknowledging them in slot order.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;

use crate::create_once::Created;
use crate::error::Result;
use crate::limits::{
    MIRROR_LINGER_STEP_MS, MIRROR_ROOM_STEP_MS, MIRROR_SEGMENT_FRAMES_MAX, MIRROR_TAIL_SEGMENT_BYTES_MAX,
};
use crate::mirror::format::{SegmentHeader, SegmentKind, decode_segment, encode_segment};
use crate::mirror::remote::Remote;
use crate::types::Epoch;

use super::progress::{Failure, Group, Progress};
use super::putter::Putter;

/// What a put of a segment found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Put {
    Landed,
    /// The slot holds a stopped writer's void (a lower epoch, where `voids` allows one): the segment goes in the
    /// next slot.
    Void,
}

/// Puts one segment and says whether this writer may go on: a slot taken by an equal or higher epoch fences it;
/// one taken by a lower epoch is a void if `voids` (the slot is below the first one voids cannot reach) and an
/// altered mirror otherwise.
pub(super) fn put_segment(
    remote: &Remote,
    slot: u64,
    bytes: &Bytes,
    epoch: Epoch,
    voids: bool,
) -> std::result::Result<Put, Failure> {
    let path = remote.layout.wal(slot);
    let place = remote.describe(&path);
    match remote.put_settled(&path, bytes) {
        Ok(Created::Ours) => Ok(Put::Landed),
        Ok(Created::Taken(found)) => match decode_segment(&found, slot, &place) {
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

/// A segment handed to a putter: its slot, its frames from `first_seq`, and the last group it holds.
pub(super) struct SegmentPut {
    pub(super) slot: u64,
    pub(super) first_seq: u64,
    pub(super) frames: Vec<Vec<u8>>,
    pub(super) last_ticket: u64,
    pub(super) cut: bool,
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
pub(super) struct Uploader {
    pub(super) remote: Arc<Remote>,
    pub(super) progress: Arc<Progress>,
    pub(super) epoch: Epoch,
    pub(super) writer_tag: u128,
    pub(super) next_slot: u64,
    /// The first slot a stopped writer's void cannot reach: below it, one put at a time.
    pub(super) voids_end: u64,
    /// The most slots in flight for a segment somebody waits for (`MirrorSettings::puts_in_flight_max`).
    pub(super) depth: u64,
    /// A group taken from the queue that did not fit the last segment.
    pub(super) carried: Option<Group>,
    /// How long a segment that ends with a group nobody waits for (an unsynced one, or any durable one under an
    /// asynchronous mirror) waits for the groups behind it. A group that is waited for ends the wait when it
    /// arrives, and so does a caller blocked on the uploader (`flush`, a synchronous mirror's durable barrier, a
    /// writer at the lag bound): nobody waits for the linger itself.
    pub(super) linger_ms: u64,
    /// To the putter threads; `None` once the uploader is done.
    pub(super) puts: Option<mpsc::Sender<SegmentPut>>,
    pub(super) putters: Vec<JoinHandle<()>>,
}

impl Uploader {
    /// Starts the putter threads.
    pub(super) fn start_putters(&mut self) -> Result<()> {
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

    pub(super) fn run(mut self, groups: &mpsc::Receiver<Group>) {
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
    pub(super) fn put_among_voids(&mut self, mut put: SegmentPut) {
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
    pub(super) fn urgent(&self, batch: &[Group]) -> bool {
        batch.iter().any(|g| !g.lingers) || self.progress.hurried()
    }

    /// `first` and every group queued behind it that fits one segment; if nobody waits for them, also the groups
    /// that arrive within the linger, up to the first one somebody waits for (a `SealWindow`'s durable seal under
    /// a synchronous mirror, a commit intent under either): one put for a window's seals, or for an asynchronous
    /// worker's stage calls and their commit, instead of one each. While the segment has no room to go (every slot
    /// it may use is in flight), the groups arriving meanwhile join it too.
    pub(super) fn fill(&mut self, first: Group, groups: &mpsc::Receiver<Group>) -> Vec<Group> {
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
    /// meanwhile. Waits in steps of [`MIRROR_LINGER_STEP_MS`], at most `linger_ms` in all: a manual clock never
    /// advances, and a `flush` begun during the linger is seen within a step.
    pub(super) fn linger(&self, groups: &mpsc::Receiver<Group>, deadline_ms: u64) -> Option<Group> {
        for _ in 0..self.linger_ms.div_ceil(MIRROR_LINGER_STEP_MS) {
            let left_ms = deadline_ms.saturating_sub(self.progress.clock.now_ms());
            if left_ms == 0 || self.progress.hurried() {
                break;
            }
            match groups.recv_timeout(Duration::from_millis(left_ms.min(MIRROR_LINGER_STEP_MS))) {
                Ok(next) => return Some(next),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        None
    }
}

/// Waits one step for room, taking a group that arrives meanwhile.
pub(super) fn wait_step(groups: &mpsc::Receiver<Group>) -> Option<Group> {
    match groups.recv_timeout(Duration::from_millis(MIRROR_ROOM_STEP_MS)) {
        Ok(next) => Some(next),
        Err(mpsc::RecvTimeoutError::Timeout) => None,
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The writer is gone (a close): nothing more will join, but the segment still waits for its room.
            std::thread::sleep(Duration::from_millis(MIRROR_ROOM_STEP_MS));
            None
        }
    }
}

/// The segment of `batch` at `slot`.
pub(super) fn segment_put(slot: u64, batch: Vec<Group>) -> SegmentPut {
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
pub(super) fn encode_put(
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
