//! The worker handle: stage into the inbox, seal by winning the checkpoint's claim; or both at once with the
//! claim alone (`stage_and_seal`: the seal holds the part whole, and the committer lists the claims).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use object_store::path::Path;

use super::envelope::{self, Author, Body, KeyClaim, Seal, Staged};
use super::{Created, KeyExclusivity, SharedStaging, for_key_hash, key_hash, seal_hash};
use crate::error::{Error, Result, TransitionError};
use crate::limits::{LIST_PREVIEW_MAX, WORKER_NAME_BYTES_MAX, WORKER_SEALED_REMEMBERED_MAX};
use crate::state::CheckpointState;
use crate::store::StageOutcome;
use crate::store::checks::check_stage;
use crate::types::{Attempt, CheckpointId, Part, SourceKey, StagePart, WriteResult};

/// Who sealed a checkpoint.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SealedBy {
    /// The worker's name.
    pub worker: String,
    /// The session of the [`Worker`] handle that sealed it.
    pub session: u128,
    /// Its attempt.
    pub attempt: u32,
}

impl std::fmt::Display for SealedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "worker {:?}, session {:032x}, attempt {}", self.worker, self.session, self.attempt)
    }
}

/// One part as this handle staged it.
#[derive(Debug)]
struct Held {
    staged: Staged,
    /// Whether it has an inbox entry: parts of [`Worker::stage`] do, the part of [`Worker::stage_and_seal`] does
    /// not (its seal holds it whole), so there is nothing to delete for it.
    in_inbox: bool,
}

/// One checkpoint as this handle staged it.
#[derive(Debug)]
struct Local {
    attempt: u32,
    /// The current attempt's parts while Staged; emptied once sealed, so a long-lived worker holds only what it
    /// has not sealed yet.
    parts: BTreeMap<u32, Held>,
    state: CheckpointState,
    /// The part count it was sealed with (0 before).
    sealed_parts: u32,
}

/// A worker's handle on a job's shared staging: `is_processed`, `stage`, `seal`, `restart`, `abort`, with the
/// state rules of [`crate::Store`]. Every call returns only once what it recorded is in the object store; what
/// the handle remembers (the parts it staged, and its newest `WORKER_SEALED_REMEMBERED_MAX` (4,096) seals) is a
/// cache of its own calls, never a second truth: a task retried in a new process starts a new handle (a new
/// session) and stages again, and a seal the handle forgot is answered by its claim.
///
/// ```
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// use std::sync::Arc;
/// use object_store::memory::InMemory;
/// use sinkpoint::shared::{SharedStaging, Worker};
/// use sinkpoint::{CheckpointId, Format, JobId, WriteResult};
/// let shared = SharedStaging::new(Arc::new(InMemory::new()), "t", JobId::new("j")?)?;
/// let worker = Worker::new(shared, "task-7")?;
/// let input = b"s3://in/0001.parquet";
/// let id = CheckpointId::for_key(input);
/// assert!(!worker.is_processed(input).await?);
/// let result = WriteResult::new(Format::Parquet, b"data/0001.parquet".to_vec())?;
/// worker.stage_and_seal(&id, vec![input.to_vec()], vec![result]).await?;
/// assert!(worker.is_processed(input).await?);
/// # Ok::<(), sinkpoint::Error>(()) })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Worker {
    shared: SharedStaging,
    author: Author,
    local: Mutex<HashMap<CheckpointId, Local>>,
    /// The sealed checkpoints `local` still holds, oldest first: at most `WORKER_SEALED_REMEMBERED_MAX`. Locked
    /// only while `local` is.
    sealed: Mutex<VecDeque<CheckpointId>>,
}

impl Worker {
    /// A handle for the worker named `name` (a host, a task attempt: it only appears in messages), with a
    /// random session.
    pub fn new(shared: SharedStaging, name: &str) -> Result<Self> {
        Self::with_session(shared, name, crate::store::random_tag())
    }

    /// [`Worker::new`] with the session given: tests inject it; two live handles must never share one.
    pub fn with_session(shared: SharedStaging, name: &str, session: u128) -> Result<Self> {
        if name.is_empty() || name.len() > WORKER_NAME_BYTES_MAX {
            return Err(Error::invalid_input(format!(
                "worker name is {} bytes; it must be 1 to {WORKER_NAME_BYTES_MAX}",
                name.len()
            )));
        }
        let author = Author { worker: name.to_owned(), session };
        Ok(Self { shared, author, local: Mutex::new(HashMap::new()), sealed: Mutex::new(VecDeque::new()) })
    }

    /// This handle's session.
    pub fn session(&self) -> u128 {
        self.author.session
    }

    /// Whether `key` belongs to a checkpoint some worker sealed (and whose claim the committer has not released).
    /// One read (two for a key of a checkpoint that holds several keys), and one more per release of its claim.
    ///
    /// Under [`KeyExclusivity::AtAdoption`] only a key's own claim (a [`CheckpointId::for_key`] seal) answers:
    /// a key with no claim may be in a checkpoint of several keys, which claims none, so the call fails
    /// `InvalidInput` rather than guess; the committer's store knows (`Store::is_processed`).
    pub async fn is_processed(&self, key: &[u8]) -> Result<bool> {
        crate::types::check_source_key(key)?;
        let hash = key_hash(key);
        match self.shared.current_claim(&hash).await?.body {
            None if self.shared.key_exclusivity() == KeyExclusivity::AtAdoption => Err(Error::invalid_input(format!(
                "source key {:?} has no claim, and job {} decides key exclusivity at adoption, so its workers do \
                 not claim the keys of checkpoints that hold several: ask the committer's store \
                 (Store::is_processed), or stage under KeyExclusivity::AtSeal to ask workers",
                String::from_utf8_lossy(key),
                self.shared.job()
            ))),
            None => Ok(false),
            Some(Body::Seal(_)) => Ok(true),
            // Processed only if the owner's seal holds the key: an attempt that claimed it and then lost its
            // seal to an attempt with other keys left a claim the winner does not honour.
            Some(Body::KeyClaim(claim)) => {
                Ok(self.seal_of(&claim.id).await?.is_some_and(|s| s.keys.iter().any(|k| k == key)))
            }
            Some(Body::Staged(_) | Body::Released(_)) => Err(Error::corrupt(format!(
                "{}: not a claim where a claim belongs",
                self.describe(&self.shared.claim_at(&hash, 0))
            ))),
        }
    }

    /// Who sealed checkpoint `id`, if anyone has (a released seal does not count). One read, and one more per
    /// release of its claim.
    pub async fn sealed_by(&self, id: &CheckpointId) -> Result<Option<SealedBy>> {
        id.check()?;
        Ok(self.seal_of(id).await?.as_ref().map(sealed_by))
    }

    async fn seal_of(&self, id: &CheckpointId) -> Result<Option<Seal>> {
        Ok(match self.shared.current_claim(&seal_hash(id)).await?.body {
            Some(Body::Seal(seal)) if &seal.id == id => Some(seal),
            _ => None,
        })
    }

    /// Stages one part of checkpoint `id`: one put into the inbox. The same part again with the same bytes is
    /// `AlreadyStaged` and puts nothing.
    pub async fn stage(&self, id: &CheckpointId, part: StagePart) -> Result<StageOutcome> {
        let staged = self.staged(id, part)?;
        if self.check_stage_locally(&staged)? {
            return Ok(StageOutcome::AlreadyStaged);
        }
        let bytes = envelope::encode(&Body::Staged(staged.clone()))?;
        self.shared.put(&self.inbox_path(&staged), bytes).await?;
        self.hold(staged, true)?;
        Ok(StageOutcome::Staged)
    }

    /// Seals checkpoint `id` with parts `0..parts` of its current attempt, all staged by this handle: claims
    /// its keys (none for an id from [`CheckpointId::for_key`], nor under [`KeyExclusivity::AtAdoption`]), then
    /// creates its seal. Of two attempts racing
    /// on one id, the create decides; the loser gets [`TransitionError::SealLost`] naming the winner and
    /// carrying its own results for cleanup. Sealing again what this handle sealed is a no-op.
    pub async fn seal(&self, id: &CheckpointId, parts: u32) -> Result<()> {
        id.check()?;
        let Some(seal) = self.collect_seal(id, parts)? else { return Ok(()) };
        self.claim_keys(&seal).await?;
        let hash = seal_hash(id);
        let bytes = envelope::encode(&Body::Seal(seal.clone()))?;
        // The first generation first: one request unless the claim was released, then one more a release.
        let mut generation = 0;
        loop {
            let path = self.shared.claim_at(&hash, generation);
            let found = match self.shared.create(&path, &bytes).await? {
                Created::Ours => {
                    self.mark_sealed(id)?;
                    return Ok(());
                }
                Created::Taken(found) => found,
            };
            match envelope::decode(&found, &self.describe(&path))? {
                Body::Released(r) => {
                    super::check_next(generation, r.next, &self.describe(&path))?;
                    generation = r.next;
                }
                _ => return self.lost(id, &path, &found, seal.results).await,
            }
        }
    }

    /// Stages everything in one part and seals it: **one request** for an id from [`CheckpointId::for_key`]
    /// (the seal's conditional create), and for any id when the job decides key exclusivity
    /// [at adoption](KeyExclusivity::AtAdoption); otherwise one more create per key. The part is recorded in this
    /// handle under the rules of [`Worker::stage`] (attempt checks, the same part again is a no-op, another part
    /// under its number is `PartConflict`) but gets no inbox entry: the seal holds it whole, and the committer
    /// finds seals by listing the claims ([`super::Inbox::adopt`]). So an attempt that dies before its create
    /// lands leaves nothing in the object store; its data files are named nowhere (as those of one that dies
    /// before any stage call).
    pub async fn stage_and_seal(
        &self,
        id: &CheckpointId,
        keys: Vec<SourceKey>,
        results: Vec<WriteResult>,
    ) -> Result<()> {
        let attempt = match self.lock()?.get(id) {
            // A retry after this handle sealed it (its answer lost to the caller): a no-op, like `seal`.
            Some(l) if l.state == CheckpointState::Sealed && l.sealed_parts == 1 => return Ok(()),
            Some(l) => l.attempt,
            None => Attempt::FIRST.get(),
        };
        let part = StagePart::new(Attempt::new(attempt), Part::FIRST).keys(keys).results(results);
        let staged = self.staged(id, part)?;
        // The part is the whole seal: its keys are checked before it is recorded, so a refused call leaves the
        // handle as it was (a corrected retry is not a `PartConflict`).
        check_keys(id, &staged.keys)?;
        if !self.check_stage_locally(&staged)? {
            self.hold(staged, false)?;
        }
        self.seal(id, 1).await
    }

    /// Drops this handle's current attempt of `id` (its inbox entries, if any, are deleted) and begins the next;
    /// returns the dropped results for cleanup.
    pub async fn restart(&self, id: &CheckpointId) -> Result<Vec<WriteResult>> {
        self.drop_attempt(id, CheckpointState::Staged).await
    }

    /// Aborts `id` in this handle: its inbox entries are deleted, the results returned for cleanup. A sealed
    /// checkpoint cannot be aborted here: once adopted, the committer's operator can (`Operator::force_abort`),
    /// and the committer's next adoption round then releases its claim, so its input is read again.
    pub async fn abort(&self, id: &CheckpointId) -> Result<Vec<WriteResult>> {
        self.drop_attempt(id, CheckpointState::Aborted).await
    }

    // ---- internals ----

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, HashMap<CheckpointId, Local>>> {
        self.local.lock().map_err(|_| Error::bug("a worker handle's lock was poisoned by a panic"))
    }

    fn describe(&self, path: &Path) -> String {
        self.shared.describe(path)
    }

    /// One stage call's part, checked as the store checks it.
    fn staged(&self, id: &CheckpointId, part: StagePart) -> Result<Staged> {
        id.check()?;
        check_stage(part.part, &part.keys, &part.results)?;
        if part.keys.is_empty() && part.results.is_empty() {
            return Err(Error::invalid_input("a stage call carries no keys and no results; give it one or both"));
        }
        Ok(Staged {
            id: id.clone(),
            author: self.author.clone(),
            attempt: part.attempt.get(),
            part: part.part.get(),
            keys: part.keys,
            results: part.results,
        })
    }

    /// Records a part this handle staged (`in_inbox`: its entry is in the object store).
    fn hold(&self, staged: Staged, in_inbox: bool) -> Result<()> {
        let mut local = self.lock()?;
        let entry = local.entry(staged.id.clone()).or_insert_with(new_local);
        // A concurrent restart of the same id in this handle bumped the attempt: the part is dropped then.
        if entry.attempt == staged.attempt && entry.state == CheckpointState::Staged {
            entry.parts.insert(staged.part, Held { staged, in_inbox });
        }
        Ok(())
    }

    /// Deletes the inbox entries of `parts` (those that have one).
    async fn delete_entries(&self, parts: &[Held]) -> Result<()> {
        for held in parts.iter().filter(|h| h.in_inbox) {
            self.shared.delete(&self.inbox_path(&held.staged)).await?;
        }
        Ok(())
    }

    fn inbox_path(&self, staged: &Staged) -> Path {
        let name = format!("{:032x}-{:010}-{:010}", self.author.session, staged.attempt, staged.part);
        self.shared.inbox_dir(&seal_hash(&staged.id)).join(name)
    }

    /// The state rules of a stage call against what this handle staged. `Ok(true)`: the same part is there.
    fn check_stage_locally(&self, staged: &Staged) -> Result<bool> {
        let local = self.lock()?;
        let Some(cur) = local.get(&staged.id) else {
            return if staged.attempt == Attempt::FIRST.get() {
                Ok(false)
            } else {
                let (offered, current) = (staged.attempt, Attempt::FIRST.get());
                Err(TransitionError::AttemptAhead { id: staged.id.clone(), offered, current }.into())
            };
        };
        let id = staged.id.clone();
        match cur.state {
            CheckpointState::Aborted => return Err(TransitionError::Aborted { id }.into()),
            CheckpointState::Staged => {}
            state => {
                // Its parts were let go once sealed: whether this one matches is not known here.
                return Err(TransitionError::AlreadySealed { id, state, part_matches: None }.into());
            }
        }
        if staged.attempt < cur.attempt {
            return Err(TransitionError::StaleAttempt { id, offered: staged.attempt, current: cur.attempt }.into());
        }
        if staged.attempt > cur.attempt {
            return Err(TransitionError::AttemptAhead { id, offered: staged.attempt, current: cur.attempt }.into());
        }
        match cur.parts.get(&staged.part) {
            None => Ok(false),
            Some(p) if p.staged == *staged => Ok(true),
            Some(_) => Err(TransitionError::PartConflict { id, attempt: staged.attempt, part: staged.part }.into()),
        }
    }

    /// The seal of `id`'s current attempt from its parts `0..parts`, checked as one stage call (the committer
    /// adopts it as one); `None` if this handle already sealed it.
    fn collect_seal(&self, id: &CheckpointId, parts: u32) -> Result<Option<Seal>> {
        let local = self.lock()?;
        let Some(cur) = local.get(id) else { return Err(TransitionError::NotFound { id: id.clone() }.into()) };
        match cur.state {
            CheckpointState::Staged => {}
            CheckpointState::Aborted => return Err(TransitionError::Aborted { id: id.clone() }.into()),
            _ if cur.sealed_parts == parts => return Ok(None),
            _ => {
                let sealed = cur.sealed_parts;
                return Err(TransitionError::SealMismatch { id: id.clone(), sealed, offered: parts }.into());
            }
        }
        let missing: Vec<u32> = (0..parts).filter(|p| !cur.parts.contains_key(p)).collect();
        if !missing.is_empty() {
            let count = u32::try_from(missing.len()).unwrap_or(u32::MAX);
            let first = missing.into_iter().take(LIST_PREVIEW_MAX).collect();
            return Err(TransitionError::MissingParts {
                id: id.clone(),
                attempt: cur.attempt,
                expected: parts,
                count,
                first,
            }
            .into());
        }
        let extra: Vec<u32> = cur.parts.keys().copied().filter(|p| *p >= parts).collect();
        if !extra.is_empty() {
            return Err(TransitionError::UnexpectedParts {
                id: id.clone(),
                attempt: cur.attempt,
                expected: parts,
                first: extra,
            }
            .into());
        }
        let keys: Vec<SourceKey> = cur.parts.values().flat_map(|p| p.staged.keys.iter().cloned()).collect();
        let results: Vec<WriteResult> = cur.parts.values().flat_map(|p| p.staged.results.iter().cloned()).collect();
        check_stage(Part::FIRST, &keys, &results).map_err(|e| {
            Error::invalid_input(format!(
                "checkpoint {id}: a shared checkpoint holds at most one stage call's worth: {e}"
            ))
        })?;
        check_keys(id, &keys)?;
        Ok(Some(Seal { id: id.clone(), author: self.author.clone(), attempt: cur.attempt, keys, results }))
    }

    /// Claims each key of `seal` for its id, in key order; a key owned by another checkpoint refuses the
    /// seal (its claim stays: a retry of the same id passes it). An id from `for_key` is its key's claim, and
    /// under [`KeyExclusivity::AtAdoption`] the committer's store decides instead.
    async fn claim_keys(&self, seal: &Seal) -> Result<()> {
        if for_key_hash(&seal.id).is_some() || self.shared.key_exclusivity() == KeyExclusivity::AtAdoption {
            return Ok(());
        }
        let mut keys: Vec<&SourceKey> = seal.keys.iter().collect();
        keys.sort();
        let claim = KeyClaim { id: seal.id.clone(), author: self.author.clone() };
        let bytes = envelope::encode(&Body::KeyClaim(claim))?;
        for key in keys {
            let path = self.shared.claim_at(&key_hash(key), 0);
            let Created::Taken(found) = self.shared.create(&path, &bytes).await? else { continue };
            let owner = match envelope::decode(&found, &self.describe(&path))? {
                Body::KeyClaim(c) => c.id,
                // The key's claim is a one-key checkpoint's (sealed, or released and to be sealed again).
                Body::Seal(s) => s.id,
                Body::Released(r) => r.id,
                Body::Staged(_) => {
                    return Err(Error::corrupt(format!("{}: a staged part in place of a claim", self.describe(&path))));
                }
            };
            if owner != seal.id {
                let key = String::from_utf8_lossy(key).into_owned();
                return Err(TransitionError::KeyConflict { key, id: seal.id.clone(), owner }.into());
            }
        }
        Ok(())
    }

    /// The seal was taken: ours after all (bytes differ only if another session wrote them), or lost.
    async fn lost(&self, id: &CheckpointId, path: &Path, found: &[u8], results: Vec<WriteResult>) -> Result<()> {
        let winner = match envelope::decode(found, &self.describe(path))? {
            Body::Seal(s) if s.author == self.author && &s.id == id => {
                self.mark_sealed(id)?;
                return Ok(());
            }
            Body::Seal(s) => sealed_by(&s).to_string(),
            Body::KeyClaim(c) => format!("its key is claimed by checkpoint {}", c.id),
            Body::Released(_) => return Err(Error::bug("a released claim taken for a lost seal")),
            Body::Staged(_) => {
                return Err(Error::corrupt(format!("{}: a staged part in place of a seal", self.describe(path))));
            }
        };
        // The loser's inbox entries are garbage now; the committer would report them, this saves it the reads.
        let parts = self.take_parts(id, CheckpointState::Aborted)?;
        self.delete_entries(&parts).await?;
        Err(TransitionError::SealLost { id: id.clone(), winner, results }.into())
    }

    /// Records that this handle's attempt of `id` is sealed, and lets go of its parts; past
    /// `WORKER_SEALED_REMEMBERED_MAX` sealed checkpoints, forgets the oldest (its claim answers for it).
    fn mark_sealed(&self, id: &CheckpointId) -> Result<()> {
        let mut local = self.lock()?;
        let Some(l) = local.get_mut(id) else { return Ok(()) };
        l.state = CheckpointState::Sealed;
        l.sealed_parts = u32::try_from(l.parts.len()).unwrap_or(u32::MAX);
        l.parts.clear();
        let mut sealed =
            self.sealed.lock().map_err(|_| Error::bug("a worker handle's lock was poisoned by a panic"))?;
        sealed.push_back(id.clone());
        while sealed.len() > WORKER_SEALED_REMEMBERED_MAX {
            let Some(oldest) = sealed.pop_front() else { break };
            if local.get(&oldest).is_some_and(|l| l.state == CheckpointState::Sealed) {
                local.remove(&oldest);
            }
        }
        debug_assert!(sealed.len() <= WORKER_SEALED_REMEMBERED_MAX);
        Ok(())
    }

    /// Takes the current attempt's parts out and moves the checkpoint to `state` (Staged: the next attempt).
    fn take_parts(&self, id: &CheckpointId, state: CheckpointState) -> Result<Vec<Held>> {
        let mut local = self.lock()?;
        let Some(cur) = local.get_mut(id) else { return Err(TransitionError::NotFound { id: id.clone() }.into()) };
        match (cur.state, state) {
            (CheckpointState::Staged, _) | (CheckpointState::Aborted, CheckpointState::Staged) => {}
            (CheckpointState::Aborted, _) => return Ok(Vec::new()),
            (CheckpointState::Sealed, CheckpointState::Aborted) => {
                return Err(TransitionError::SealedCannotAbort { id: id.clone() }.into());
            }
            (s, _) => {
                return Err(TransitionError::AlreadySealed { id: id.clone(), state: s, part_matches: None }.into());
            }
        }
        let parts = std::mem::take(&mut cur.parts).into_values().collect();
        if state == CheckpointState::Staged {
            cur.attempt += 1;
        }
        cur.state = state;
        Ok(parts)
    }

    async fn drop_attempt(&self, id: &CheckpointId, state: CheckpointState) -> Result<Vec<WriteResult>> {
        id.check()?;
        let parts = self.take_parts(id, state)?;
        self.delete_entries(&parts).await?;
        Ok(parts.into_iter().flat_map(|p| p.staged.results).collect())
    }
}

fn new_local() -> Local {
    Local { attempt: Attempt::FIRST.get(), parts: BTreeMap::new(), state: CheckpointState::Staged, sealed_parts: 0 }
}

fn sealed_by(seal: &Seal) -> SealedBy {
    SealedBy { worker: seal.author.worker.clone(), session: seal.author.session, attempt: seal.attempt }
}

/// An id from [`CheckpointId::for_key`] must hold exactly its key: its seal is that key's claim. Keys of one
/// checkpoint are distinct.
fn check_keys(id: &CheckpointId, keys: &[SourceKey]) -> Result<()> {
    if let Some(h) = for_key_hash(id)
        && (keys.len() != 1 || key_hash(&keys[0]) != h)
    {
        return Err(Error::invalid_input(format!(
            "checkpoint {id} is named for one source key (CheckpointId::for_key) but holds {} keys{}; \
             seal exactly that key, or name the checkpoint otherwise",
            keys.len(),
            if keys.len() == 1 { ", not that one" } else { "" }
        )));
    }
    let mut sorted: Vec<&SourceKey> = keys.iter().collect();
    sorted.sort();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::invalid_input(format!(
            "checkpoint {id} holds source key {:?} twice; a key belongs to one part once",
            String::from_utf8_lossy(w[0])
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::StreamExt as _;
    use object_store::ObjectStore as _;
    use object_store::memory::InMemory;

    use super::*;
    use crate::{Format, JobId};

    fn input(n: usize) -> Vec<u8> {
        format!("s3://in/{n:06}.parquet").into_bytes()
    }

    async fn stage_and_seal(worker: &Worker, n: usize) -> Result<()> {
        let result = WriteResult::new(Format::Parquet, format!("data/{n}.parquet").into_bytes())?;
        worker.stage_and_seal(&CheckpointId::for_key(&input(n)), vec![input(n)], vec![result]).await
    }

    #[tokio::test]
    async fn a_long_lived_worker_remembers_a_bounded_number_of_seals_and_its_claims_answer_for_the_rest() {
        let objects = Arc::new(InMemory::new());
        let shared = SharedStaging::new(objects.clone(), "t", JobId::new("j").unwrap()).unwrap();
        let worker = Worker::new(shared.clone(), "long-lived").unwrap();
        let sealed = WORKER_SEALED_REMEMBERED_MAX + 100;
        for n in 0..sealed {
            stage_and_seal(&worker, n).await.unwrap();
        }
        assert_eq!(worker.lock().unwrap().len(), WORKER_SEALED_REMEMBERED_MAX, "the handle holds every seal");
        // A retry of a forgotten seal (its answer lost to the caller) finds its own claim: Ok, and nothing new.
        let objects_before = objects.list(None).count().await;
        stage_and_seal(&worker, 0).await.unwrap();
        assert_eq!(objects.list(None).count().await, objects_before);
        assert!(worker.is_processed(&input(0)).await.unwrap());
        // Another session's attempt of it still loses.
        let other = Worker::new(shared, "retried-elsewhere").unwrap();
        let err = stage_and_seal(&other, 0).await.unwrap_err();
        assert!(matches!(err.transition(), Some(TransitionError::SealLost { .. })), "{err}");
    }
}
