//! A worker's seals in flight: [`SealWindow`] queues [`Store::stage_and_seal`] calls and lets the worker go on
//! to its next input while their group commits run, waiting only when too many are unacknowledged.
//!
//! Why: a worker that awaits each seal does its data file's fsync and the store's fsync one after the other, and
//! with one worker nothing is waiting to share a group commit, so every input costs a store fsync. A window
//! overlaps the seals with the next input's write, and makes one fsync serve several inputs: its seals are
//! committed without an fsync, and every `seals_in_flight_max / 2`-th (and a barrier at `flush`) durably, which
//! makes every commit before it durable too (redb persists non-durable commits with the next durable one).
//!
//! What it does not change: a seal counts only once durable. The window reports a seal [`Landed`] only after a
//! durable commit at or after it was acknowledged. A seal queued but not reported when the process died is
//! either sealed or absent, never half: its input is redone, its data file an orphan, exactly as for a crash
//! just before an awaited `stage_and_seal`. A seal the window has not reported may be visible to
//! `is_processed` and to a committer of the same store before it is durable; that is safe because the
//! committer's `begin_commit` is a durable commit, which makes every seal it covers durable first.

use std::collections::VecDeque;

use crate::error::{Error, InvalidInput, Result};
use crate::limits::SEAL_WINDOW_SEALS_MAX;
use crate::types::{CheckpointId, StagePart};
use crate::wal::writer::{CallDurability, Submitted};

use super::{StageOutcome, Store};

/// How a [`SealWindow`] behaves: settings only (the store it seals into is passed to [`SealWindow::new`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct SealWindowSettings {
    /// The most seals queued and not yet reported durable; the next call waits for the oldest to be. Every
    /// `seals_in_flight_max / 2`-th seal is committed durably (every one for 1 or 2), so a worker is not held
    /// up by an fsync as long as it covers the seals of the half-window before. At most
    /// [`SEAL_WINDOW_SEALS_MAX`].
    pub seals_in_flight_max: usize,
}

impl Default for SealWindowSettings {
    /// 16 seals in flight, one fsync per 8 (docs/BENCHMARKS.md, "The job shape, the backlog, shared
    /// staging"); the memory of 16 calls' keys and results.
    fn default() -> Self {
        Self { seals_in_flight_max: 16 }
    }
}

/// One call a window has queued: a seal, or the durable barrier `flush` adds behind non-durable seals.
struct InFlight {
    /// The seal's checkpoint and part count; `None` for a barrier.
    seal: Option<(CheckpointId, u32)>,
    /// Whether its group commit is durable (a barrier always is).
    durable: bool,
    submitted: Submitted,
}

/// A checkpoint whose windowed seal is durable, as an awaited [`Store::stage_and_seal`] would have made it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Landed {
    /// The checkpoint sealed.
    pub id: CheckpointId,
    /// Whether its part was written now or was already there (a retry).
    pub outcome: StageOutcome,
}

/// [`Store::stage_and_seal`] calls queued in order, at most
/// [`seals_in_flight_max`](SealWindowSettings::seals_in_flight_max) not yet reported durable. Each call returns
/// once the writer thread holds it; [`SealWindow::flush`] makes every one durable and must be awaited before the
/// worker reports its inputs done. The acknowledgement rules of [`Store::seal`] apply to what `flush` reports
/// (asynchronous mirror mode: after a later [`Store::flush`]).
///
/// An error is returned by the call that waited for the seal that failed, which may be a later call's: a
/// [`crate::TransitionError`] names its checkpoint, and store-wide failures (`Io`, `Poisoned`, `Fenced`) concern
/// every seal in flight. After an error, treat every input not reported [`Landed`] as not processed; a rerun's
/// [`Store::is_processed`] tells which were. Dropping the window leaves its queued seals to be committed
/// unobserved, durable once something commits durably (the committer's first step does) or the store closes.
/// Both calls are cancel-safe: a call dropped while it waits leaves the seal it waited for in the window.
///
/// ```
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// use sinkpoint::{Attempt, CheckpointId, Format, JobId, Part, SealWindow, SealWindowSettings, StagePart, Store,
///     TargetIdentity, WriteResult};
/// let dir = tempfile::tempdir()?;
/// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("t")?).path(dir.path().join("s.redb")).open().await?;
/// let mut window = SealWindow::new(&store, SealWindowSettings::default())?;
/// for i in 0..3 {
///     // ... write input i's data file, then queue its seal and go on to the next input:
///     let result = WriteResult::new(Format::Parquet, format!("part-{i}.parquet").into_bytes())?;
///     let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![format!("in/{i}").into_bytes()]).results(vec![result]);
///     window.stage_and_seal(&CheckpointId::new(format!("input-{i}"))?, part, 1).await?;
/// }
/// let landed = window.flush().await?; // every seal durable before the worker reports its inputs done
/// assert_eq!(landed.len(), 3);
/// assert!(store.is_processed(b"in/2")?);
/// # Ok::<(), Box<dyn std::error::Error>>(()) })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SealWindow<'s> {
    store: &'s Store,
    settings: SealWindowSettings,
    /// Queued calls whose answers have not been read, oldest first.
    in_flight: VecDeque<InFlight>,
    /// Seals answered but not yet covered by a durable commit the window saw answered.
    answered: Vec<Landed>,
    /// Seals known durable, reported by the next `flush` that returns `Ok`.
    landed: Vec<Landed>,
    /// Seals queued non-durably since the last durable one.
    since_durable: usize,
}

impl std::fmt::Debug for SealWindow<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let in_flight: Vec<&CheckpointId> =
            self.in_flight.iter().filter_map(|c| c.seal.as_ref().map(|s| &s.0)).collect();
        f.debug_struct("SealWindow")
            .field("settings", &self.settings)
            .field("in_flight", &in_flight)
            .field("answered", &self.answered.len())
            .field("landed", &self.landed.len())
            .finish_non_exhaustive()
    }
}

impl<'s> SealWindow<'s> {
    /// A window over `store`; refuses a `seals_in_flight_max` of 0 or above [`SEAL_WINDOW_SEALS_MAX`].
    pub fn new(store: &'s Store, settings: SealWindowSettings) -> Result<Self> {
        let value = settings.seals_in_flight_max;
        if value == 0 || value > SEAL_WINDOW_SEALS_MAX {
            let (value, max) = (value as u64, SEAL_WINDOW_SEALS_MAX as u64);
            return Err(InvalidInput::Range { what: "seals in flight", value, min: 1, max }.into());
        }
        let in_flight = VecDeque::with_capacity(value + 1);
        Ok(Self { store, settings, in_flight, answered: Vec::new(), landed: Vec::new(), since_durable: 0 })
    }

    /// Queues the stage and seal of checkpoint `id` (as [`Store::stage_and_seal`]) and returns once the writer
    /// holds it, first waiting for the oldest seal to be durable if the window is full. The call is checked
    /// before anything is queued: an invalid input is refused here, with nothing queued.
    pub async fn stage_and_seal(&mut self, id: &CheckpointId, part: StagePart, parts: u32) -> Result<()> {
        while self.in_flight() >= self.settings.seals_in_flight_max {
            self.wait_oldest_durable().await?;
        }
        let durable = self.since_durable + 1 >= (self.settings.seals_in_flight_max / 2).max(1);
        let durability = if durable { CallDurability::Immediate } else { CallDurability::None };
        let submitted = self.store.submit_stage_and_seal(id, part, parts, durability).await?;
        self.since_durable = if durable { 0 } else { self.since_durable + 1 };
        self.in_flight.push_back(InFlight { seal: Some((id.clone(), parts)), durable, submitted });
        debug_assert!(self.in_flight() <= self.settings.seals_in_flight_max);
        Ok(())
    }

    /// How many seals are queued or answered and not yet known durable.
    pub fn in_flight(&self) -> usize {
        self.in_flight.iter().filter(|c| c.seal.is_some()).count() + self.answered.len()
    }

    /// Makes every queued seal durable (one barrier fsync if the last one was queued non-durably) and returns
    /// the checkpoints known durable since the last `flush` that returned `Ok`, in the order they were queued.
    /// An error takes the failed seal out of the window and keeps the report of those that landed: `flush`
    /// again to learn the fate of the rest (it ends, one seal per error).
    pub async fn flush(&mut self) -> Result<Vec<Landed>> {
        if self.since_durable > 0 {
            self.push_barrier().await?;
        }
        while self.in_flight() > 0 {
            self.wait_oldest_durable().await?;
        }
        Ok(std::mem::take(&mut self.landed))
    }

    /// Queues a durable barrier behind the seals queued non-durably. If it cannot be queued (the store failed),
    /// the seals answered and not known durable are given up: their fate is what a rerun's `is_processed` says.
    async fn push_barrier(&mut self) -> Result<()> {
        self.since_durable = 0;
        match self.store.writer.submit_barrier().await {
            Ok(submitted) => {
                self.in_flight.push_back(InFlight { seal: None, durable: true, submitted });
                Ok(())
            }
            Err(e) => {
                self.answered.clear();
                Err(e)
            }
        }
    }

    /// Reads answers in queue order up to and including the first durable call, whose answer means everything
    /// answered before it is durable (a barrier is queued if the queue ends first). Cancel-safe: a wait dropped
    /// before an answer came leaves its call queued; an answer read is never lost (kept as answered, or
    /// returned as the error).
    async fn wait_oldest_durable(&mut self) -> Result<()> {
        loop {
            if self.in_flight.is_empty() {
                if self.answered.is_empty() {
                    return Ok(());
                }
                self.push_barrier().await?;
            }
            let Some(oldest) = self.in_flight.front_mut() else {
                return Err(Error::bug("a seal window's barrier left the queue before it was awaited"));
            };
            let answer = (&mut oldest.submitted).await;
            let InFlight { seal, durable, .. } = self
                .in_flight
                .pop_front()
                .ok_or_else(|| Error::bug("the oldest call left the window while awaited"))?;
            let answer = match answer {
                Ok(answer) => answer,
                Err(e) => {
                    // A store-wide failure: nothing answered since the last durable answer is known durable.
                    self.answered.clear();
                    return Err(e);
                }
            };
            if durable {
                // Its group commit was durable (refused or not): so is every commit before it.
                self.landed.append(&mut self.answered);
            }
            if let Some((id, parts)) = seal {
                let outcome = self.store.stage_and_seal_outcome(&id, parts, answer).await?;
                let landed = Landed { id, outcome };
                if durable { self.landed.push(landed) } else { self.answered.push(landed) }
            }
            if durable {
                return Ok(());
            }
        }
    }
}
