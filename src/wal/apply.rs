//! Applying one record inside a write transaction: gather the facts, ask [`crate::state::transition`], then
//! write the step. A rejected record writes nothing, so the other calls of its group commit go on.

use std::collections::HashMap;

use redb::{ReadableTable, Table, WriteTransaction};

use crate::error::{Error, TransitionError};
use crate::limits::ATTEMPT_SIZES_ENTRIES_MAX;
use crate::state::{
    CheckpointRecord, CheckpointState, CommitEvent, CommitSequence, CommitStep, Effect, Event, PartMatch, StageBytes,
    Step, commit_transition, transition,
};
use crate::types::{CheckpointId, Epoch, SourceKey, WriteResult};
use crate::wal::frame;
use crate::wal::fresh::{self, FreshEntry, FreshParts};
use crate::wal::record::{Record, Resolution, decode_value, encode_value};
use crate::wal::tables::{
    CHECKPOINTS, COMMIT_AWAITS_RECOMMIT, COMMITS, CommitValue, GARBAGE, GarbageValue, KEYS, LOG, META, META_KEY, Meta,
    PARTS, PartValue, PartValueRef, STATES, encode_meta, read_checkpoint, read_commit, visit_parts,
};

/// What an accepted record did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Whether anything was written (false for a retried call that was already applied).
    pub written: bool,
    /// Write results dropped by `restart`, `abort` or `force_abort`, for the caller to delete their files.
    pub dropped: Vec<WriteResult>,
    /// Whose they were, in order: each checkpoint, the dropped attempt and how many of `dropped` are its.
    pub dropped_from: Vec<(CheckpointId, u32, usize)>,
}

/// Sums attempt `attempt` of checkpoint `id` from its rows in `parts` (not its fresh parts).
fn attempt_size(
    parts: &impl ReadableTable<(&'static str, u32, u32), &'static [u8]>,
    id: &CheckpointId,
    attempt: u32,
) -> Result<AttemptSize, Error> {
    let mut size = AttemptSize { attempt, bytes: 0, parts: 0 };
    for entry in parts.range((id.as_str(), attempt, 0)..=(id.as_str(), attempt, u32::MAX))? {
        size.bytes += entry?.1.value().len() as u64;
        size.parts += 1;
    }
    Ok(size)
}

/// The bytes of each Staged checkpoint's current attempt, as a stage last left them: the per-attempt byte limit
/// is checked at every stage, and summing the attempt's parts each time made staging quadratic in one
/// checkpoint's parts (1.3 ms a stage at a few thousand parts). Only a stage writes an entry, and only from a
/// sum it knows (the checkpoint new, or the entry or a scan of the same attempt); every other record that
/// names a checkpoint forgets it, so an entry is never read after the attempt changed. The writer thread keeps
/// one across its transactions and drops it when a transaction fails (the entries are not rolled back).
/// Debug builds check a hit against the scan whenever the attempt's part count is a power of two (a linear
/// cost in all, so the suites that run in debug keep their pace).
#[derive(Default)]
pub(crate) struct AttemptSizes {
    entries: HashMap<CheckpointId, AttemptSize>,
}

/// One checkpoint's entry in [`AttemptSizes`].
#[derive(Clone, Copy)]
struct AttemptSize {
    attempt: u32,
    bytes: u64,
    parts: u64,
}

impl AttemptSizes {
    fn get(&self, id: &CheckpointId, attempt: u32) -> Option<AttemptSize> {
        self.entries.get(id).filter(|e| e.attempt == attempt).copied()
    }

    fn set(&mut self, id: &CheckpointId, size: AttemptSize) {
        if self.entries.len() >= ATTEMPT_SIZES_ENTRIES_MAX && !self.entries.contains_key(id) {
            self.entries.clear();
        }
        self.entries.insert(id.clone(), size);
    }

    fn forget(&mut self, id: &CheckpointId) {
        self.entries.remove(id);
    }

    /// Forgets the checkpoints a record other than a stage names (all of them on a create or an open).
    fn forget_named_by(&mut self, record: &Record) {
        // The records of keys and of the job name no checkpoint: nothing they do touches a Staged one's parts.
        match record {
            Record::Stage { .. } => {}
            Record::Create { .. } | Record::Open { .. } => self.entries.clear(),
            _ => record.checkpoint_ids().iter().for_each(|id| self.forget(id)),
        }
    }
}

/// What one write transaction's [`Tables`] leave to the next of the same writer, once it committed: both are
/// caches of what the tables hold, so a transaction that did not commit leaves [`Carry::default`] (the fresh
/// parts' index is then scanned again).
#[derive(Default)]
pub(crate) struct Carry {
    sizes: AttemptSizes,
    fresh: Option<FreshParts>,
}

impl Carry {
    /// What is still true after a transaction that did not commit: the sizes only ever forget within one (and
    /// forgetting is never wrong); the fresh parts' index may have moved parts the abort put back.
    pub(crate) fn after_abort(self) -> Self {
        Self { sizes: self.sizes, fresh: None }
    }

    /// The fresh parts' index carried, if any (tests).
    #[cfg(test)]
    pub(crate) fn into_fresh(self) -> Option<FreshParts> {
        self.fresh
    }
}

/// What a seal learns from the parts it seals ([`Tables::seal_facts`]).
#[derive(Default)]
struct SealFacts {
    /// The part numbers present, in order.
    present: Vec<u32>,
    key_conflict: Option<(String, CheckpointId)>,
    results: u32,
}

/// Where a stage keeps its new part: in its stage record alone, fresh (the rule), or in its `parts` row at once
/// when the same call seals the checkpoint next (`stage_and_seal`): the seal would settle it in the same
/// transaction anyway. Either place is a legal state (invariant 11), so a
/// replay, which places every part fresh, ends the transaction in the same state.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Placement {
    Fresh,
    Row,
}

impl Placement {
    /// The placement of `record`'s part when `next` follows it in the same call.
    pub(crate) fn of(record: &Record, next: Option<&Record>) -> Self {
        match (record, next) {
            (Record::Stage { id, .. }, Some(Record::Seal { id: sealed, .. })) if id == sealed => Self::Row,
            _ => Self::Fresh,
        }
    }
}

/// A stage call's new part, as [`Effect::InsertPart`] writes it.
struct NewPart<'a> {
    bytes: &'a [u8],
    attempt: u32,
    part: u32,
    /// The sequence number of the stage record (where a fresh part is kept).
    seq: u64,
    placement: Placement,
}

/// The open tables of one write transaction.
pub(crate) struct Tables<'txn> {
    log: Table<'txn, u64, &'static [u8]>,
    checkpoints: Table<'txn, &'static str, &'static [u8]>,
    parts: Table<'txn, (&'static str, u32, u32), &'static [u8]>,
    keys: Table<'txn, &'static [u8], &'static str>,
    states: Table<'txn, (u8, &'static str), ()>,
    commits: Table<'txn, u64, &'static [u8]>,
    garbage: Table<'txn, (u64, u32), &'static [u8]>,
    meta: Table<'txn, &'static str, &'static [u8]>,
    sizes: AttemptSizes,
    /// The index of the fresh parts, always equal to what [`crate::wal::fresh::visit`] finds in this transaction.
    fresh: FreshParts,
}

impl<'txn> Tables<'txn> {
    pub(crate) fn open(txn: &'txn WriteTransaction) -> Result<Self, Error> {
        Self::open_with(txn, Carry::default())
    }

    /// The tables, with what an earlier committed transaction of this writer left (see [`Tables::into_carry`]).
    pub(crate) fn open_with(txn: &'txn WriteTransaction, carry: Carry) -> Result<Self, Error> {
        let (log, meta) = (txn.open_table(LOG)?, txn.open_table(META)?);
        let (checkpoints, parts) = (txn.open_table(CHECKPOINTS)?, txn.open_table(PARTS)?);
        // The carried index is the common case: the meta is read (and the window scanned) only without one.
        let fresh = match carry.fresh {
            Some(fresh) => fresh,
            None => match crate::wal::tables::read_meta(&meta, &log)? {
                None => FreshParts::default(),
                Some(m) => {
                    let window = fresh::window(m.log_start, m.next_seq);
                    FreshParts::scan(&log, &checkpoints, &parts, window.clone())
                        .map_err(|e| fresh::in_window(e, &window))?
                }
            },
        };
        Ok(Self {
            log,
            checkpoints,
            parts,
            keys: txn.open_table(KEYS)?,
            states: txn.open_table(STATES)?,
            commits: txn.open_table(COMMITS)?,
            garbage: txn.open_table(GARBAGE)?,
            meta,
            sizes: carry.sizes,
            fresh,
        })
    }

    /// What this transaction leaves to the next of the same writer, once it committed (else
    /// [`Carry::after_abort`]).
    pub(crate) fn into_carry(self) -> Carry {
        Carry { sizes: self.sizes, fresh: Some(self.fresh) }
    }

    /// The bytes and parts attempt `attempt` of Staged checkpoint `id` holds, in `parts` and fresh.
    fn summed_size(&self, id: &CheckpointId, attempt: u32) -> Result<AttemptSize, Error> {
        let mut size = attempt_size(&self.parts, id, attempt)?;
        let (bytes, parts) = self.fresh.attempt_size(id, attempt);
        size.bytes += bytes;
        size.parts += parts;
        Ok(size)
    }

    /// The bytes and parts attempt `attempt` of Staged checkpoint `id` holds: remembered, or summed from its
    /// parts.
    fn attempt_size(&self, id: &CheckpointId, attempt: u32) -> Result<AttemptSize, Error> {
        let Some(size) = self.sizes.get(id, attempt) else { return self.summed_size(id, attempt) };
        if cfg!(debug_assertions) && size.parts.is_power_of_two() {
            let scanned = self.summed_size(id, attempt)?;
            assert_eq!((size.bytes, size.parts), (scanned.bytes, scanned.parts), "remembered size of {id}");
        }
        Ok(size)
    }

    /// The local log's frame at `seq`, if it keeps it.
    pub(crate) fn log_frame(&self, seq: u64) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.log.get(seq)?.map(|f| f.value().to_vec()))
    }

    pub(crate) fn read_meta(&self) -> Result<Option<Meta>, Error> {
        crate::wal::tables::read_meta(&self.meta, &self.log)
    }

    pub(crate) fn write_meta(&mut self, meta: &Meta) -> Result<(), Error> {
        self.meta.insert(META_KEY, encode_meta(meta)?.as_slice())?;
        Ok(())
    }

    /// Appends one frame to the log and returns its bytes (for the mirror). Then settles the fresh parts that
    /// are over a limit or whose records the log's end left behind its window ([`crate::wal::fresh`]): after
    /// every append, each fresh part is one [`crate::wal::fresh::visit`] finds.
    pub(crate) fn append(&mut self, meta: &mut Meta, epoch: Epoch, record: &Record) -> Result<Vec<u8>, Error> {
        let seq = meta.next_seq;
        let bytes = frame::encode(seq, epoch, &record.to_payload()?)?;
        self.log.insert(seq, bytes.as_slice())?;
        meta.next_seq = seq + 1;
        if self.fresh.over_limit() {
            self.settle_all()?;
        }
        self.settle_below(fresh::window(meta.log_start, meta.next_seq).start)?;
        Ok(bytes)
    }

    /// Drops log records below `keep_from` (they are reflected in the tables, and mirrored if there is a mirror),
    /// after settling the fresh parts whose records it drops.
    pub(crate) fn truncate_log(&mut self, meta: &mut Meta, keep_from: u64) -> Result<(), Error> {
        let keep_from = keep_from.min(meta.next_seq);
        if keep_from > meta.log_start {
            self.settle_below(keep_from)?;
            self.log.retain_in(meta.log_start..keep_from, |_, _| false)?;
            meta.log_start = keep_from;
        }
        Ok(())
    }

    /// Writes every fresh part of `id` to its row in `parts` (see [`crate::wal::fresh`]).
    fn settle(&mut self, id: &CheckpointId) -> Result<(), Error> {
        for ((attempt, part), entry) in self.fresh.take(id) {
            let value = self.fresh_value((id, attempt, part), entry.seq)?;
            self.parts.insert((id.as_str(), attempt, part), value.as_slice())?;
        }
        Ok(())
    }

    /// Settles every checkpoint with a fresh part whose stage record's seq is below `seq`.
    fn settle_below(&mut self, seq: u64) -> Result<(), Error> {
        for id in self.fresh.ids_below(seq) {
            self.settle(&id)?;
        }
        Ok(())
    }

    /// The `parts` row of fresh part `key`, from its stage record at `seq`, where the index says it is: a log
    /// without it there is damaged.
    fn fresh_value(&self, key: (&CheckpointId, u32, u32), seq: u64) -> Result<Vec<u8>, Error> {
        let (id, attempt, part) = key;
        let lacks = || {
            let what = format!("part ({id}, {attempt}, {part}), which the fresh parts' index puts there");
            Error::corrupt(format!("table log, seq {seq}: no stage record of {what}"))
        };
        let frame = self.log.get(seq)?.ok_or_else(lacks)?;
        match fresh::stage_part(seq, frame.value())? {
            Some(found) if (&found.id, found.attempt, found.part) == key => found.row(),
            _ => Err(lacks()),
        }
    }

    /// Settles every checkpoint with a fresh part, in id order (so each one's rows share their leaves).
    fn settle_all(&mut self) -> Result<(), Error> {
        for id in self.fresh.ids() {
            self.settle(&id)?;
        }
        Ok(())
    }

    /// Settles the checkpoints a record other than a stage names, before it reads or moves their parts.
    fn settle_named_by(&mut self, record: &Record) -> Result<(), Error> {
        if self.fresh.is_empty() {
            return Ok(());
        }
        // The records of keys and of the job name no checkpoint: theirs are past Staged, so already settled.
        match record {
            Record::Stage { .. } => Ok(()),
            Record::Create { .. } | Record::Open { .. } => self.settle_all(),
            _ => record.checkpoint_ids().iter().try_for_each(|id| self.settle(id)),
        }
    }

    /// Indexes a stage call's new part as fresh: its stage record, appended next, is all that is written.
    fn insert_fresh(&mut self, id: &CheckpointId, new: &NewPart<'_>) -> Result<(), Error> {
        let entry = FreshEntry { seq: new.seq, bytes: new.bytes.len() as u64 };
        if self.fresh.insert(id, new.attempt, new.part, entry).is_some() {
            return Err(Error::bug(format!("part ({id}, {}, {}) staged fresh twice", new.attempt, new.part)));
        }
        Ok(())
    }

    fn put_checkpoint(
        &mut self,
        id: &CheckpointId,
        old: Option<&CheckpointRecord>,
        next: &CheckpointRecord,
    ) -> Result<(), Error> {
        // The states index changes only with the state: rewriting an unchanged entry would still dirty (and so
        // write and fsync) its page in every stage call's commit.
        let old_code = old.map(|o| o.state.code());
        if old_code != Some(next.state.code()) {
            if let Some(code) = old_code {
                self.states.remove((code, id.as_str()))?;
            }
            self.states.insert((next.state.code(), id.as_str()), ())?;
        }
        self.checkpoints.insert(id.as_str(), encode_value(next)?.as_slice())?;
        Ok(())
    }

    fn drop_parts(&mut self, id: &CheckpointId, attempt: u32, unclaim_keys: bool) -> Result<Vec<WriteResult>, Error> {
        let mut dropped = Vec::new();
        // Each part is removed as it is visited and decoded alone: memory stays at one part plus the results the
        // caller gets back, whatever the attempt's size.
        let range = (id.as_str(), attempt, 0)..=(id.as_str(), attempt, u32::MAX);
        for entry in self.parts.extract_from_if(range, |_, _| true)? {
            let (k, v) = entry?;
            let part = k.value().2;
            let value: PartValue = decode_value(v.value(), &|| format!("table parts, ({id}, {attempt}, {part})"))?;
            if unclaim_keys {
                for key in &value.keys {
                    let owned = self.keys.get(key.as_slice())?.map(|o| o.value() == id.as_str()).unwrap_or(false);
                    if owned {
                        self.keys.remove(key.as_slice())?;
                    }
                }
            }
            dropped.extend(value.results);
        }
        Ok(dropped)
    }

    /// Applies a step's effect and record. The caller has already validated every step of the call.
    fn apply_step(
        &mut self,
        id: &CheckpointId,
        old: Option<&CheckpointRecord>,
        step: &Step,
        new_part: Option<&NewPart<'_>>,
    ) -> Result<Option<(u32, Vec<WriteResult>)>, Error> {
        let mut dropped = None;
        match step.effect {
            Effect::None => {}
            Effect::InsertPart => {
                let new = new_part.ok_or_else(|| Error::bug("InsertPart without a part"))?;
                match new.placement {
                    Placement::Fresh => self.insert_fresh(id, new)?,
                    Placement::Row => drop(self.parts.insert((id.as_str(), new.attempt, new.part), new.bytes)?),
                }
            }
            Effect::DropParts { attempt } | Effect::UnclaimKeysDropParts { attempt } => {
                let unclaim = matches!(step.effect, Effect::UnclaimKeysDropParts { .. });
                dropped = Some((attempt, self.drop_parts(id, attempt, unclaim)?));
            }
            Effect::ClaimKeys => {
                let keys = &mut self.keys;
                visit_parts(&self.parts, id, step.next.attempt, |value| {
                    for key in &value.keys {
                        keys.insert(key.as_slice(), id.as_str())?;
                    }
                    Ok(None::<()>)
                })?;
            }
            Effect::ReleaseResults => {
                // The keys stay processed; only the bytes of the results go.
                self.drop_parts(id, step.next.attempt, false)?;
            }
        }
        if old != Some(&step.next) {
            self.put_checkpoint(id, old, &step.next)?;
        }
        Ok(dropped)
    }

    fn part_match(
        &self,
        id: &CheckpointId,
        cur: Option<&CheckpointRecord>,
        attempt: u32,
        part: u32,
        offered: &[u8],
    ) -> Result<PartMatch, Error> {
        let Some(cur) = cur else { return Ok(PartMatch::Absent) };
        if matches!(cur.state, CheckpointState::Committed { .. }) {
            return Ok(PartMatch::Released);
        }
        // Past Staged, the offered part is "the one sealed" only if it is of the sealed attempt too: a stage call
        // of another attempt with the same bytes is not the call that was sealed.
        if cur.state != CheckpointState::Staged && attempt != cur.attempt {
            return Ok(PartMatch::Different);
        }
        if let Some(entry) = self.fresh.get(id, attempt, part) {
            let stored = self.fresh_value((id, attempt, part), entry.seq)?;
            return Ok(if stored == offered { PartMatch::Same } else { PartMatch::Different });
        }
        Ok(match self.parts.get((id.as_str(), attempt, part))? {
            None => PartMatch::Absent,
            Some(stored) if stored.value() == offered => PartMatch::Same,
            Some(_) => PartMatch::Different,
        })
    }

    /// What a seal of `id`'s `attempt` needs from its parts, read in one pass over their rows: the part numbers
    /// present, the first source key another checkpoint already owns (once found, the rest are only numbered:
    /// the seal is refused) and the write results counted.
    fn seal_facts(&self, id: &CheckpointId, attempt: u32) -> Result<SealFacts, Error> {
        let mut facts = SealFacts::default();
        let mut results = 0u64;
        for entry in self.parts.range((id.as_str(), attempt, 0)..=(id.as_str(), attempt, u32::MAX))? {
            let (k, v) = entry?;
            let part = k.value().2;
            facts.present.push(part);
            if facts.key_conflict.is_some() {
                continue;
            }
            let value: PartValue = decode_value(v.value(), &|| format!("table parts, ({id}, {attempt}, {part})"))?;
            results += value.results.len() as u64;
            facts.key_conflict = self.owned_elsewhere(id, &value.keys)?;
        }
        // The attempt's byte limit bounds its results far below u32::MAX; more would be damage.
        facts.results = u32::try_from(results)
            .map_err(|_| Error::corrupt(format!("checkpoint {id}, attempt {attempt}: {results} write results")))?;
        Ok(facts)
    }

    /// The first of `keys` that a checkpoint other than `id` owns, with its owner.
    fn owned_elsewhere(&self, id: &CheckpointId, keys: &[SourceKey]) -> Result<Option<(String, CheckpointId)>, Error> {
        for key in keys {
            if let Some(owner) = self.keys.get(key.as_slice())?
                && owner.value() != id.as_str()
            {
                let owner = CheckpointId::new(owner.value())
                    .map_err(|_| Error::corrupt(format!("table keys: invalid owner {:?}", owner.value())))?;
                return Ok(Some((String::from_utf8_lossy(key).into_owned(), owner)));
            }
        }
        Ok(None)
    }

    /// Validates one event on each of `ids` (all or none), then applies them all. Returns whether any of them
    /// changed (a retried call changes nothing and must write nothing) and the dropped write results.
    fn each(&mut self, ids: &[CheckpointId], epoch: Epoch, event: &Event<'_>) -> Result<Decided<Applied>, Error> {
        let mut steps = Vec::with_capacity(ids.len());
        for id in ids {
            let cur = read_checkpoint(&self.checkpoints, id)?;
            match transition(id, cur.as_ref(), epoch, event) {
                Ok(step) => steps.push((id, cur, step)),
                Err(e) => return Ok(Decided::Refused(e)),
            }
        }
        let mut applied = Applied::default();
        for (id, cur, step) in &steps {
            applied.written |= step.effect != Effect::None || cur.as_ref() != Some(&step.next);
            if let Some((attempt, results)) = self.apply_step(id, cur.as_ref(), step, None)? {
                applied.note_dropped(id, attempt, results);
            }
        }
        Ok(Decided::Applied(applied))
    }

    /// Moves commit `key` and every checkpoint it covers by `event`, setting the commit's state to `state`.
    fn move_commit(
        &mut self,
        meta: &mut Meta,
        key: u64,
        event: &Event<'_>,
        state: CheckpointState,
    ) -> Result<Decided<bool>, Error> {
        let stored = read_commit(&self.commits, key)?;
        let event_on_key = CommitEvent::Move { key, current: stored.as_ref().map(|c| c.state), to: state };
        match commit_transition(&meta.seq, &event_on_key) {
            Err(e) => return Ok(Decided::Refused(e)),
            Ok(CommitStep::Unchanged) => return Ok(Decided::Applied(false)),
            Ok(CommitStep::Apply) => {}
        }
        let Some(mut commit) = stored else { return Err(Error::bug(format!("commit key {key} vanished"))) };
        let ids = commit.ids.clone();
        if let Decided::Refused(e) = self.each(&ids, meta.epoch, event)? {
            return Ok(Decided::Refused(e));
        }
        commit.state = state;
        self.commits.insert(key, encode_value(&commit)?.as_slice())?;
        if matches!(state, CheckpointState::Committed { .. }) {
            if meta.seq.in_flight == Some(key) {
                meta.seq.in_flight = None;
            }
            if commit.final_commit {
                meta.finished = true;
            }
        }
        Ok(Decided::Applied(true))
    }

    /// Un-binds commit `key`, which must be the key in flight: its checkpoints go back to Sealed, its record is
    /// deleted and it becomes the next key again. The key is reused, not retired: targets chain key n + 1 on
    /// key n, so a retired key would leave a gap they refuse; and the committer probes a key before it begins
    /// it, so a table that still holds a commit under `key` refuses the store instead of taking a duplicate.
    fn unbind(&mut self, meta: &mut Meta, key: u64) -> Result<Decided<bool>, Error> {
        let stored = read_commit(&self.commits, key)?;
        if let Err(e) =
            commit_transition(&meta.seq, &CommitEvent::Unbind { key, current: stored.as_ref().map(|c| c.state) })
        {
            return Ok(Decided::Refused(e));
        }
        let Some(commit) = stored else { return Err(Error::bug(format!("commit key {key} vanished"))) };
        if let Decided::Refused(e) = self.each(&commit.ids, meta.epoch, &Event::Unbind { key })? {
            return Ok(Decided::Refused(e));
        }
        self.commits.remove(key)?;
        meta.seq = CommitSequence { next_key: key, in_flight: None };
        Ok(Decided::Applied(true))
    }

    /// Records the job's end, once nothing waits for the target: checked by [`commit_transition`], a no-op if it is
    /// already recorded.
    fn finish(&mut self, meta: &mut Meta) -> Result<Decided<bool>, Error> {
        // Sealed, Committing and CommitUnknown are adjacent in the states index. A Staged checkpoint is not the
        // committer's to finish (an orphan the caller restarts or aborts), as with a final key's flag.
        let (lo, hi) = (CheckpointState::Sealed.code(), CheckpointState::CommitUnknown { key: 0 }.code());
        let unfinished = match self.states.range((lo, "")..(hi + 1, ""))?.next() {
            None => None,
            Some(entry) => {
                let id = CheckpointId::new(entry?.0.value().1)
                    .map_err(|_| Error::corrupt("table states: an invalid checkpoint id"))?;
                let state = read_checkpoint(&self.checkpoints, &id)?
                    .ok_or_else(|| Error::corrupt(format!("table states names {id}, which table checkpoints lacks")))?
                    .state;
                Some((id, state))
            }
        };
        match commit_transition(&meta.seq, &CommitEvent::Finish { finished: meta.finished, unfinished }) {
            Err(e) => Ok(Decided::Refused(e)),
            Ok(CommitStep::Unchanged) => Ok(Decided::Applied(false)),
            Ok(CommitStep::Apply) => {
                meta.finished = true;
                Ok(Decided::Applied(true))
            }
        }
    }

    /// Validates `record` against the state (including the calls before it in this transaction) and, if it is
    /// legal, appends it to the log and applies it. The outer error is a storage failure that dooms the whole
    /// transaction; a [`Decided::Refused`] rejects this record alone, with nothing written.
    /// `checkpoint_bytes_max` bounds an attempt's stored bytes ([`crate::limits::CHECKPOINT_BYTES_MAX`] for a new
    /// call).
    pub(crate) fn execute(
        &mut self,
        meta: &mut Meta,
        record: &Record,
        frames: &mut Vec<Vec<u8>>,
        checkpoint_bytes_max: u64,
    ) -> Result<Decided<Applied>, Error> {
        self.execute_placed(meta, record, Placement::Fresh, frames, checkpoint_bytes_max)
    }

    /// [`Tables::execute`], with a stage's part placed by `placement`.
    pub(crate) fn execute_placed(
        &mut self,
        meta: &mut Meta,
        record: &Record,
        placement: Placement,
        frames: &mut Vec<Vec<u8>>,
        checkpoint_bytes_max: u64,
    ) -> Result<Decided<Applied>, Error> {
        let epoch = meta.epoch;
        self.settle_named_by(record)?;
        self.sizes.forget_named_by(record);
        let outcome = match record {
            Record::Stage { id, attempt, part, keys, results } => {
                let call = StageCall { id, attempt: *attempt, part: *part, keys, results };
                self.stage(meta, &call, placement, checkpoint_bytes_max)?
            }
            Record::Seal { id, parts } => self.seal(id, *parts, epoch)?,
            Record::Restart { id } => {
                let cur = read_checkpoint(&self.checkpoints, id)?;
                self.single(id, cur, epoch, &Event::Restart)?
            }
            Record::Abort { id } => {
                let cur = read_checkpoint(&self.checkpoints, id)?;
                self.single(id, cur, epoch, &Event::Abort)?
            }
            Record::ForceAbort { ids, .. } => self.each(ids, epoch, &Event::ForceAbort)?,
            // A retried commit_empty of checkpoints already committed empty changes nothing and writes nothing.
            Record::CommitEmpty { ids } => self.each(ids, epoch, &Event::CommitEmpty)?,
            Record::BeginCommit { key, ids, target_version, final_commit } => {
                self.begin_commit(meta, *key, ids, *target_version, *final_commit)?
            }
            Record::MarkCommitted { key } | Record::Resolve { key, resolution: Resolution::Committed, .. } => {
                let state = CheckpointState::Committed { key: Some(*key) };
                self.move_commit(meta, *key, &Event::MarkCommitted { key: *key }, state)?.map(written)
            }
            Record::MarkUnknown { key, .. } => {
                let state = CheckpointState::CommitUnknown { key: *key };
                self.move_commit(meta, *key, &Event::MarkUnknown { key: *key }, state)?.map(written)
            }
            Record::MarkNotCommitted { key } => {
                let state = CheckpointState::Committing { key: *key };
                self.move_commit(meta, *key, &Event::MarkNotCommitted { key: *key }, state)?.map(written)
            }
            // The checkpoints go back to Committing as after a probe; the record keeps the operator's verdict, so
            // the next run re-commits without probing (a probe that stays Unknown would never let it move).
            Record::Resolve { key, resolution: Resolution::NotCommitted, .. } => self
                .move_commit(meta, *key, &Event::MarkNotCommitted { key: *key }, COMMIT_AWAITS_RECOMMIT)?
                .map(written),
            Record::Unbind { key, .. } => self.unbind(meta, *key)?.map(written),
            Record::Finish => self.finish(meta)?.map(written),
            Record::Discard { id, attempt, results } => {
                let mut applied = written(true);
                applied.note_dropped(id, *attempt, results.clone());
                Decided::Applied(applied)
            }
            Record::ForgetGarbage { entries } => Decided::Applied(written(self.forget_garbage(entries)?)),
            Record::Create { .. } | Record::Open { .. } => {
                return Err(Error::bug("Create and Open are applied by the opener, not by execute"));
            }
        };
        // What restart, abort and force_abort dropped goes to the garbage ledger under this record's sequence
        // number (the one `append` gives it below), so a replay of the log rebuilds the very same rows.
        if let Decided::Applied(applied) = &outcome
            && applied.written
        {
            self.ledger(meta.next_seq, applied)?;
        }
        // An operator's record is logged even when it changes nothing, so the reason is never lost.
        let operator = matches!(record, Record::Resolve { .. } | Record::ForceAbort { .. } | Record::Unbind { .. });
        if let Decided::Applied(applied) = &outcome
            && (applied.written || operator)
        {
            frames.push(self.append(meta, epoch, record)?);
        }
        Ok(outcome)
    }

    /// Applies one frame read back from the mirror, as the writer that logged it did: the frame must carry
    /// exactly the next sequence number, `Create` must come first and only first, `Open` must raise the epoch,
    /// and every other record goes through [`Tables::execute`] under the frame's epoch, must be accepted, and
    /// must re-encode to the very same bytes. Anything else means the mirror and this state have diverged (or
    /// the mirror is damaged): an error naming `place` and the sequence number. The caller writes the meta.
    pub(crate) fn replay(&mut self, meta: &mut Option<Meta>, bytes: &[u8], place: &str) -> Result<(), Error> {
        let frame = frame::decode_exact(bytes, place)?;
        let seq = frame.seq;
        let record = Record::from_payload(frame.payload, &format!("{place}, seq {seq}"))?;
        let expected = meta.as_ref().map_or(0, |m| m.next_seq);
        if seq != expected {
            return Err(Error::corrupt(format!("{place}: frame of seq {seq} where seq {expected} comes next")));
        }
        let diverged = |what: String| Error::corrupt(format!("{place}: replaying seq {seq}: {what}"));
        let written = match (&record, meta.as_mut()) {
            (Record::Create { job, target }, None) => {
                if frame.epoch != 0 {
                    return Err(diverged(format!("Create carries epoch {}", frame.epoch)));
                }
                let mut created = Meta {
                    format_version: crate::wal::tables::STORE_FORMAT_VERSION,
                    job: job.clone(),
                    target: target.clone(),
                    epoch: 0,
                    writer_tag: 0,
                    next_seq: 0,
                    log_start: 0,
                    seq: CommitSequence { next_key: 0, in_flight: None },
                    finished: false,
                };
                let out = self.append(&mut created, 0, &record)?;
                *meta = Some(created);
                vec![out]
            }
            (_, None) => return Err(diverged("the log does not begin with Create".into())),
            (Record::Create { .. }, Some(_)) => return Err(diverged("a second Create".into())),
            (Record::Open { writer_tag }, Some(m)) => {
                if frame.epoch <= m.epoch {
                    return Err(diverged(format!("Open of epoch {} after epoch {}", frame.epoch, m.epoch)));
                }
                m.epoch = frame.epoch;
                m.writer_tag = *writer_tag;
                vec![self.append(m, frame.epoch, &record)?]
            }
            (_, Some(m)) => {
                if frame.epoch != m.epoch {
                    return Err(diverged(format!("a record of epoch {} within epoch {}", frame.epoch, m.epoch)));
                }
                let mut out = Vec::new();
                // What a writer accepted stays accepted: a limit lowered since (or an 0.1 log staged before it
                // existed) must not turn a mirror's log into a divergence.
                if let Decided::Refused(rejected) = self.execute(m, &record, &mut out, u64::MAX)? {
                    return Err(diverged(format!("the state rejects it: {rejected}")));
                }
                out
            }
        };
        if written.len() != 1 || written[0] != bytes {
            return Err(diverged("the state does not log it back as the same frame".into()));
        }
        Ok(())
    }

    /// A stage call: a new part of the current attempt grows it (its size is tracked, so the limit check does
    /// not sum the attempt's parts again); a retried part changes nothing.
    fn stage(
        &mut self,
        meta: &Meta,
        call: &StageCall<'_>,
        placement: Placement,
        checkpoint_bytes_max: u64,
    ) -> Result<Decided<Applied>, Error> {
        let StageCall { id, attempt, part, keys, results } = *call;
        let cur = read_checkpoint(&self.checkpoints, id)?;
        // Encoded from borrowed fields: the same bytes as a `PartValue`, without cloning every key and result of
        // the call first.
        let bytes = encode_value(&PartValueRef { keys, results })?;
        let existing = self.part_match(id, cur.as_ref(), attempt, part, &bytes)?;
        // Only a new part of the current attempt can grow it: the sum is skipped for every other call.
        // `known`: whether `size` is the attempt's true size (a new checkpoint has no parts).
        let empty = AttemptSize { attempt, bytes: 0, parts: 0 };
        let (size, known) = match &cur {
            Some(c) if c.state == CheckpointState::Staged && c.attempt == attempt && existing == PartMatch::Absent => {
                (self.attempt_size(id, attempt)?, true)
            }
            None => (empty, true),
            Some(_) => (empty, false),
        };
        let event = Event::Stage {
            attempt,
            part,
            existing,
            bytes: StageBytes { part: bytes.len() as u64, attempt: size.bytes, max: checkpoint_bytes_max },
        };
        let step = match transition(id, cur.as_ref(), meta.epoch, &event) {
            Err(e) => return Ok(Decided::Refused(e)),
            Ok(step) if step.effect == Effect::None => return Ok(Decided::Applied(Applied::default())),
            Ok(step) => step,
        };
        let new = NewPart { bytes: &bytes, attempt, part, seq: meta.next_seq, placement };
        self.apply_step(id, cur.as_ref(), &step, Some(&new))?;
        if known && existing == PartMatch::Absent {
            let grown = AttemptSize { bytes: size.bytes + bytes.len() as u64, parts: size.parts + 1, ..size };
            self.sizes.set(id, grown);
        } else {
            self.sizes.forget(id);
        }
        Ok(Decided::Applied(Applied { written: true, ..Applied::default() }))
    }

    /// A seal: decided on the facts of the current attempt's parts (which are present, whether a key is another
    /// checkpoint's, how many results).
    fn seal(&mut self, id: &CheckpointId, parts: u32, epoch: Epoch) -> Result<Decided<Applied>, Error> {
        let cur = read_checkpoint(&self.checkpoints, id)?;
        let facts = match &cur {
            Some(c) if c.state == CheckpointState::Staged => self.seal_facts(id, c.attempt)?,
            _ => SealFacts::default(),
        };
        let event =
            Event::Seal { parts, present: &facts.present, key_conflict: facts.key_conflict, results: facts.results };
        self.single(id, cur, epoch, &event)
    }

    /// A commit key begun: the sequence allows it, every checkpoint moves to Committing, and the key's record is
    /// written with the version it was prepared against.
    fn begin_commit(
        &mut self,
        meta: &mut Meta,
        key: u64,
        ids: &[CheckpointId],
        target_version: Option<u64>,
        final_commit: bool,
    ) -> Result<Decided<Applied>, Error> {
        let mut results = 0u64;
        for id in ids {
            results += read_checkpoint(&self.checkpoints, id)?.map_or(0, |c| u64::from(c.results));
        }
        if let Err(e) = commit_transition(&meta.seq, &CommitEvent::Begin { key, ids, results }) {
            return Ok(Decided::Refused(e));
        }
        if let Decided::Refused(e) = self.each(ids, meta.epoch, &Event::BeginCommit { key })? {
            return Ok(Decided::Refused(e));
        }
        let state = CheckpointState::Committing { key };
        let value = CommitValue { ids: ids.to_vec(), target_version, final_commit, epoch: meta.epoch, state };
        self.commits.insert(key, encode_value(&value)?.as_slice())?;
        meta.seq = CommitSequence { next_key: key + 1, in_flight: Some(key) };
        Ok(Decided::Applied(Applied { written: true, ..Applied::default() }))
    }

    /// Removes the given entries from the garbage ledger; whether any was there.
    fn forget_garbage(&mut self, entries: &[(u64, u32)]) -> Result<bool, Error> {
        let mut removed = false;
        for &(seq, index) in entries {
            removed |= self.garbage.remove((seq, index))?.is_some();
        }
        Ok(removed)
    }

    /// Adds what `applied` dropped to the garbage ledger under `seq`, each result with its checkpoint and attempt.
    fn ledger(&mut self, seq: u64, applied: &Applied) -> Result<(), Error> {
        let mut results = applied.dropped.iter();
        let mut index = 0u32;
        for (id, attempt, count) in &applied.dropped_from {
            for result in results.by_ref().take(*count) {
                let value = GarbageValue { id: id.clone(), attempt: *attempt, result: result.clone() };
                self.garbage.insert((seq, index), encode_value(&value)?.as_slice())?;
                index = index.checked_add(1).ok_or_else(|| Error::bug("more dropped results than a u32 counts"))?;
            }
        }
        if results.next().is_some() {
            return Err(Error::bug("dropped write results without a checkpoint"));
        }
        Ok(())
    }

    fn single(
        &mut self,
        id: &CheckpointId,
        cur: Option<CheckpointRecord>,
        epoch: Epoch,
        event: &Event<'_>,
    ) -> Result<Decided<Applied>, Error> {
        match transition(id, cur.as_ref(), epoch, event) {
            Err(e) => Ok(Decided::Refused(e)),
            Ok(step) if step.effect == Effect::None && cur.as_ref() == Some(&step.next) => {
                Ok(Decided::Applied(Applied::default()))
            }
            Ok(step) => {
                let mut applied = Applied { written: true, ..Applied::default() };
                if let Some((attempt, results)) = self.apply_step(id, cur.as_ref(), &step, None)? {
                    applied.note_dropped(id, attempt, results);
                }
                Ok(Decided::Applied(applied))
            }
        }
    }
}

/// What the state machine decided about a record: applied (what it changed, and logged if it changed anything),
/// or refused by a typed [`TransitionError`] with nothing written. The functions that decide return it inside
/// `Result<_, Error>`: an `Err` there is a failure to read or write the tables, which fails the writer's whole
/// group; a refusal is the one caller's, and the group goes on.
#[must_use]
#[derive(Debug)]
pub(crate) enum Decided<T> {
    /// Applied.
    Applied(T),
    /// Refused: nothing was written.
    Refused(TransitionError),
}

impl<T> Decided<T> {
    /// The applied value mapped by `f`; a refusal stays one.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Decided<U> {
        match self {
            Decided::Applied(t) => Decided::Applied(f(t)),
            Decided::Refused(e) => Decided::Refused(e),
        }
    }

    /// As a plain `Result`, for a test that matches on the refusal's kind or unwraps the applied value.
    #[cfg(test)]
    pub(crate) fn into_result(self) -> std::result::Result<T, TransitionError> {
        match self {
            Decided::Applied(t) => Ok(t),
            Decided::Refused(e) => Err(e),
        }
    }
}

/// A stage record's fields, borrowed.
#[derive(Clone, Copy)]
struct StageCall<'a> {
    id: &'a CheckpointId,
    attempt: u32,
    part: u32,
    keys: &'a [Vec<u8>],
    results: &'a [WriteResult],
}

fn written(changed: bool) -> Applied {
    Applied { written: changed, ..Applied::default() }
}

impl Applied {
    fn note_dropped(&mut self, id: &CheckpointId, attempt: u32, results: Vec<WriteResult>) {
        if !results.is_empty() {
            self.dropped_from.push((id.clone(), attempt, results.len()));
            self.dropped.extend(results);
        }
    }
}
