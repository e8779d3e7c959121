//! A decoded snapshot of every table of a durable redb image, the invariants it must satisfy after any crash,
//! and its logical view (what a caller can tell apart, without epochs, attempts and the log).
//!
//! A snapshot is read from a *copy* of the image, so the redb repair that opening an unclean image runs never
//! touches the image that recovery then opens.

use std::collections::{BTreeMap, BTreeSet};

use redb::{ReadableDatabase, ReadableTable, TableError};

use crate::state::{CheckpointRecord, CheckpointState, CommitSequence};
use crate::store::{CheckpointInfo, Pending, Store};
use crate::testkit::CrashBackend;
use crate::types::{JobId, SourceKey, TargetIdentity, WriteResult};
use crate::wal::frame;
use crate::wal::record::{Record, decode_value};
use crate::wal::tables::{
    CHECKPOINTS, COMMITS, CommitValue, KEYS, LOG, META, Meta, PARTS, PartValue, STATES, read_meta,
};
use crate::{CheckpointId, StateFilter};

/// Every table of one durable image, decoded.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Image {
    meta: Meta,
    log: BTreeMap<u64, Vec<u8>>,
    checkpoints: BTreeMap<String, CheckpointRecord>,
    parts: BTreeMap<(String, u32, u32), PartValue>,
    keys: BTreeMap<Vec<u8>, String>,
    states: BTreeSet<(u8, String)>,
    commits: BTreeMap<u64, CommitValue>,
}

/// What a caller can tell apart in an image: states, part contents, key owners and commits, without the epochs,
/// attempt numbers, writer tags and log positions that a crash and its recovery legitimately change.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Logical {
    job: JobId,
    target: TargetIdentity,
    seq: CommitSequence,
    finished: bool,
    /// Per checkpoint: its state, sealed part count, result count, and its current attempt's parts.
    checkpoints: BTreeMap<String, (CheckpointState, u32, u32, BTreeMap<u32, PartValue>)>,
    keys: BTreeMap<Vec<u8>, String>,
    /// Per commit key: ids, target version, final flag, state.
    commits: BTreeMap<u64, (Vec<CheckpointId>, Option<u64>, bool, CheckpointState)>,
}

fn fail(what: impl std::fmt::Display) -> String {
    what.to_string()
}

impl Image {
    /// Decodes the durable image of `backend` (from a copy); `None` when no store was ever committed to it.
    pub fn read(backend: &CrashBackend) -> Result<Option<Image>, String> {
        Self::read_bytes(backend.durable_bytes())
    }

    /// Decodes a durable image given as bytes; `None` when no store was ever committed to it.
    pub fn read_bytes(bytes: Vec<u8>) -> Result<Option<Image>, String> {
        let copy = CrashBackend::from_bytes(bytes);
        // A file whose creation crashed inside redb holds no store; the store's open empties it the same way.
        crate::wal::half_created::reset_backend(&copy, true).map_err(fail)?;
        let db = redb::Builder::new()
            .create_with_backend(copy)
            .map_err(|e| format!("redb cannot open the crash image: {e}"))?;
        Self::from_database(&db)
    }

    /// Decodes the committed state of an open store: what it has acknowledged.
    pub fn from_store(store: &Store) -> Result<Option<Image>, String> {
        Self::from_database(store.database())
    }

    /// Decodes the committed state of any database holding a store's tables (a mirror view's, say).
    pub(crate) fn from_database(db: &redb::Database) -> Result<Option<Image>, String> {
        let txn = db.begin_read().map_err(fail)?;
        let meta_table = match txn.open_table(META) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(fail(e)),
        };
        let Some(meta) = read_meta(&meta_table, &txn.open_table(LOG).map_err(fail)?).map_err(fail)? else {
            return Ok(None);
        };
        let mut image = Image {
            meta,
            log: BTreeMap::new(),
            checkpoints: BTreeMap::new(),
            parts: BTreeMap::new(),
            keys: BTreeMap::new(),
            states: BTreeSet::new(),
            commits: BTreeMap::new(),
        };
        for entry in txn.open_table(LOG).map_err(fail)?.iter().map_err(fail)? {
            let (k, v) = entry.map_err(fail)?;
            image.log.insert(k.value(), v.value().to_vec());
        }
        for entry in txn.open_table(CHECKPOINTS).map_err(fail)?.iter().map_err(fail)? {
            let (k, v) = entry.map_err(fail)?;
            let record = decode_value(v.value(), &|| format!("checkpoints {}", k.value())).map_err(fail)?;
            image.checkpoints.insert(k.value().to_owned(), record);
        }
        for entry in txn.open_table(PARTS).map_err(fail)?.iter().map_err(fail)? {
            let (k, v) = entry.map_err(fail)?;
            let (id, attempt, part) = k.value();
            let value = decode_value(v.value(), &|| format!("parts {id}")).map_err(fail)?;
            image.parts.insert((id.to_owned(), attempt, part), value);
        }
        // A fresh part is the same part as the row it becomes: images compare parts wherever they are stored.
        crate::wal::fresh::visit_stored(&txn, None, |_, fresh| {
            let key = (fresh.id.as_str().to_owned(), fresh.attempt, fresh.part);
            match image.parts.insert(key.clone(), fresh.value) {
                None => Ok(()),
                Some(_) => Err(crate::Error::corrupt(format!("part {key:?} is both in table parts and fresh"))),
            }
        })
        .map_err(fail)?;
        for entry in txn.open_table(KEYS).map_err(fail)?.iter().map_err(fail)? {
            let (k, v) = entry.map_err(fail)?;
            image.keys.insert(k.value().to_vec(), v.value().to_owned());
        }
        for entry in txn.open_table(STATES).map_err(fail)?.iter().map_err(fail)? {
            let (k, _) = entry.map_err(fail)?;
            let (code, id) = k.value();
            image.states.insert((code, id.to_owned()));
        }
        for entry in txn.open_table(COMMITS).map_err(fail)?.iter().map_err(fail)? {
            let (k, v) = entry.map_err(fail)?;
            let value = decode_value(v.value(), &|| format!("commits {}", k.value())).map_err(fail)?;
            image.commits.insert(k.value(), value);
        }
        // A Staged record carries no count of its write results (a stage does not rewrite it): the image counts
        // its current attempt's parts, as the store's reads do, so images of the same state compare equal.
        let counted: BTreeMap<String, u32> = image
            .checkpoints
            .iter()
            .filter(|(_, r)| r.state == CheckpointState::Staged)
            .map(|(id, r)| (id.clone(), image.results_of(id, r).len() as u32))
            .collect();
        for (id, record) in &mut image.checkpoints {
            if let Some(results) = counted.get(id) {
                record.results = *results;
            }
        }
        Ok(Some(image))
    }

    /// The epoch of the writer that last opened the store.
    pub fn epoch(&self) -> u64 {
        self.meta.epoch
    }

    /// The sequence number after the last record.
    pub fn next_seq(&self) -> u64 {
        self.meta.next_seq
    }

    /// Every checkpoint's record, by id.
    pub(crate) fn checkpoint_records(&self) -> &BTreeMap<String, CheckpointRecord> {
        &self.checkpoints
    }

    /// Every commit key's record, by number.
    pub(crate) fn commit_records(&self) -> &BTreeMap<u64, CommitValue> {
        &self.commits
    }

    /// The skip set: every processed key and the checkpoint that owns it.
    pub(crate) fn key_owners(&self) -> &BTreeMap<Vec<u8>, String> {
        &self.keys
    }

    /// The logical view.
    pub fn logical(&self) -> Logical {
        let checkpoints = self
            .checkpoints
            .iter()
            .map(|(id, r)| (id.clone(), (r.state, r.parts, r.results, self.current_parts(id, r))))
            .collect();
        let commits = self
            .commits
            .iter()
            .map(|(n, c)| (*n, (c.ids.clone(), c.target_version, c.final_commit, c.state)))
            .collect();
        Logical {
            job: self.meta.job.clone(),
            target: self.meta.target.clone(),
            seq: self.meta.seq,
            finished: self.meta.finished,
            checkpoints,
            keys: self.keys.clone(),
            commits,
        }
    }

    fn current_parts(&self, id: &str, record: &CheckpointRecord) -> BTreeMap<u32, PartValue> {
        let lo = (id.to_owned(), record.attempt, 0);
        let hi = (id.to_owned(), record.attempt, u32::MAX);
        self.parts.range(lo..=hi).map(|((_, _, part), v)| (*part, v.clone())).collect()
    }

    /// The write results a Sealed, Committing or CommitUnknown checkpoint holds, in part order.
    fn results_of(&self, id: &str, record: &CheckpointRecord) -> Vec<WriteResult> {
        self.current_parts(id, record).into_values().flat_map(|p| p.results).collect()
    }

    /// Checks every invariant that must hold in any durable image, whatever crashed where.
    pub fn check(&self) -> Result<(), String> {
        self.check_log()?;
        self.check_checkpoints()?;
        self.check_keys()?;
        self.check_commits()
    }

    fn check_log(&self) -> Result<(), String> {
        let m = &self.meta;
        let seqs: Vec<u64> = self.log.keys().copied().collect();
        let expected: Vec<u64> = (m.log_start..m.next_seq).collect();
        if seqs != expected {
            return Err(format!("log holds seqs {seqs:?}, meta says {}..{}", m.log_start, m.next_seq));
        }
        let mut last_epoch = 0;
        for (seq, bytes) in &self.log {
            let frame = frame::decode_exact(bytes, "log").map_err(fail)?;
            Record::from_payload(frame.payload, "log").map_err(fail)?;
            if frame.seq != *seq || frame.epoch < last_epoch || frame.epoch > m.epoch {
                return Err(format!("log seq {seq}: frame seq {} epoch {} out of order", frame.seq, frame.epoch));
            }
            last_epoch = frame.epoch;
        }
        Ok(())
    }

    fn check_checkpoints(&self) -> Result<(), String> {
        let expected: BTreeSet<(u8, String)> =
            self.checkpoints.iter().map(|(id, r)| (r.state.code(), id.clone())).collect();
        if expected != self.states {
            return Err(format!("the state index {:?} does not match the checkpoints {expected:?}", self.states));
        }
        for (id, attempt, part) in self.parts.keys() {
            let current = self.checkpoints.get(id).map(|r| r.attempt);
            if current != Some(*attempt) {
                return Err(format!("part ({id}, {attempt}, {part}) is left of an attempt that is not current"));
            }
        }
        for (id, r) in &self.checkpoints {
            let parts = self.current_parts(id, r);
            let results: usize = parts.values().map(|p| p.results.len()).sum();
            let numbers: Vec<u32> = parts.keys().copied().collect();
            use CheckpointState as S;
            match r.state {
                S::Staged | S::Aborted if r.parts != 0 => return Err(format!("{id} is {:?} with parts", r.state)),
                S::Aborted if !parts.is_empty() => return Err(format!("{id} is aborted but keeps parts {numbers:?}")),
                S::Committed { key: Some(_) } if !parts.is_empty() => {
                    return Err(format!("{id} is committed but its parts {numbers:?} were not released"));
                }
                S::Committed { key: Some(_) } | S::Aborted => {}
                S::Staged | S::Sealed | S::Committing { .. } | S::CommitUnknown { .. } | S::Committed { key: None } => {
                    if results != r.results as usize {
                        return Err(format!("{id} records {} results but holds {results}", r.results));
                    }
                    if r.state != S::Staged && numbers != (0..r.parts).collect::<Vec<_>>() {
                        return Err(format!("{id} is sealed with {} parts but holds {numbers:?}", r.parts));
                    }
                    if r.state == (S::Committed { key: None }) && results != 0 {
                        return Err(format!("{id} is committed empty but holds {results} results"));
                    }
                }
            }
        }
        Ok(())
    }

    fn check_keys(&self) -> Result<(), String> {
        for (key, owner) in &self.keys {
            let Some(r) = self.checkpoints.get(owner) else {
                return Err(format!("key {key:?} is owned by {owner}, which does not exist"));
            };
            if !r.state.keys_processed() {
                return Err(format!("key {key:?} is owned by {owner}, which is {:?}", r.state));
            }
            let parts = self.current_parts(owner, r);
            if !matches!(r.state, CheckpointState::Committed { key: Some(_) })
                && !parts.values().any(|p| p.keys.contains(key))
            {
                return Err(format!("key {key:?} is owned by {owner}, whose parts do not hold it"));
            }
        }
        // One owner per key: every key of a processed checkpoint's parts belongs to that checkpoint.
        for (id, r) in self.checkpoints.iter().filter(|(_, r)| r.state.keys_processed()) {
            for part in self.current_parts(id, r).values() {
                for key in &part.keys {
                    if self.keys.get(key) != Some(id) {
                        return Err(format!(
                            "{id} is {:?} but its key {key:?} is owned by {:?}",
                            r.state,
                            self.keys.get(key)
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn check_commits(&self) -> Result<(), String> {
        let seq = self.meta.seq;
        let numbers: Vec<u64> = self.commits.keys().copied().collect();
        if numbers != (0..seq.next_key).collect::<Vec<_>>() {
            return Err(format!("commits {numbers:?} do not match next key {}", seq.next_key));
        }
        let open: Vec<u64> = self
            .commits
            .iter()
            .filter(|(_, c)| !matches!(c.state, CheckpointState::Committed { .. }))
            .map(|(n, _)| *n)
            .collect();
        let expected_open: Vec<u64> = seq.in_flight.into_iter().collect();
        if open != expected_open || seq.in_flight.is_some_and(|n| n + 1 != seq.next_key) {
            return Err(format!("commits {open:?} are open but the sequence says {seq:?}"));
        }
        let finished =
            self.commits.values().any(|c| c.final_commit && matches!(c.state, CheckpointState::Committed { .. }));
        // A job may also be recorded finished without a final key (`Record::Finish`), never the other way.
        if finished && !self.meta.finished {
            return Err(format!("finished is {} but the final commit landed: {finished}", self.meta.finished));
        }
        for (n, c) in &self.commits {
            if c.ids.is_empty() || c.ids.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("commit {n} covers {:?}, not a sorted set", c.ids));
            }
            let expected = match c.state {
                CheckpointState::Committing { key } | CheckpointState::CommitUnknown { key } if key == *n => c.state,
                CheckpointState::Committed { key: Some(key) } if key == *n => c.state,
                // An operator's NotCommitted verdict, waiting for its re-commit: the checkpoints are Committing.
                _ if c.awaits_recommit() => CheckpointState::Committing { key: *n },
                other => return Err(format!("commit {n} is in state {other:?}")),
            };
            for id in &c.ids {
                let state = self.checkpoints.get(id.as_str()).map(|r| r.state);
                if state != Some(expected) {
                    return Err(format!("commit {n} is {expected:?} but its checkpoint {id} is {state:?}"));
                }
            }
        }
        for (id, r) in &self.checkpoints {
            let key = match r.state {
                CheckpointState::Committing { key }
                | CheckpointState::CommitUnknown { key }
                | CheckpointState::Committed { key: Some(key) } => key,
                _ => continue,
            };
            if !self.commits.get(&key).is_some_and(|c| c.ids.iter().any(|i| i.as_str() == id)) {
                return Err(format!("{id} is {:?} but commit {key} does not cover it", r.state));
            }
        }
        Ok(())
    }

    /// Checks that `store`, just opened on this image, answers every read as the image says: acked parts are
    /// there, sealed keys are processed, pending results are the staged results of pending checkpoints, the
    /// commit records and the orphans are right.
    pub fn check_store(image: Option<&Image>, store: &Store) -> Result<(), String> {
        let expected_epoch = image.map_or(1, |i| i.meta.epoch + 1);
        if store.epoch() != expected_epoch {
            return Err(format!("reopened at epoch {}, expected {expected_epoch}", store.epoch()));
        }
        let Some(image) = image else {
            let pending = store.pending().map_err(fail)?;
            if !pending.checkpoints.is_empty() || store.processed_keys().next().is_some() {
                return Err("a store recovered from an empty image is not empty".into());
            }
            return Ok(());
        };
        let info = |id: &String, r: &CheckpointRecord| -> Result<CheckpointInfo, String> {
            Ok(CheckpointInfo {
                id: CheckpointId::new(id.clone()).map_err(fail)?,
                state: r.state,
                attempt: crate::Attempt::new(r.attempt),
                epoch: r.epoch,
                parts: r.parts,
                results: r.results,
            })
        };
        for (id, r) in &image.checkpoints {
            let expected = info(id, r)?;
            let got = store.get(&expected.id).map_err(fail)?;
            if got.as_ref() != Some(&expected) {
                return Err(format!("get({id}) = {got:?}, the image says {expected:?}"));
            }
        }
        let filters = StateFilter::ALL;
        for filter in filters {
            let got = store.list(filter).map_err(fail)?;
            let expected: Vec<CheckpointInfo> = image
                .checkpoints
                .iter()
                .filter(|(_, r)| r.state.code() == filter.code())
                .map(|(id, r)| info(id, r))
                .collect::<Result<_, _>>()?;
            if got != expected {
                return Err(format!("list({filter:?}) = {got:?}, the image says {expected:?}"));
            }
        }
        let pending = store.pending().map_err(fail)?;
        let expected = image.pending(&info)?;
        if pending != expected {
            return Err(format!("pending() = {pending:?}, the image says {expected:?}"));
        }
        let keys: Vec<SourceKey> = store.processed_keys().collect::<Result<_, _>>().map_err(fail)?;
        if keys != image.keys.keys().cloned().collect::<Vec<_>>() {
            return Err(format!("processed keys {keys:?}, the image says {:?}", image.keys));
        }
        for key in image.keys.keys() {
            if !store.is_processed(key).map_err(fail)? {
                return Err(format!("key {key:?} is in the image but not processed"));
            }
        }
        for n in 0..=image.meta.seq.next_key {
            let got = store.commit_value(n).map_err(fail)?;
            if got.as_ref() != image.commits.get(&n) {
                return Err(format!("commit_info({n}) = {got:?}, the image says {:?}", image.commits.get(&n)));
            }
        }
        let mut orphans: Vec<String> = store.orphans().iter().map(|id| id.as_str().to_owned()).collect();
        orphans.sort();
        let expected: Vec<String> = image
            .checkpoints
            .iter()
            .filter(|(_, r)| r.state == CheckpointState::Staged && r.epoch < store.epoch())
            .map(|(id, _)| id.clone())
            .collect();
        if orphans != expected {
            return Err(format!("orphans {orphans:?}, the image says {expected:?}"));
        }
        Ok(())
    }

    fn pending(
        &self,
        info: &dyn Fn(&String, &CheckpointRecord) -> Result<CheckpointInfo, String>,
    ) -> Result<Pending, String> {
        let mut checkpoints = Vec::new();
        for (id, r) in self.checkpoints.iter().filter(|(_, r)| r.state.is_pending()) {
            checkpoints.push(crate::store::PendingCheckpoint { info: info(id, r)?, results: self.results_of(id, r) });
        }
        let in_flight = self
            .meta
            .seq
            .in_flight
            .and_then(|n| self.commits.get(&n).map(|c| crate::store::CommitInfo::from_value(n, c.clone())));
        Ok(Pending { checkpoints, in_flight, next_key: self.meta.seq.next_key, finished: self.meta.finished })
    }
}
