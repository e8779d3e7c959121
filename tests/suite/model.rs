//! Proves that the real `Store` behaves exactly like a small reference model (plain structs: checkpoints, their
//! parts, key owners, the commit sequence) over random sequences of every operation, including clean and crash
//! reopens: every answer, every refusal (the same `TransitionError`, with nothing written) and every read agree.
//!
//! Runs on the non-fsyncing `CrashBackend`, as four shards (`model::the_store_matches_the_model::shard_N_of_4`)
//! that the test harness runs in parallel. `SINKPOINT_CASES` sets the case count (default 1,000, split over the
//! shards) and `PROPTEST_RNG_SEED` the base seed (shard N starts from the base plus N - 1); both are printed at
//! the start of each shard, and the same two variables replay a run.

use crate::common::sharded;

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::{Config as ProptestConfig, RngSeed};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};
use sinkpoint::testkit::RawProtocol;
use sinkpoint::testkit::{self, CrashBackend, Shard};
use sinkpoint::{Attempt, Part as PartIndex, StagePart};
use sinkpoint::{
    CheckpointId, CheckpointInfo, CheckpointState, CommitInfo, Error, ErrorKind, Format, JobId, PendingCheckpoint,
    Resolution, StageOutcome, StateFilter, Store, TargetIdentity, TransitionError, WriteResult,
};

const IDS: [&str; 4] = ["a", "b", "c", "d"];
const KEYS: [&[u8]; 5] = [b"k0", b"k1", b"k2", b"k3", b"k4"];
const REASON: &str = "checked the table by hand";
const TRANSITIONS_MAX: usize = 50;

fn cid(s: &str) -> CheckpointId {
    CheckpointId::new(s).unwrap()
}

fn results_alphabet() -> Vec<WriteResult> {
    vec![
        WriteResult::new(Format::Parquet, b"r0".to_vec()).unwrap(),
        WriteResult::new(Format::Lance, b"r1".to_vec()).unwrap(),
        WriteResult::new(Format::Other("x".into()), b"r2".to_vec()).unwrap(),
        WriteResult::new(Format::Delta, b"r3".to_vec()).unwrap(),
    ]
}

// ---------------------------------------------------------------------------------------------------------------
// The reference model.

/// The model's record of a commit key: like the store's, its state is [`COMMIT_AWAITS_RECOMMIT`] while an
/// operator's NotCommitted verdict waits for its re-commit.
#[derive(Clone, Debug)]
struct ModelCommit {
    ids: Vec<CheckpointId>,
    target_version: Option<u64>,
    final_commit: bool,
    epoch: u64,
    state: CheckpointState,
}

/// The model's marker of an awaited re-commit (the checkpoints themselves are Committing).
const COMMIT_AWAITS_RECOMMIT: CheckpointState = CheckpointState::Sealed;

/// What [`CommitInfo`] shows of a commit key, as one comparable value.
type CommitView = (Vec<CheckpointId>, Option<u64>, bool, u64, CheckpointState, bool);

fn view(c: &CommitInfo) -> CommitView {
    (c.ids.clone(), c.prepared_version, c.final_commit, c.epoch, c.state, c.awaits_recommit)
}

impl ModelCommit {
    fn view(&self, key: u64) -> CommitView {
        let awaits = self.state == COMMIT_AWAITS_RECOMMIT;
        let state = if awaits { CheckpointState::Committing { key } } else { self.state };
        (self.ids.clone(), self.target_version, self.final_commit, self.epoch, state, awaits)
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Part {
    keys: Vec<Vec<u8>>,
    results: Vec<WriteResult>,
}

#[derive(Clone, Debug)]
struct Cp {
    state: CheckpointState,
    attempt: u32,
    epoch: u64,
    parts: u32,
    results: u32,
    /// The parts of the current attempt (dropped by restart and abort, released by a keyed commit).
    staged: BTreeMap<u32, Part>,
}

impl Cp {
    fn results(&self) -> Vec<WriteResult> {
        self.staged.values().flat_map(|p| p.results.clone()).collect()
    }
}

/// What the last operation should have answered.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Start,
    Staged(StageOutcome),
    Unit,
    Dropped(Vec<WriteResult>),
    Refused(TransitionError),
    Invalid,
    Reopened,
}

#[derive(Clone, Debug)]
struct Model {
    epoch: u64,
    cps: BTreeMap<CheckpointId, Cp>,
    owners: BTreeMap<Vec<u8>, CheckpointId>,
    commits: BTreeMap<u64, ModelCommit>,
    next_key: u64,
    in_flight: Option<u64>,
    finished: bool,
    /// Frames in the local log: Create, then one per Open and per accepted record that changed something (or was
    /// an operator's).
    frames: usize,
    orphans: Vec<CheckpointId>,
    last: Outcome,
}

#[derive(Clone, Debug)]
enum Op {
    Stage { id: CheckpointId, attempt: u32, part: u32, keys: Vec<Vec<u8>>, results: Vec<WriteResult> },
    Seal { id: CheckpointId, parts: u32 },
    Restart { id: CheckpointId },
    Abort { id: CheckpointId },
    ForceAbort { ids: Vec<CheckpointId>, reason: String },
    BeginCommit { key: u64, ids: Vec<CheckpointId>, target_version: Option<u64>, final_commit: bool },
    CommitEmpty { ids: Vec<CheckpointId> },
    MarkCommitted { key: u64 },
    MarkUnknown { key: u64 },
    MarkNotCommitted { key: u64 },
    Resolve { key: u64, resolution: Resolution, reason: String },
    Reopen,
    CrashReopen,
}

type Verdict = Result<Outcome, Outcome>;

fn refuse(e: TransitionError) -> Verdict {
    Err(Outcome::Refused(e))
}

/// The boundary checks on a list of ids: not empty, no duplicates (reported in sorted order).
fn sorted_ids(ids: &[CheckpointId]) -> Result<Vec<CheckpointId>, Outcome> {
    if ids.is_empty() {
        return Err(Outcome::Refused(TransitionError::NoCheckpoints));
    }
    let mut sorted = ids.to_vec();
    sorted.sort();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(Outcome::Refused(TransitionError::DuplicateId { id: w[0].clone() }));
    }
    Ok(sorted)
}

impl Model {
    fn new() -> Self {
        Model {
            epoch: 1,
            cps: BTreeMap::new(),
            owners: BTreeMap::new(),
            commits: BTreeMap::new(),
            next_key: 0,
            in_flight: None,
            finished: false,
            frames: 2,
            orphans: Vec::new(),
            last: Outcome::Start,
        }
    }

    fn info(&self, id: &CheckpointId) -> Option<CheckpointInfo> {
        self.cps.get(id).map(|c| CheckpointInfo {
            id: id.clone(),
            state: c.state,
            attempt: Attempt::new(c.attempt),
            epoch: c.epoch,
            parts: c.parts,
            results: c.results,
        })
    }

    /// Applies `op`; on a refusal nothing changes.
    fn step(&mut self, op: &Op) -> Verdict {
        use CheckpointState as S;
        match op {
            Op::Stage { id, attempt, part, keys, results } => {
                let offered = Part { keys: keys.clone(), results: results.clone() };
                let count = u32::try_from(results.len()).unwrap();
                let Some(cp) = self.cps.get_mut(id) else {
                    if *attempt != 0 {
                        return refuse(TransitionError::AttemptAhead { id: id.clone(), offered: *attempt, current: 0 });
                    }
                    let staged = BTreeMap::from([(*part, offered)]);
                    let cp = Cp { state: S::Staged, attempt: 0, epoch: self.epoch, parts: 0, results: count, staged };
                    self.cps.insert(id.clone(), cp);
                    self.frames += 1;
                    return Ok(Outcome::Staged(StageOutcome::Staged));
                };
                match cp.state {
                    S::Staged => {
                        if cp.epoch < self.epoch {
                            return refuse(TransitionError::Orphaned {
                                id: id.clone(),
                                staged_epoch: cp.epoch,
                                epoch: self.epoch,
                            });
                        }
                        if *attempt < cp.attempt {
                            return refuse(TransitionError::StaleAttempt {
                                id: id.clone(),
                                offered: *attempt,
                                current: cp.attempt,
                            });
                        }
                        if *attempt > cp.attempt {
                            return refuse(TransitionError::AttemptAhead {
                                id: id.clone(),
                                offered: *attempt,
                                current: cp.attempt,
                            });
                        }
                        match cp.staged.get(part) {
                            Some(p) if *p == offered => Ok(Outcome::Staged(StageOutcome::AlreadyStaged)),
                            Some(_) => {
                                refuse(TransitionError::PartConflict { id: id.clone(), attempt: *attempt, part: *part })
                            }
                            None => {
                                cp.staged.insert(*part, offered);
                                cp.results += count;
                                self.frames += 1;
                                Ok(Outcome::Staged(StageOutcome::Staged))
                            }
                        }
                    }
                    S::Aborted => refuse(TransitionError::Aborted { id: id.clone() }),
                    S::Committed { .. } => {
                        refuse(TransitionError::AlreadySealed { id: id.clone(), state: cp.state, part_matches: None })
                    }
                    S::Sealed | S::Committing { .. } | S::CommitUnknown { .. } => {
                        // The offered part is "the one sealed" only if it is the same attempt, part and bytes.
                        let same = *attempt == cp.attempt && cp.staged.get(part) == Some(&offered);
                        refuse(TransitionError::AlreadySealed {
                            id: id.clone(),
                            state: cp.state,
                            part_matches: Some(same),
                        })
                    }
                }
            }
            Op::Seal { id, parts } => {
                if *parts == 0 || *parts > sinkpoint::limits::SEAL_PARTS_MAX {
                    return Err(Outcome::Invalid);
                }
                let Some(cp) = self.cps.get(id) else { return refuse(TransitionError::NotFound { id: id.clone() }) };
                match cp.state {
                    S::Staged => {
                        let missing: Vec<u32> = (0..*parts).filter(|p| !cp.staged.contains_key(p)).collect();
                        if !missing.is_empty() {
                            return refuse(TransitionError::MissingParts {
                                id: id.clone(),
                                attempt: cp.attempt,
                                expected: *parts,
                                count: u32::try_from(missing.len()).unwrap(),
                                first: missing.into_iter().take(16).collect(),
                            });
                        }
                        let extra: Vec<u32> = cp.staged.keys().copied().filter(|p| p >= parts).take(16).collect();
                        if !extra.is_empty() {
                            return refuse(TransitionError::UnexpectedParts {
                                id: id.clone(),
                                attempt: cp.attempt,
                                expected: *parts,
                                first: extra,
                            });
                        }
                        for key in cp.staged.values().flat_map(|p| &p.keys) {
                            if let Some(owner) = self.owners.get(key)
                                && owner != id
                            {
                                return refuse(TransitionError::KeyConflict {
                                    key: String::from_utf8_lossy(key).into_owned(),
                                    id: id.clone(),
                                    owner: owner.clone(),
                                });
                            }
                        }
                        let keys: Vec<Vec<u8>> = cp.staged.values().flat_map(|p| p.keys.clone()).collect();
                        for key in keys {
                            self.owners.insert(key, id.clone());
                        }
                        let cp = self.cps.get_mut(id).unwrap();
                        cp.state = S::Sealed;
                        cp.parts = *parts;
                        self.frames += 1;
                        Ok(Outcome::Unit)
                    }
                    S::Aborted => refuse(TransitionError::Aborted { id: id.clone() }),
                    _ if cp.parts == *parts => Ok(Outcome::Unit),
                    _ => refuse(TransitionError::SealMismatch { id: id.clone(), sealed: cp.parts, offered: *parts }),
                }
            }
            Op::Restart { id } => {
                let epoch = self.epoch;
                let Some(cp) = self.cps.get_mut(id) else {
                    return refuse(TransitionError::NotFound { id: id.clone() });
                };
                match cp.state {
                    S::Staged | S::Aborted => {
                        let dropped = cp.results();
                        *cp = Cp {
                            state: S::Staged,
                            attempt: cp.attempt + 1,
                            epoch,
                            parts: 0,
                            results: 0,
                            staged: BTreeMap::new(),
                        };
                        self.frames += 1;
                        Ok(Outcome::Dropped(dropped))
                    }
                    state => refuse(TransitionError::AlreadySealed { id: id.clone(), state, part_matches: None }),
                }
            }
            Op::Abort { id } => {
                let Some(cp) = self.cps.get_mut(id) else {
                    return refuse(TransitionError::NotFound { id: id.clone() });
                };
                match cp.state {
                    S::Staged => {
                        let dropped = cp.results();
                        cp.state = S::Aborted;
                        cp.parts = 0;
                        cp.results = 0;
                        cp.staged.clear();
                        self.frames += 1;
                        Ok(Outcome::Dropped(dropped))
                    }
                    S::Aborted => Ok(Outcome::Dropped(Vec::new())),
                    S::Sealed => refuse(TransitionError::SealedCannotAbort { id: id.clone() }),
                    state => refuse(TransitionError::AlreadySealed { id: id.clone(), state, part_matches: None }),
                }
            }
            Op::ForceAbort { ids, reason } => {
                if reason.is_empty() {
                    return Err(Outcome::Invalid);
                }
                let ids = sorted_ids(ids)?;
                for id in &ids {
                    match self.cps.get(id) {
                        None => return refuse(TransitionError::NotFound { id: id.clone() }),
                        Some(cp) if cp.state != S::Sealed => {
                            return refuse(TransitionError::NotSealed { id: id.clone(), state: cp.state });
                        }
                        Some(_) => {}
                    }
                }
                let mut dropped = Vec::new();
                for id in &ids {
                    let cp = self.cps.get_mut(id).unwrap();
                    for key in cp.staged.values().flat_map(|p| &p.keys) {
                        if self.owners.get(key) == Some(id) {
                            self.owners.remove(key);
                        }
                    }
                    dropped.extend(cp.results());
                    cp.state = S::Aborted;
                    cp.parts = 0;
                    cp.results = 0;
                    cp.staged.clear();
                }
                self.frames += 1;
                Ok(Outcome::Dropped(dropped))
            }
            Op::BeginCommit { key, ids, target_version, final_commit } => {
                let ids = sorted_ids(ids)?;
                if let Some(k) = self.in_flight {
                    return refuse(TransitionError::CommitInFlight { key: k });
                }
                if *key != self.next_key {
                    return refuse(TransitionError::CommitOutOfSequence { offered: *key, expected: self.next_key });
                }
                for id in &ids {
                    match self.cps.get(id) {
                        None => return refuse(TransitionError::NotFound { id: id.clone() }),
                        Some(cp) if cp.state != S::Sealed => {
                            return refuse(TransitionError::NotSealed { id: id.clone(), state: cp.state });
                        }
                        Some(cp) if cp.results == 0 => {
                            return refuse(TransitionError::ResultCount {
                                id: id.clone(),
                                results: 0,
                                what: "a checkpoint without results is committed empty, not under a key",
                            });
                        }
                        Some(_) => {}
                    }
                }
                for id in &ids {
                    self.cps.get_mut(id).unwrap().state = S::Committing { key: *key };
                }
                let info = ModelCommit {
                    ids,
                    target_version: *target_version,
                    final_commit: *final_commit,
                    epoch: self.epoch,
                    state: S::Committing { key: *key },
                };
                self.commits.insert(*key, info);
                self.next_key = key + 1;
                self.in_flight = Some(*key);
                self.frames += 1;
                Ok(Outcome::Unit)
            }
            Op::CommitEmpty { ids } => {
                let ids = sorted_ids(ids)?;
                for id in &ids {
                    match self.cps.get(id) {
                        None => return refuse(TransitionError::NotFound { id: id.clone() }),
                        Some(cp) if cp.state == S::Sealed && cp.results != 0 => {
                            return refuse(TransitionError::ResultCount {
                                id: id.clone(),
                                results: cp.results,
                                what: "a checkpoint with results must be committed under a key",
                            });
                        }
                        Some(cp) if matches!(cp.state, S::Sealed | S::Committed { key: None }) => {}
                        Some(cp) => return refuse(TransitionError::NotSealed { id: id.clone(), state: cp.state }),
                    }
                }
                let mut changed = false;
                for id in &ids {
                    let cp = self.cps.get_mut(id).unwrap();
                    if cp.state == S::Sealed {
                        cp.state = S::Committed { key: None };
                        changed = true;
                    }
                }
                if changed {
                    self.frames += 1;
                }
                Ok(Outcome::Unit)
            }
            Op::MarkCommitted { key } => self.move_commit(*key, S::Committed { key: Some(*key) }, false),
            Op::MarkUnknown { key } => self.move_commit(*key, S::CommitUnknown { key: *key }, false),
            Op::MarkNotCommitted { key } => self.move_commit(*key, S::Committing { key: *key }, false),
            Op::Resolve { key, resolution, reason } => {
                if reason.trim().is_empty() {
                    return Err(Outcome::Invalid);
                }
                self.check_verdict(*key, *resolution)?;
                let to = match resolution {
                    Resolution::Committed => S::Committed { key: Some(*key) },
                    // The record keeps the operator's verdict (`COMMIT_AWAITS_RECOMMIT`); the checkpoints are
                    // Committing, as after a probe (red-team finding 3).
                    Resolution::NotCommitted => COMMIT_AWAITS_RECOMMIT,
                };
                self.move_commit(*key, to, true)
            }
            Op::Reopen | Op::CrashReopen => {
                // Every call was durable, so a crash image holds exactly what a clean close leaves.
                self.epoch += 1;
                self.frames += 1;
                self.orphans = self
                    .cps
                    .iter()
                    .filter(|(_, c)| c.state == S::Staged && c.epoch < self.epoch)
                    .map(|(id, _)| id.clone())
                    .collect();
                Ok(Outcome::Reopened)
            }
        }
    }

    /// Moves commit `key` and its checkpoints to `to`. An operator's call is logged even when it changes nothing.
    /// An operator's verdict is taken by an unknown key; a not-committed one by a key being committed too; a
    /// committed one never by a key being committed (running the job settles that, and a wrong verdict loses it).
    fn check_verdict(&self, key: u64, resolution: Resolution) -> Result<(), Outcome> {
        use CheckpointState as S;
        let Some(commit) = self.commits.get(&key) else {
            return Err(Outcome::Refused(TransitionError::UnknownCommitKey { key }));
        };
        let what = match (commit.state, resolution) {
            (S::CommitUnknown { .. }, _) | (S::Committing { .. }, Resolution::NotCommitted) => return Ok(()),
            (S::Committed { .. }, Resolution::Committed) => return Ok(()),
            (s, Resolution::NotCommitted) if s == COMMIT_AWAITS_RECOMMIT => return Ok(()),
            (S::Committing { .. }, Resolution::Committed) => {
                "a committed verdict (only a key whose outcome is unknown takes one; a key being committed is \
                 settled by running the job, whose committer probes the table)"
            }
            (s, Resolution::Committed) if s == COMMIT_AWAITS_RECOMMIT => {
                "a committed verdict (a not-committed verdict on the key waits for its re-send: run the job)"
            }
            _ => "an operator's verdict",
        };
        Err(Outcome::Refused(TransitionError::CommitState { key, state: commit.state, what }))
    }

    fn move_commit(&mut self, key: u64, to: CheckpointState, operator: bool) -> Verdict {
        let Some(commit) = self.commits.get_mut(&key) else {
            return refuse(TransitionError::UnknownCommitKey { key });
        };
        if commit.state == to {
            if operator {
                self.frames += 1;
            }
            return Ok(Outcome::Unit);
        }
        if matches!(commit.state, CheckpointState::Committed { .. }) {
            return refuse(TransitionError::CommitState { key, state: commit.state, what: "moving a committed key" });
        }
        commit.state = to;
        let committed = matches!(to, CheckpointState::Committed { .. });
        let cp_state = if to == COMMIT_AWAITS_RECOMMIT { CheckpointState::Committing { key } } else { to };
        for id in &commit.ids {
            let cp = self.cps.get_mut(id).unwrap();
            cp.state = cp_state;
            if committed {
                cp.staged.clear();
            }
        }
        if committed {
            if self.in_flight == Some(key) {
                self.in_flight = None;
            }
            if commit.final_commit {
                self.finished = true;
            }
        }
        self.frames += 1;
        Ok(Outcome::Unit)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Generating operations from the model's state, biased towards the interesting ones: existing ids, the next part,
// retries of staged parts, seals with the right count, commits of sealed checkpoints, marks on the key in flight.
// Every operation stays possible with some weight, so refusals of each kind are exercised too.

/// Mostly one of `preferred` (when there is one), sometimes any id of the alphabet.
fn id_from(preferred: Vec<CheckpointId>) -> BoxedStrategy<CheckpointId> {
    let any = proptest::sample::select(IDS.to_vec()).prop_map(cid);
    if preferred.is_empty() {
        return any.boxed();
    }
    prop_oneof![3 => proptest::sample::select(preferred), 1 => any].boxed()
}

/// Any list of ids, rarely empty or with a duplicate.
fn any_ids() -> BoxedStrategy<Vec<CheckpointId>> {
    let ids: Vec<CheckpointId> = IDS.map(cid).to_vec();
    prop_oneof![
        8 => proptest::sample::subsequence(ids, 1..=2),
        1 => proptest::collection::vec(proptest::sample::select(IDS.to_vec()).prop_map(cid), 0..3),
    ]
    .boxed()
}

/// Mostly a non-empty subset of `preferred` (when there is one), sometimes any list of ids.
fn ids_from(preferred: Vec<CheckpointId>) -> BoxedStrategy<Vec<CheckpointId>> {
    if preferred.is_empty() {
        return any_ids();
    }
    let n = preferred.len();
    prop_oneof![6 => proptest::sample::subsequence(preferred, 1..=n), 1 => any_ids()].boxed()
}

fn key_strategy(state: &Model) -> BoxedStrategy<u64> {
    let likely = state.in_flight.unwrap_or(state.next_key.saturating_sub(1));
    prop_oneof![4 => Just(likely), 1 => 0..=state.next_key + 1].boxed()
}

fn reason_strategy() -> BoxedStrategy<String> {
    prop_oneof![9 => Just(REASON.to_string()), 1 => Just(String::new())].boxed()
}

fn stage_strategy(state: &Model) -> BoxedStrategy<Op> {
    let open = in_state(state, |c| c.state == CheckpointState::Staged && c.epoch == state.epoch);
    let next: BTreeMap<CheckpointId, (u32, u32)> = state
        .cps
        .iter()
        .map(|(id, c)| (id.clone(), (c.attempt, c.staged.keys().next_back().map_or(0, |p| p + 1))))
        .collect();
    let keys = proptest::sample::subsequence(KEYS.iter().map(|k| k.to_vec()).collect::<Vec<_>>(), 0..=2);
    let results = proptest::sample::subsequence(results_alphabet(), 0..=2);
    (id_from(open), 0..8u8, 0..8u8, keys, results)
        .prop_map(move |(id, which, part, keys, results)| {
            let (current, next_part) = next.get(&id).copied().unwrap_or((0, 0));
            let attempt = match which {
                0..=5 => current,
                6 => current + 1,
                _ => current.saturating_sub(1),
            };
            let part = if part < 5 { next_part } else { u32::from(part - 5) };
            Op::Stage { id, attempt, part, keys, results }
        })
        .boxed()
}

/// Replays a part the model holds: the same bytes (a retry after a lost ack) or other bytes (a conflict), in
/// its own attempt or, rarely, in an older one.
fn retry_strategy(state: &Model) -> Option<BoxedStrategy<Op>> {
    let existing: Vec<(CheckpointId, u32, u32, Part)> = state
        .cps
        .iter()
        .flat_map(|(id, c)| c.staged.iter().map(move |(part, p)| (id.clone(), c.attempt, *part, p.clone())))
        .collect();
    if existing.is_empty() {
        return None;
    }
    let strategy = (proptest::sample::select(existing), 0..6u8).prop_map(|((id, attempt, part, p), which)| {
        let mut results = p.results;
        let attempt = match which {
            0..=2 => attempt,
            3 | 4 => {
                results.push(results_alphabet()[3].clone());
                attempt
            }
            _ => attempt.saturating_sub(1),
        };
        Op::Stage { id, attempt, part, keys: p.keys, results }
    });
    Some(strategy.boxed())
}

fn seal_strategy(state: &Model) -> BoxedStrategy<Op> {
    let right: BTreeMap<CheckpointId, u32> = state
        .cps
        .iter()
        .map(|(id, c)| {
            let n = if c.state == CheckpointState::Staged {
                c.staged.keys().next_back().map_or(1, |p| p + 1)
            } else {
                c.parts.max(1)
            };
            (id.clone(), n)
        })
        .collect();
    let staged = in_state(state, |c| c.state == CheckpointState::Staged && !c.staged.is_empty());
    (id_from(staged), 0..10u8)
        .prop_map(move |(id, which)| {
            let n = right.get(&id).copied().unwrap_or(1);
            let parts = match which {
                0..=6 => n,
                7 => n + 1,
                8 => n.saturating_sub(1).max(1),
                _ => 0,
            };
            Op::Seal { id, parts }
        })
        .boxed()
}

fn in_state(state: &Model, f: impl Fn(&Cp) -> bool) -> Vec<CheckpointId> {
    state.cps.iter().filter(|(_, c)| f(c)).map(|(id, _)| id.clone()).collect()
}

struct ModelMachine;

impl ReferenceStateMachine for ModelMachine {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::new()).boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Op> {
        use CheckpointState as S;
        let sealed_with = in_state(state, |c| c.state == S::Sealed && c.results > 0);
        let sealed_without = in_state(state, |c| c.state == S::Sealed && c.results == 0);
        let sealed = in_state(state, |c| c.state == S::Sealed);
        let restartable = in_state(state, |c| c.state == S::Aborted || (c.state == S::Staged && c.epoch < state.epoch));
        let abortable = in_state(state, |c| c.state == S::Staged);
        let next_key = state.next_key;
        let begin_key =
            prop_oneof![6 => Just(next_key), 1 => Just(next_key + 1), 1 => Just(next_key.saturating_sub(1))];
        // Operations that need something to work on are rare until it exists.
        let weight = |present: bool, high: u32| if present { high } else { 1 };
        let commits = !state.commits.is_empty();
        let mut arms: Vec<(u32, BoxedStrategy<Op>)> = vec![
            (10, stage_strategy(state)),
            (weight(!abortable.is_empty(), 5), seal_strategy(state)),
            (weight(!restartable.is_empty(), 3), id_from(restartable).prop_map(|id| Op::Restart { id }).boxed()),
            (1, id_from(abortable).prop_map(|id| Op::Abort { id }).boxed()),
            (1, (ids_from(sealed), reason_strategy()).prop_map(|(ids, reason)| Op::ForceAbort { ids, reason }).boxed()),
            (
                weight(!sealed_with.is_empty() && state.in_flight.is_none(), 6),
                (begin_key, ids_from(sealed_with), proptest::option::of(0..3u64), any::<bool>())
                    .prop_map(|(key, ids, target_version, final_commit)| Op::BeginCommit {
                        key,
                        ids,
                        target_version,
                        final_commit,
                    })
                    .boxed(),
            ),
            (
                weight(!sealed_without.is_empty(), 3),
                ids_from(sealed_without).prop_map(|ids| Op::CommitEmpty { ids }).boxed(),
            ),
            (
                weight(state.in_flight.is_some(), 4),
                key_strategy(state).prop_map(|key| Op::MarkCommitted { key }).boxed(),
            ),
            (weight(state.in_flight.is_some(), 2), key_strategy(state).prop_map(|key| Op::MarkUnknown { key }).boxed()),
            (weight(commits, 2), key_strategy(state).prop_map(|key| Op::MarkNotCommitted { key }).boxed()),
            (
                weight(commits, 2),
                (key_strategy(state), any::<bool>(), reason_strategy())
                    .prop_map(|(key, committed, reason)| Op::Resolve {
                        key,
                        resolution: if committed { Resolution::Committed } else { Resolution::NotCommitted },
                        reason,
                    })
                    .boxed(),
            ),
            (1, Just(Op::Reopen).boxed()),
            (1, Just(Op::CrashReopen).boxed()),
        ];
        if let Some(retry) = retry_strategy(state) {
            arms.push((3, retry));
        }
        Union::new_weighted(arms).boxed()
    }

    fn apply(mut state: Model, op: &Op) -> Model {
        state.last = match state.step(op) {
            Ok(outcome) | Err(outcome) => outcome,
        };
        state
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The system under test: a real store on a crash-image backend, driven by a current-thread runtime.

struct Sut {
    rt: tokio::runtime::Runtime,
    backend: CrashBackend,
    store: Option<Store>,
}

fn open(rt: &tokio::runtime::Runtime, backend: &CrashBackend) -> Store {
    let builder = Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("mem://table").unwrap());
    rt.block_on(builder.backend(backend.clone()).writer_tag(7).open()).unwrap()
}

impl Sut {
    fn store(&self) -> &Store {
        self.store.as_ref().unwrap()
    }

    fn run(&mut self, op: Op) -> Result<Outcome, Error> {
        let unit = |r: Result<(), Error>| r.map(|()| Outcome::Unit);
        let store = self.store.as_ref().unwrap();
        let rt = &self.rt;
        match op {
            Op::Stage { id, attempt, part, keys, results } => rt
                .block_on(store.stage(
                    &id,
                    StagePart::new(Attempt::new(attempt), PartIndex::new(part)).keys(keys).results(results),
                ))
                .map(Outcome::Staged),
            Op::Seal { id, parts } => unit(rt.block_on(store.seal(&id, parts))),
            Op::Restart { id } => rt.block_on(store.restart(&id)).map(Outcome::Dropped),
            Op::Abort { id } => rt.block_on(store.abort(&id)).map(Outcome::Dropped),
            Op::ForceAbort { ids, reason } => {
                rt.block_on(store.operator().force_abort(&ids, &reason)).map(Outcome::Dropped)
            }
            Op::BeginCommit { key, ids, target_version, final_commit } => {
                unit(rt.block_on(store.begin_commit(key, &ids, target_version, final_commit)))
            }
            Op::CommitEmpty { ids } => unit(rt.block_on(store.commit_empty(&ids))),
            Op::MarkCommitted { key } => unit(rt.block_on(store.mark_committed(key))),
            Op::MarkUnknown { key } => unit(rt.block_on(store.mark_unknown(key, "timeout"))),
            Op::MarkNotCommitted { key } => unit(rt.block_on(store.mark_not_committed(key))),
            Op::Resolve { key, resolution, reason } => {
                unit(rt.block_on(store.operator().resolve(key, resolution, &reason)))
            }
            Op::Reopen => {
                self.store.take().unwrap().close();
                self.store = Some(open(&self.rt, &self.backend));
                Ok(Outcome::Reopened)
            }
            Op::CrashReopen => {
                // What survives a power cut now; the old store then shuts down on the old images.
                let image = self.backend.crash_image();
                self.store.take().unwrap().close();
                self.backend = image;
                self.store = Some(open(&self.rt, &self.backend));
                Ok(Outcome::Reopened)
            }
        }
    }
}

struct StoreTest;

impl StateMachineTest for StoreTest {
    type SystemUnderTest = Sut;
    type Reference = ModelMachine;

    fn init_test(_: &Model) -> Sut {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let backend = CrashBackend::new();
        let store = open(&rt, &backend);
        Sut { rt, backend, store: Some(store) }
    }

    fn apply(mut sut: Sut, model: &Model, op: Op) -> Sut {
        let described = format!("{op:?}");
        let actual = sut.run(op);
        match (&actual, &model.last) {
            (Ok(got), want) => assert_eq!(got, want, "{described}"),
            (Err(e), Outcome::Refused(t)) => {
                assert_eq!(e.kind(), ErrorKind::IllegalTransition, "{described}: {e}");
                assert_eq!(e.transition(), Some(t), "{described}: {e}");
            }
            (Err(e), Outcome::Invalid) => assert_eq!(e.kind(), ErrorKind::InvalidInput, "{described}: {e}"),
            (Err(e), want) => panic!("{described}: expected {want:?}, got {e}"),
        }
        sut
    }

    fn check_invariants(sut: &Sut, model: &Model) {
        let store = sut.store();
        assert_eq!(store.epoch(), model.epoch);
        assert_eq!(store.orphans(), model.orphans.as_slice(), "orphans");
        // Refusals and no-ops write nothing; everything else writes exactly one frame.
        assert_eq!(store.log_frames().unwrap().len(), model.frames, "frames in the log after {:?}", model.last);
        assert_eq!(store.verify_log().unwrap(), model.frames as u64, "verified frames");
        for id in IDS.map(cid) {
            assert_eq!(store.get(&id).unwrap(), model.info(&id), "get({id})");
        }
        let filters = StateFilter::ALL;
        for filter in filters {
            let want: Vec<CheckpointInfo> =
                model.cps.keys().filter_map(|id| model.info(id)).filter(|i| filter_of(i.state) == filter).collect();
            assert_eq!(store.list(filter).unwrap(), want, "list({filter:?})");
        }
        for key in KEYS {
            assert_eq!(store.is_processed(key).unwrap(), model.owners.contains_key(key), "is_processed({key:?})");
        }
        let processed: Vec<Vec<u8>> = store.processed_keys().map(|k| k.unwrap()).collect();
        assert_eq!(processed, model.owners.keys().cloned().collect::<Vec<_>>(), "processed_keys");
        let pending = store.pending().unwrap();
        let want: Vec<PendingCheckpoint> = model
            .cps
            .iter()
            .filter(|(_, c)| c.state.is_pending())
            .map(|(id, c)| PendingCheckpoint { info: model.info(id).unwrap(), results: c.results() })
            .collect();
        assert_eq!(pending.checkpoints, want, "pending checkpoints");
        let in_flight = model.in_flight.map(|k| (k, model.commits[&k].view(k)));
        assert_eq!(pending.in_flight.map(|c| (c.key, view(&c))), in_flight, "pending in flight");
        assert_eq!(pending.next_key, model.next_key, "next key");
        assert_eq!(pending.finished, model.finished, "finished");
        assert_eq!(store.is_finished().unwrap(), model.finished, "is_finished");
        for key in 0..=model.next_key {
            let got = store.commit_info(key).unwrap().map(|c| view(&c));
            assert_eq!(got, model.commits.get(&key).map(|c| c.view(key)), "commit_info({key})");
        }
    }

    fn teardown(sut: Sut, _: Model) {
        if let Some(store) = sut.store {
            store.close();
        }
    }
}

fn filter_of(state: CheckpointState) -> StateFilter {
    match state {
        CheckpointState::Staged => StateFilter::Staged,
        CheckpointState::Sealed => StateFilter::Sealed,
        CheckpointState::Committing { .. } => StateFilter::Committing,
        CheckpointState::CommitUnknown { .. } => StateFilter::CommitUnknown,
        CheckpointState::Committed { .. } => StateFilter::Committed,
        CheckpointState::Aborted => StateFilter::Aborted,
    }
}

/// The suite's cases when `SINKPOINT_CASES` is not set.
const CASES_DEFAULT: u64 = 1000;

sharded!(mod the_store_matches_the_model => run_shard);

/// One shard of the suite: its share of the cases (`SINKPOINT_CASES`, default 1,000, over four shards) from the
/// base seed (`PROPTEST_RNG_SEED`, default from the clock) plus the shard's index, printed straight to stderr so
/// that a passing run shows them too.
fn run_shard(shard: Shard) {
    let cases = testkit::cases(CASES_DEFAULT);
    let base = testkit::seed("PROPTEST_RNG_SEED");
    shard.announce(
        &format!(
            "model suite (up to {TRANSITIONS_MAX} operations a case; failures persist in \
             tests/suite/model.proptest-regressions)"
        ),
        cases,
        "PROPTEST_RNG_SEED",
        base,
    );
    let range = shard.range(cases);
    if range.is_empty() {
        return;
    }
    let config = ProptestConfig {
        rng_seed: RngSeed::Fixed(base.wrapping_add(u64::from(shard.index))),
        ..ProptestConfig::with_cases(u32::try_from(range.end - range.start).unwrap_or(u32::MAX))
    };
    let sequences = ModelMachine::sequential_strategy(1..TRANSITIONS_MAX);
    proptest!(config.clone(), |((initial, transitions, seen) in sequences)| {
        StoreTest::test_sequential(config.clone(), initial, transitions, seen);
    });
}

/// Runs one fixed sequence through the model and the store, as a failing case found by the suite replays.
fn replay(ops: Vec<Op>) {
    StoreTest::test_sequential(ProptestConfig::default(), Model::new(), ops, None);
}

fn stage(id: &str, attempt: u32, part: u32, keys: &[&[u8]]) -> Op {
    Op::Stage { id: cid(id), attempt, part, keys: keys.iter().map(|k| k.to_vec()).collect(), results: Vec::new() }
}

/// Found by this suite: a retried `commit_empty` of a checkpoint already committed empty changed nothing but
/// still appended a record to the log.
#[test]
fn regression_a_retried_commit_empty_writes_nothing() {
    replay(vec![
        stage("a", 0, 0, &[]),
        Op::Seal { id: cid("a"), parts: 1 },
        Op::CommitEmpty { ids: vec![cid("a")] },
        Op::CommitEmpty { ids: vec![cid("a")] },
    ]);
}

/// Found by this suite: staging into a sealed checkpoint under another attempt, with the bytes of a sealed
/// part, was reported as "the offered part is the one sealed".
#[test]
fn regression_a_part_of_another_attempt_is_not_the_one_sealed() {
    replay(vec![
        stage("c", 0, 0, &[]),
        stage("c", 0, 1, &[b"k3"]),
        Op::Seal { id: cid("c"), parts: 2 },
        stage("c", 1, 1, &[b"k3"]),
    ]);
}
