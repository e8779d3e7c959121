//! The checkpoint state machine: one closed enum and one pure transition function that holds all the
//! branching. The store gathers the facts a transition needs (the checkpoint's record, the parts it has, key
//! owners, the commit sequence), calls `transition`, and applies the `Step` it returns; nothing else
//! decides.
//!
//! ```text
//!           stage*            seal(parts)            begin_commit(key n)
//!  (absent) ──────► Staged ──────────────► Sealed ─────────────────────► Committing(n)
//!                   │   ▲ restart                                          │        │
//!             abort │   │ (new attempt)          target commit succeeded  │        │ target says:
//!                   ▼   │                        or probe: Committed(ids) ▼        ▼ outcome unknown
//!                  Aborted                                          Committed   CommitUnknown(n)
//!                                                                                  │ a probe or resolve
//!                                                                                  ▼ NotCommitted
//!                                                                               Committing(n), same key
//!
//!  Committing(n) / CommitUnknown(n) ──unbind(n)──► Sealed (the operator, or the committer on a foreign key n)
//! ```

use serde::{Deserialize, Serialize};

use crate::error::TransitionError;
use crate::limits::{COMMIT_RESULTS_MAX, LIST_PREVIEW_MAX};
use crate::types::{CheckpointId, Epoch};

/// The state of one checkpoint id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Debug)]
pub enum CheckpointState {
    /// Parts are being staged for the current attempt; its keys are not processed yet.
    Staged,
    /// All parts are in; its keys are processed; its write results wait for a commit.
    Sealed,
    /// Recorded under commit key `key`, durably, before the target was called.
    Committing {
        /// The commit key's number.
        key: u64,
    },
    /// The target's answer to commit key `key` is unknown; only a probe or an operator's resolve leaves this.
    CommitUnknown {
        /// The commit key's number.
        key: u64,
    },
    /// The target provably holds its write results (or it had none); its results are released.
    Committed {
        /// The commit key it landed under; `None` for a checkpoint without results, committed without a
        /// target commit.
        key: Option<u64>,
    },
    /// Dropped before sealing; its keys are not processed. `restart` begins a new attempt.
    Aborted,
}

impl CheckpointState {
    /// A small stable code for the state, used as the state-index key on disk.
    pub(crate) fn code(self) -> u8 {
        match self {
            CheckpointState::Staged => 0,
            CheckpointState::Sealed => 1,
            CheckpointState::Committing { .. } => 2,
            CheckpointState::CommitUnknown { .. } => 3,
            CheckpointState::Committed { .. } => 4,
            CheckpointState::Aborted => 5,
        }
    }

    /// Whether the checkpoint's source keys count as processed in this state.
    pub fn keys_processed(self) -> bool {
        match self {
            CheckpointState::Staged | CheckpointState::Aborted => false,
            CheckpointState::Sealed
            | CheckpointState::Committing { .. }
            | CheckpointState::CommitUnknown { .. }
            | CheckpointState::Committed { .. } => true,
        }
    }

    /// Whether the checkpoint's write results still wait for the target (Sealed, Committing, CommitUnknown).
    pub fn is_pending(self) -> bool {
        matches!(
            self,
            CheckpointState::Sealed | CheckpointState::Committing { .. } | CheckpointState::CommitUnknown { .. }
        )
    }
}

/// The operator's verdict in [`crate::Operator::resolve`], after checking the table by hand.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub enum Resolution {
    /// The key's commit is in the table with exactly the recorded checkpoints.
    Committed,
    /// The key's commit is not in the table and never will be: re-commit under the same key.
    NotCommitted,
}

/// A coarse filter for [`crate::Store::list`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum StateFilter {
    /// Staged checkpoints.
    Staged,
    /// Sealed checkpoints.
    Sealed,
    /// Committing checkpoints, any key.
    Committing,
    /// CommitUnknown checkpoints, any key.
    CommitUnknown,
    /// Committed checkpoints.
    Committed,
    /// Aborted checkpoints.
    Aborted,
}

impl StateFilter {
    /// Every filter, in state-code order.
    pub const ALL: [StateFilter; 6] = [
        StateFilter::Staged,
        StateFilter::Sealed,
        StateFilter::Committing,
        StateFilter::CommitUnknown,
        StateFilter::Committed,
        StateFilter::Aborted,
    ];

    /// The state's one name, as `sinkpoint list` and the docs spell it: `staged`, `sealed`, `committing`,
    /// `commit-unknown`, `committed`, `aborted`. [`Display`](std::fmt::Display) writes it and
    /// [`FromStr`](std::str::FromStr) reads it back (and also accepts `commit_unknown`, Python's spelling).
    pub fn name(self) -> &'static str {
        match self {
            StateFilter::Staged => "staged",
            StateFilter::Sealed => "sealed",
            StateFilter::Committing => "committing",
            StateFilter::CommitUnknown => "commit-unknown",
            StateFilter::Committed => "committed",
            StateFilter::Aborted => "aborted",
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            StateFilter::Staged => 0,
            StateFilter::Sealed => 1,
            StateFilter::Committing => 2,
            StateFilter::CommitUnknown => 3,
            StateFilter::Committed => 4,
            StateFilter::Aborted => 5,
        }
    }
}

impl From<CheckpointState> for StateFilter {
    /// The filter that matches `state` (its key, if any, dropped).
    fn from(state: CheckpointState) -> Self {
        match state {
            CheckpointState::Staged => StateFilter::Staged,
            CheckpointState::Sealed => StateFilter::Sealed,
            CheckpointState::Committing { .. } => StateFilter::Committing,
            CheckpointState::CommitUnknown { .. } => StateFilter::CommitUnknown,
            CheckpointState::Committed { .. } => StateFilter::Committed,
            CheckpointState::Aborted => StateFilter::Aborted,
        }
    }
}

impl std::fmt::Display for StateFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for StateFilter {
    type Err = ParseStateError;

    /// Reads a state's [name](StateFilter::name); `commit_unknown` (Python's spelling) is read as
    /// `commit-unknown`.
    fn from_str(name: &str) -> std::result::Result<Self, ParseStateError> {
        if name == "commit_unknown" {
            return Ok(StateFilter::CommitUnknown);
        }
        StateFilter::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| ParseStateError(name.to_owned()))
    }
}

/// A name that is not a state's, refused by [`StateFilter`]'s `FromStr`; its message lists the names.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ParseStateError(String);

impl std::fmt::Display for ParseStateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown state {:?}: one of ", self.0)?;
        for (i, filter) in StateFilter::ALL.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{filter}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ParseStateError {}

/// What the store keeps of one checkpoint.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct CheckpointRecord {
    /// Its state.
    pub state: CheckpointState,
    /// Its current attempt.
    pub attempt: u32,
    /// The epoch that began (or first staged into) the current attempt.
    pub epoch: Epoch,
    /// The sealed part count; 0 before sealing.
    pub parts: u32,
    /// The write results of the sealed attempt, counted at the seal. A Staged record's count is not kept up
    /// to date (a stage into an existing checkpoint does not rewrite its record; see docs/FORMATS.md, "Fresh
    /// parts"): it is 0, or a running count left by store format 1. Readers count a Staged checkpoint's parts.
    pub results: u32,
}

/// How an offered part compares with what is stored under the same (id, attempt, part).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PartMatch {
    /// Nothing is stored there.
    Absent,
    /// The same bytes are stored there.
    Same,
    /// Other bytes are stored there.
    Different,
    /// The part's results were released (committed); it cannot be compared.
    Released,
}

/// The sizes a stage call is judged by: the offered part's stored bytes, what the attempt's parts already take
/// (gathered only for a new part of the current attempt, 0 otherwise), and the limit on their sum.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct StageBytes {
    pub part: u64,
    pub attempt: u64,
    pub max: u64,
}

/// One event offered to a checkpoint, with the facts the store gathered for it. A seal's `results` is the write
/// results of the parts present, counted (it only means something when they are complete).
#[derive(Clone, Debug)]
pub(crate) enum Event<'a> {
    Stage { attempt: u32, part: u32, existing: PartMatch, bytes: StageBytes },
    Seal { parts: u32, present: &'a [u32], key_conflict: Option<(String, CheckpointId)>, results: u32 },
    Restart,
    Abort,
    ForceAbort,
    BeginCommit { key: u64 },
    CommitEmpty,
    MarkCommitted { key: u64 },
    MarkUnknown { key: u64 },
    MarkNotCommitted { key: u64 },
    Unbind { key: u64 },
}

/// What applying an event does to the stored state, beyond replacing the checkpoint's record.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Effect {
    /// Nothing changes and nothing is written (a retried call after a lost ack).
    None,
    /// Store the offered part.
    InsertPart,
    /// Drop every part of the given attempt and return their write results.
    DropParts { attempt: u32 },
    /// Mark the current attempt's source keys processed, owned by this checkpoint.
    ClaimKeys,
    /// Un-process the current attempt's source keys and drop its parts (returning their results).
    UnclaimKeysDropParts { attempt: u32 },
    /// Release the write results of the current attempt (the keys stay processed).
    ReleaseResults,
}

/// The outcome of a legal transition.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Step {
    /// The checkpoint's record after the event; equal to the old one for a no-op.
    pub next: CheckpointRecord,
    /// What else to write.
    pub effect: Effect,
}

/// The one transition function: given a checkpoint's record (or none), the writer's epoch and an event with
/// its facts, returns the next record and the effect to apply, or the typed reason it is illegal. It reads and
/// writes nothing. Each event has its own function below, one arm per row of the state table
/// (docs/ARCHITECTURE.md, "States").
pub(crate) fn transition(
    id: &CheckpointId,
    current: Option<&CheckpointRecord>,
    epoch: Epoch,
    event: &Event<'_>,
) -> Result<Step, TransitionError> {
    let Some(cur) = current else {
        return first_event(id, epoch, event);
    };
    match event {
        Event::Stage { attempt, part, existing, bytes } => stage(id, cur, epoch, *attempt, *part, *existing, *bytes),
        Event::Seal { parts, present, key_conflict, results } => {
            seal(id, cur, *parts, present, key_conflict.as_ref(), *results)
        }
        Event::Restart => restart(id, cur, epoch),
        Event::Abort => abort(id, cur),
        Event::ForceAbort => force_abort(id, cur),
        Event::BeginCommit { key } => begin_commit(id, cur, *key),
        Event::CommitEmpty => commit_empty(id, cur),
        Event::MarkCommitted { key } => mark_committed(cur, *key),
        Event::MarkUnknown { key } => mark_unknown(cur, *key),
        Event::MarkNotCommitted { key } => mark_not_committed(cur, *key),
        Event::Unbind { key } => unbind(cur, *key),
    }
}

impl CheckpointRecord {
    /// The step that changes nothing (a retried call after a lost ack).
    fn unchanged(&self) -> Step {
        Step { next: self.clone(), effect: Effect::None }
    }

    /// The step to `state`, keeping attempt, epoch, parts and results, with `effect`.
    fn moved(&self, state: CheckpointState, effect: Effect) -> Step {
        Step { next: CheckpointRecord { state, ..self.clone() }, effect }
    }
}

/// An event on a checkpoint the store has no record of: only a first stage of attempt 0 creates one.
fn first_event(id: &CheckpointId, epoch: Epoch, event: &Event<'_>) -> Result<Step, TransitionError> {
    match event {
        Event::Stage { attempt: 0, bytes, .. } => {
            check_attempt_bytes(id, 0, bytes.part, bytes.max)?;
            Ok(Step {
                next: CheckpointRecord { state: CheckpointState::Staged, attempt: 0, epoch, parts: 0, results: 0 },
                effect: Effect::InsertPart,
            })
        }
        Event::Stage { attempt, .. } => {
            Err(TransitionError::AttemptAhead { id: id.clone(), offered: *attempt, current: 0 })
        }
        _ => Err(TransitionError::NotFound { id: id.clone() }),
    }
}

/// A stage into an existing checkpoint: only into the current attempt of a Staged one of this epoch.
fn stage(
    id: &CheckpointId,
    cur: &CheckpointRecord,
    epoch: Epoch,
    attempt: u32,
    part: u32,
    existing: PartMatch,
    bytes: StageBytes,
) -> Result<Step, TransitionError> {
    match cur.state {
        CheckpointState::Staged => {
            if cur.epoch < epoch {
                return Err(TransitionError::Orphaned { id: id.clone(), staged_epoch: cur.epoch, epoch });
            }
            if attempt < cur.attempt {
                return Err(TransitionError::StaleAttempt { id: id.clone(), offered: attempt, current: cur.attempt });
            }
            if attempt > cur.attempt {
                return Err(TransitionError::AttemptAhead { id: id.clone(), offered: attempt, current: cur.attempt });
            }
            match existing {
                PartMatch::Absent => {
                    check_attempt_bytes(id, attempt, bytes.attempt.saturating_add(bytes.part), bytes.max)?;
                    // The record stays as it is: a Staged record carries no running count, so a stage into an
                    // existing checkpoint writes its part and its log frame, not its record.
                    Ok(Step { next: cur.clone(), effect: Effect::InsertPart })
                }
                PartMatch::Same => Ok(cur.unchanged()),
                PartMatch::Different | PartMatch::Released => {
                    Err(TransitionError::PartConflict { id: id.clone(), attempt, part })
                }
            }
        }
        CheckpointState::Aborted => Err(TransitionError::Aborted { id: id.clone() }),
        state => Err(TransitionError::AlreadySealed {
            id: id.clone(),
            state,
            part_matches: match existing {
                PartMatch::Same => Some(true),
                PartMatch::Absent | PartMatch::Different => Some(false),
                PartMatch::Released => None,
            },
        }),
    }
}

/// A seal. An orphaned checkpoint that is complete may be sealed: its parts are all durable. A seal of a sealed
/// checkpoint with the same part count is a retry.
fn seal(
    id: &CheckpointId,
    cur: &CheckpointRecord,
    parts: u32,
    present: &[u32],
    key_conflict: Option<&(String, CheckpointId)>,
    results: u32,
) -> Result<Step, TransitionError> {
    match cur.state {
        CheckpointState::Staged => {
            let missing: Vec<u32> = (0..parts).filter(|p| present.binary_search(p).is_err()).collect();
            if !missing.is_empty() {
                return Err(TransitionError::MissingParts {
                    id: id.clone(),
                    attempt: cur.attempt,
                    expected: parts,
                    count: u32::try_from(missing.len()).unwrap_or(u32::MAX),
                    first: missing.into_iter().take(LIST_PREVIEW_MAX).collect(),
                });
            }
            let extra: Vec<u32> = present.iter().copied().filter(|p| *p >= parts).take(LIST_PREVIEW_MAX).collect();
            if !extra.is_empty() {
                return Err(TransitionError::UnexpectedParts {
                    id: id.clone(),
                    attempt: cur.attempt,
                    expected: parts,
                    first: extra,
                });
            }
            if let Some((key, owner)) = key_conflict {
                return Err(TransitionError::KeyConflict { key: key.clone(), id: id.clone(), owner: owner.clone() });
            }
            Ok(Step {
                next: CheckpointRecord { state: CheckpointState::Sealed, parts, results, ..cur.clone() },
                effect: Effect::ClaimKeys,
            })
        }
        CheckpointState::Aborted => Err(TransitionError::Aborted { id: id.clone() }),
        _ if parts == cur.parts => Ok(cur.unchanged()),
        _ => Err(TransitionError::SealMismatch { id: id.clone(), sealed: cur.parts, offered: parts }),
    }
}

/// A restart: only before sealing (of a Staged or Aborted checkpoint), into the next attempt.
fn restart(id: &CheckpointId, cur: &CheckpointRecord, epoch: Epoch) -> Result<Step, TransitionError> {
    match cur.state {
        CheckpointState::Staged | CheckpointState::Aborted => Ok(Step {
            next: CheckpointRecord {
                state: CheckpointState::Staged,
                attempt: cur.attempt + 1,
                epoch,
                parts: 0,
                results: 0,
            },
            effect: Effect::DropParts { attempt: cur.attempt },
        }),
        state => Err(TransitionError::AlreadySealed { id: id.clone(), state, part_matches: None }),
    }
}

/// A writer's abort: only before sealing.
fn abort(id: &CheckpointId, cur: &CheckpointRecord) -> Result<Step, TransitionError> {
    match cur.state {
        CheckpointState::Staged => Ok(Step {
            next: CheckpointRecord { state: CheckpointState::Aborted, parts: 0, results: 0, ..cur.clone() },
            effect: Effect::DropParts { attempt: cur.attempt },
        }),
        CheckpointState::Aborted => Ok(cur.unchanged()),
        CheckpointState::Sealed => Err(TransitionError::SealedCannotAbort { id: id.clone() }),
        state => Err(TransitionError::AlreadySealed { id: id.clone(), state, part_matches: None }),
    }
}

/// An operator's force-abort: only of a Sealed checkpoint, whose keys it un-processes.
fn force_abort(id: &CheckpointId, cur: &CheckpointRecord) -> Result<Step, TransitionError> {
    match cur.state {
        CheckpointState::Sealed => Ok(Step {
            next: CheckpointRecord { state: CheckpointState::Aborted, parts: 0, results: 0, ..cur.clone() },
            effect: Effect::UnclaimKeysDropParts { attempt: cur.attempt },
        }),
        state => Err(TransitionError::NotSealed { id: id.clone(), state }),
    }
}

/// Binding a Sealed checkpoint with results to commit key `key`.
fn begin_commit(id: &CheckpointId, cur: &CheckpointRecord, key: u64) -> Result<Step, TransitionError> {
    match cur.state {
        CheckpointState::Sealed if cur.results == 0 => Err(TransitionError::ResultCount {
            id: id.clone(),
            results: 0,
            what: "a checkpoint without results is committed empty, not under a key",
        }),
        CheckpointState::Sealed => Ok(cur.moved(CheckpointState::Committing { key }, Effect::None)),
        state => Err(TransitionError::NotSealed { id: id.clone(), state }),
    }
}

/// Committing a Sealed checkpoint without results, under no key.
fn commit_empty(id: &CheckpointId, cur: &CheckpointRecord) -> Result<Step, TransitionError> {
    match cur.state {
        CheckpointState::Sealed if cur.results != 0 => Err(TransitionError::ResultCount {
            id: id.clone(),
            results: cur.results,
            what: "a checkpoint with results must be committed under a key",
        }),
        CheckpointState::Sealed => Ok(cur.moved(CheckpointState::Committed { key: None }, Effect::None)),
        CheckpointState::Committed { key: None } => Ok(cur.unchanged()),
        state => Err(TransitionError::NotSealed { id: id.clone(), state }),
    }
}

/// The key's commit is provably in the table: its results are released.
fn mark_committed(cur: &CheckpointRecord, k: u64) -> Result<Step, TransitionError> {
    match cur.state {
        CheckpointState::Committing { key } | CheckpointState::CommitUnknown { key } if key == k => {
            Ok(cur.moved(CheckpointState::Committed { key: Some(key) }, Effect::ReleaseResults))
        }
        CheckpointState::Committed { key: Some(key) } if key == k => Ok(cur.unchanged()),
        state => Err(TransitionError::CommitState { key: k, state, what: "marking this checkpoint" }),
    }
}

/// The key's commit has an unknown outcome.
fn mark_unknown(cur: &CheckpointRecord, k: u64) -> Result<Step, TransitionError> {
    match cur.state {
        CheckpointState::Committing { key } if key == k => {
            Ok(cur.moved(CheckpointState::CommitUnknown { key }, Effect::None))
        }
        CheckpointState::CommitUnknown { key } if key == k => Ok(cur.unchanged()),
        state => Err(TransitionError::CommitState { key: k, state, what: "marking this checkpoint" }),
    }
}

/// A probe (or an operator) found the key's commit not in the table: it is re-committed under the same key.
fn mark_not_committed(cur: &CheckpointRecord, k: u64) -> Result<Step, TransitionError> {
    match cur.state {
        CheckpointState::CommitUnknown { key } if key == k => {
            Ok(cur.moved(CheckpointState::Committing { key }, Effect::None))
        }
        CheckpointState::Committing { key } if key == k => Ok(cur.unchanged()),
        state => Err(TransitionError::CommitState { key: k, state, what: "marking this checkpoint" }),
    }
}

/// Back to Sealed with the same attempt, parts and processed keys: nothing is lost, and the next key begun binds
/// it again.
fn unbind(cur: &CheckpointRecord, k: u64) -> Result<Step, TransitionError> {
    match cur.state {
        CheckpointState::Committing { key } | CheckpointState::CommitUnknown { key } if key == k => {
            Ok(cur.moved(CheckpointState::Sealed, Effect::None))
        }
        state => Err(TransitionError::CommitState { key: k, state, what: "unbinding this checkpoint" }),
    }
}

/// What the committer does with a worker's seal found in generation `generation` of its checkpoint's claim
/// (shared staging: `claims/<h>` is generation 0, each release of the claim adds one), decided by
/// [`adoption`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Adoption {
    /// Adopt it as attempt 0 (`stage_and_seal`): the store does not hold the checkpoint, or holds it Staged
    /// at attempt 0 from an adoption a crash cut short.
    First,
    /// Adopt it as the next attempt (restart, stage and seal in one call): the store's earlier seal of the
    /// checkpoint was released, and this is the seal that came after.
    Next,
    /// The store holds it adopted (Sealed or later): nothing to do.
    Already,
    /// The store is done with this seal (it adopted it and an operator force-aborted it, or an operator
    /// restarted the checkpoint past it): release the claim, so the input is read again, unless the store holds
    /// one of its keys processed by another checkpoint (a seal refused at adoption, whose key is owned: the
    /// claim stays, and so does `is_processed`). A Staged record is aborted first (`abort_first`). The claim's
    /// next generation is the store's attempt plus one, which [`Adoption::Next`] adopts.
    Retire {
        /// Whether the store's record is Staged and is aborted first.
        abort_first: bool,
    },
    /// A generation the store's record cannot account for (the store is not the one that adopted its earlier
    /// seals): left as it is, reported, nothing written.
    Unaccounted,
}

/// The one decision of shared staging's adoption: given the store's record of a checkpoint (its state and
/// attempt, `None` if absent) and the generation of its claim that holds a worker's seal, what to do. A seal of
/// generation `g` is only ever adopted into an attempt at or above `g` (generation 0 into 0; a later one as
/// the attempt after the store's), and a claim is released with the next generation set to the store's
/// attempt plus one, so a seal the store adopted and then dropped is always at or below the store's attempt and
/// is never adopted again, while the one created after its release is one above it. Pure.
pub(crate) fn adoption(record: Option<(CheckpointState, u32)>, generation: u32) -> Adoption {
    use CheckpointState as S;
    match record {
        None if generation == 0 => Adoption::First,
        None => Adoption::Unaccounted,
        Some((S::Staged, 0)) if generation == 0 => Adoption::First,
        // Staged past attempt 0: an operator restarted it. A seal adopted before went into an attempt below this
        // one; one of this generation or the next came after the restart.
        Some((S::Staged, attempt)) if generation < attempt => Adoption::Retire { abort_first: true },
        Some((S::Staged, attempt)) if generation - attempt <= 1 => Adoption::Next,
        Some((S::Aborted, attempt)) if generation <= attempt => Adoption::Retire { abort_first: false },
        Some((S::Aborted, attempt)) if generation - attempt == 1 => Adoption::Next,
        Some((S::Staged | S::Aborted, _)) => Adoption::Unaccounted,
        Some((S::Sealed | S::Committing { .. } | S::CommitUnknown { .. } | S::Committed { .. }, _)) => {
            Adoption::Already
        }
    }
}

/// Refuses a new part that would bring its attempt to `bytes`, over `bytes_max`
/// ([`crate::limits::CHECKPOINT_BYTES_MAX`]): an attempt past what a driver can hold could be neither committed nor
/// dropped. Pure.
fn check_attempt_bytes(id: &CheckpointId, attempt: u32, bytes: u64, bytes_max: u64) -> Result<(), TransitionError> {
    if bytes > bytes_max {
        return Err(TransitionError::CheckpointTooLarge { id: id.clone(), attempt, bytes, limit: bytes_max });
    }
    Ok(())
}

/// The in-flight state of the job's commit sequence, kept in the store's meta.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct CommitSequence {
    /// The next key to begin.
    pub next_key: u64,
    /// The key begun but not yet committed, if any.
    pub in_flight: Option<u64>,
}

/// Checks that `key` may begin now: strictly the next key, with no key in flight. Pure.
pub(crate) fn check_begin(seq: &CommitSequence, key: u64) -> Result<(), TransitionError> {
    if let Some(in_flight) = seq.in_flight {
        return Err(TransitionError::CommitInFlight { key: in_flight });
    }
    if key != seq.next_key {
        return Err(TransitionError::CommitOutOfSequence { offered: key, expected: seq.next_key });
    }
    Ok(())
}

/// An event on a commit key as a whole, with the facts it is judged on. Each checkpoint the key covers then
/// goes through [`transition`] with the matching checkpoint-level [`Event`]; both must accept it.
#[derive(Clone, Debug)]
pub(crate) enum CommitEvent<'a> {
    /// Bind key `key` to `ids` (sorted), whose current attempts hold `results` write results in all.
    Begin { key: u64, ids: &'a [CheckpointId], results: u64 },
    /// Move key `key`'s record, now in state `current` (`None`: never begun), to `to`: a mark by the committer
    /// (committed, unknown, not committed) or an operator's verdict.
    Move { key: u64, current: Option<CheckpointState>, to: CheckpointState },
    /// Un-bind key `key`, whose record is in state `current` (`None`: never begun).
    Unbind { key: u64, current: Option<CheckpointState> },
    /// Record the job's end; `finished` says it is already recorded, `unfinished` is the first checkpoint whose
    /// results still wait for the target, if any.
    Finish { finished: bool, unfinished: Option<(CheckpointId, CheckpointState)> },
}

/// What [`commit_transition`] decided for an accepted event.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CommitStep {
    /// Apply it (and log it).
    Apply,
    /// Already done: a retried call, which changes nothing.
    Unchanged,
}

/// The commit-level half of the state machine: every rule about commit keys as a whole (sequence, empty or
/// duplicate ids, size, moving a committed key, un-binding, finishing) in one pure function, beside
/// [`transition`]. Refusals are typed; the caller writes nothing on one.
pub(crate) fn commit_transition(seq: &CommitSequence, event: &CommitEvent<'_>) -> Result<CommitStep, TransitionError> {
    match event {
        CommitEvent::Begin { key, ids, results } => {
            check_begin(seq, *key)?;
            if ids.is_empty() {
                return Err(TransitionError::NoCheckpoints);
            }
            if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
                return Err(TransitionError::DuplicateId { id: w[1].clone() });
            }
            // A commit covers whole checkpoints, so one checkpoint over the limit may go alone.
            let max = COMMIT_RESULTS_MAX as u64;
            if ids.len() > 1 && *results > max {
                return Err(TransitionError::CommitTooLarge { results: *results, max });
            }
            Ok(CommitStep::Apply)
        }
        CommitEvent::Move { key, current, to } => {
            let current = current.ok_or(TransitionError::UnknownCommitKey { key: *key })?;
            if current == *to {
                return Ok(CommitStep::Unchanged);
            }
            if matches!(current, CheckpointState::Committed { .. }) {
                return Err(TransitionError::CommitState { key: *key, state: current, what: "moving a committed key" });
            }
            Ok(CommitStep::Apply)
        }
        CommitEvent::Unbind { key, current } => {
            let current = current.ok_or(TransitionError::UnknownCommitKey { key: *key })?;
            if seq.in_flight != Some(*key) {
                return Err(TransitionError::CommitState { key: *key, state: current, what: "unbinding a key" });
            }
            Ok(CommitStep::Apply)
        }
        CommitEvent::Finish { finished: true, .. } => Ok(CommitStep::Unchanged),
        CommitEvent::Finish { finished: false, unfinished } => {
            if let Some(key) = seq.in_flight {
                return Err(TransitionError::CommitInFlight { key });
            }
            match unfinished {
                Some((id, state)) => Err(TransitionError::Unfinished { id: id.clone(), state: *state }),
                None => Ok(CommitStep::Apply),
            }
        }
    }
}

/// Checks an operator's verdict `resolution` on key `key`, whose record is in state `current` (`None`: never
/// begun). Pure. A Committed verdict is taken only by a key whose outcome is unknown (CommitUnknown): a Committing
/// key is settled by running the job, whose committer probes the table (and records CommitUnknown when the probe
/// cannot tell), and a wrong Committed verdict loses every row the key holds. A NotCommitted verdict is taken from
/// Committing too: a wrong one costs nothing, since the table refuses the re-send and the probe decides. The same
/// verdict again on a key it already settled changes nothing; a verdict on a committed key is refused.
pub(crate) fn check_verdict(
    key: u64,
    current: Option<CheckpointState>,
    resolution: Resolution,
) -> Result<CommitStep, TransitionError> {
    use CheckpointState as S;
    let current = current.ok_or(TransitionError::UnknownCommitKey { key })?;
    match (current, resolution) {
        (S::CommitUnknown { .. }, _) | (S::Committing { .. }, Resolution::NotCommitted) => Ok(CommitStep::Apply),
        // A key's record is Sealed while an earlier NotCommitted verdict waits for its re-send.
        (S::Committed { .. }, Resolution::Committed) | (S::Sealed, Resolution::NotCommitted) => {
            Ok(CommitStep::Unchanged)
        }
        (S::Sealed, Resolution::Committed) => Err(TransitionError::CommitState {
            key,
            state: current,
            what: "a committed verdict (a not-committed verdict on the key waits for its re-send: run the job)",
        }),
        (S::Committing { .. }, Resolution::Committed) => Err(TransitionError::CommitState {
            key,
            state: current,
            what: "a committed verdict (only a key whose outcome is unknown takes one; a key being committed is \
                   settled by running the job, whose committer probes the table)",
        }),
        (state, _) => Err(TransitionError::CommitState { key, state, what: "an operator's verdict" }),
    }
}

#[cfg(test)]
mod tests;
