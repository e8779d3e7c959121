//! Workers on many machines: stage and seal through shared object storage; one committer adopts and commits.
//!
//! A [`Worker`] runs wherever the engine runs a task (a Ray worker, a Spark executor) and shares nothing with
//! the driver but an object store and a prefix. Its `stage` puts one object into the job's **inbox**; its
//! `seal` wins the checkpoint's **claim** with one conditional create (`PutMode::Create`), so that of two
//! attempts of one checkpoint (a retried task whose first attempt still runs, a speculative copy, a zombie
//! that wakes up) exactly one is ever sealed, decided by the object store and not by timing. Its
//! `stage_and_seal` puts no inbox entry: the seal holds the part whole, so a one-input checkpoint costs one
//! request. The committer's [`Inbox::adopt`] lists the claims and reads only those it does not know yet (its
//! store holds every checkpoint it adopted), or, told the ids it waits for, [`Inbox::adopt_expected`] reads their
//! claims and lists none; either lists the inbox for the parts of multi-part checkpoints, adopts
//! each new seal into its own [`crate::Store`] (a redb WAL mirrored as usual, so a committer that loses its
//! disk restores, and a new driver fences the old one), waits for the mirror, and only then deletes the inbox
//! entries.
//!
//! Object layout under `<prefix>/jobs/<job>/shared/` (docs/protocols/shared-staging.md has the races):
//!
//! | object | written by | condition | holds | the committer reads it |
//! |---|---|---|---|---|
//! | `claims/<h>` for a checkpoint id | the sealing worker | create | the seal: winner, keys, results | once |
//! | `claims/<h>` for a source key | the sealing worker, first | create | the id owning the key | once a handle |
//! | `inbox/<h>/<session>-<attempt>-<part>` | `stage` (not `stage_and_seal`) | none | one staged part | a loser's |
//! | `claims/<h>.<g>`, g ≥ 1 | the sealing worker | create | a seal after `g` releases | once |
//!
//! A claim whose seal the committer's store no longer holds (an operator force-aborted the adopted checkpoint)
//! is **released**: the committer overwrites it with a `Released` object naming the next generation `g`, and the
//! checkpoint's claim continues at `claims/<h>.<g>`. Readers follow released generations (one read each), so
//! workers see the input unprocessed, a rerun's seal wins the next generation, and the committer adopts it as
//! the checkpoint's next attempt. A checkpoint is released at most [`crate::limits::CLAIM_GENERATIONS_MAX`] times.
//!
//! Per input of a Daft-shaped job (`stage_and_seal` of a [`CheckpointId::for_key`] id): 1 request by the
//! worker (the create), 1 by the committer (the read); per committer round, the inbox listing, and for
//! [`Inbox::adopt`] the claims listing (1 request per 1,000 claims of the job: the one cost that grows with its
//! history, which [`Inbox::adopt_expected`] does not pay).
//!
//! `<h>` is the hex SHA-256 of the name (`id\0…` or `key\0…`): fixed length, any key. A checkpoint id made by
//! [`CheckpointId::for_key`] *is* its key's claim, so a one-input checkpoint (Daft's shape) seals with one
//! create and no separate key claim.

mod envelope;
mod inbox;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _};
use sha2::{Digest as _, Sha256};

use crate::create_once::{CreateError, CreateOnce, Created};
use crate::error::{Error, Result};
use crate::limits::{
    CLAIM_GENERATIONS_MAX, DELETE_BATCH_OBJECTS_MAX, LIST_PAGE_OBJECTS_MAX, SHARED_CONCURRENT_MAX,
    SHARED_CREATE_ATTEMPTS_MAX, SHARED_REQUEST_TIMEOUT_MS,
};
use crate::types::{CheckpointId, JobId};

pub use inbox::{AdoptReport, Inbox, Refused};
pub use worker::{SealedBy, Worker};

/// What the inbox's collector (`gc::find_inbox_garbage`) reads of a claim and an entry.
pub(crate) use inbox::{ClaimAt, is_winners};

use envelope::Body;

/// The prefix of the hex SHA-256 of a key that [`CheckpointId::for_key`] puts before it.
const FOR_KEY_PREFIX: &str = "k-";

/// The prefix [`CheckpointId::for_keys`] puts before the hash of several keys.
const FOR_KEYS_PREFIX: &str = "ks-";

/// Where a job's workers stage and seal: an object store and a prefix, the only thing workers and the
/// committer share. Cheap to clone; every [`Worker`] and the [`Inbox`] of one job are built from one.
///
/// ```
/// use std::sync::Arc;
/// use object_store::memory::InMemory;
/// use sinkpoint::JobId;
/// use sinkpoint::shared::SharedStaging;
/// let shared = SharedStaging::new(Arc::new(InMemory::new()), "tables/events", JobId::new("nightly")?)?;
/// assert_eq!(shared.root().as_ref(), "tables/events/jobs/nightly/shared");
/// # Ok::<(), sinkpoint::Error>(())
/// ```
#[derive(Clone)]
pub struct SharedStaging {
    store: Arc<dyn ObjectStore>,
    root: Path,
    job: JobId,
    timeout: Duration,
    keys: KeyExclusivity,
}

/// Where a job decides that each source key belongs to one checkpoint, for checkpoints of several keys (a
/// [`CheckpointId::for_key`] checkpoint's seal is its key's claim either way). Every worker and the committer of
/// a job use one.
///
/// | | a worker's seal of k keys | `Worker::is_processed` | two checkpoints with one key |
/// |---|---|---|---|
/// | [`KeyExclusivity::AtSeal`] | k + 1 creates | one read (two) answers | the second seal fails `KeyConflict` |
/// | [`KeyExclusivity::AtAdoption`] | 1 create | refused unless the key's own claim answers | both seal; the committer's store adopts one and refuses the other ([`AdoptReport::refused`]) |
///
/// `AtAdoption` is for engines whose driver knows what is processed (it prunes its inputs from the committer's
/// store, as the Daft runner does) and whose tasks each write many inputs: a task seals all of them with one
/// request, and the committer reads one claim for all of them. Nothing is lost either way: the committer's store
/// holds one owner per key, a refused checkpoint is aborted there (its results go to the garbage ledger), and its
/// other keys stay unprocessed for the driver's next run.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum KeyExclusivity {
    /// Each key of a checkpoint is claimed by a conditional create before its seal: a worker learns at once
    /// that a key is another checkpoint's, and can ask whether a key is processed. The default.
    #[default]
    AtSeal,
    /// Keys are not claimed by workers: the committer's store decides at adoption. A seal is one create
    /// whatever its keys.
    AtAdoption,
}

impl std::fmt::Debug for SharedStaging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedStaging({} in {})", self.root, self.store)
    }
}

impl SharedStaging {
    /// The job's shared staging under `prefix` of `store`. `prefix` may be empty (the store's root).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str, job: JobId) -> Result<Self> {
        let base = Path::parse(prefix)
            .map_err(|e| Error::invalid_input(format!("shared staging prefix {prefix:?} is not a path: {e}")))?;
        let root = base.clone().join("jobs").join(job.as_str()).join("shared");
        let timeout = Duration::from_millis(SHARED_REQUEST_TIMEOUT_MS);
        Ok(Self { store, root, job, timeout, keys: KeyExclusivity::default() })
    }

    /// The same staging deciding key exclusivity as `keys` says ([`KeyExclusivity`]; every worker and the
    /// committer of one job must agree).
    #[must_use]
    pub fn with_key_exclusivity(mut self, keys: KeyExclusivity) -> Self {
        self.keys = keys;
        self
    }

    /// Where this staging decides key exclusivity.
    pub fn key_exclusivity(&self) -> KeyExclusivity {
        self.keys
    }

    /// The same staging with another per-request timeout (tests with a held store use a short one).
    #[must_use]
    pub fn with_request_timeout_ms(mut self, ms: u64) -> Self {
        self.timeout = Duration::from_millis(ms.max(1));
        self
    }

    /// The job.
    pub fn job(&self) -> &JobId {
        &self.job
    }

    /// The directory every object of the job's shared staging lives under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where generation `generation` of the claim named `hash` lives: `claims/<h>` for the first, `claims/<h>.<g>`
    /// for a later one (after `g` releases).
    fn claim_at(&self, hash: &str, generation: u32) -> Path {
        if generation == 0 {
            self.claims_root().join(hash)
        } else {
            self.claims_root().join(format!("{hash}.{generation}"))
        }
    }

    /// The newest generation of the claim `hash`, following released generations (one read each): its number,
    /// what it holds (`None`: nothing yet, so a seal created there wins), and the id of the last released
    /// generation passed, if any.
    async fn current_claim(&self, hash: &str) -> Result<CurrentClaim> {
        let mut current = CurrentClaim { generation: 0, body: None, released: None, reads: 0 };
        loop {
            let path = self.claim_at(hash, current.generation);
            current.reads += 1;
            match self.read_object(&path).await? {
                Some(Body::Released(r)) => {
                    check_next(current.generation, r.next, &self.describe(&path))?;
                    current.generation = r.next;
                    current.released = Some(r.id);
                }
                body => {
                    current.body = body;
                    return Ok(current);
                }
            }
        }
    }

    /// The inbox directory of everything staged toward the claim `hash`.
    fn inbox_dir(&self, hash: &str) -> Path {
        self.root.clone().join("inbox").join(hash)
    }

    pub(crate) fn inbox_root(&self) -> Path {
        self.root.clone().join("inbox")
    }

    /// The directory of every claim: seals and key claims.
    fn claims_root(&self) -> Path {
        self.root.clone().join("claims")
    }

    /// For messages.
    fn describe(&self, path: &Path) -> String {
        format!("{path} in {}", self.store)
    }
}

/// What [`SharedStaging::current_claim`] found.
struct CurrentClaim {
    generation: u32,
    body: Option<Body>,
    released: Option<CheckpointId>,
    /// The gets it took: one per generation visited.
    reads: u64,
}

/// Refuses a released claim whose next generation does not come after its own (or passes
/// [`CLAIM_GENERATIONS_MAX`]): following it could loop.
fn check_next(generation: u32, next: u32, place: &str) -> Result<()> {
    if next <= generation || next > CLAIM_GENERATIONS_MAX {
        return Err(Error::corrupt(format!(
            "{place}: a released claim of generation {generation} names generation {next} next; it must be \
             above {generation} and at most {CLAIM_GENERATIONS_MAX}"
        )));
    }
    Ok(())
}

/// A claim object's name split into its hash and generation (`<h>` is generation 0, `<h>.<g>` generation g,
/// written without leading zeros); `None` for a name no one writes.
fn parse_claim_name(name: &str) -> Option<(&str, u32)> {
    match name.split_once('.') {
        None => Some((name, 0)),
        Some((hash, g)) => {
            let generation: u32 = g.parse().ok()?;
            (generation >= 1 && generation.to_string() == g).then_some((hash, generation))
        }
    }
}

/// The claim hash of a source key.
fn key_hash(key: &[u8]) -> String {
    hash(b"key\0", key)
}

/// The claim hash of a checkpoint's seal: its key's claim for an id made by [`CheckpointId::for_key`], else
/// the id's own.
fn seal_hash(id: &CheckpointId) -> String {
    match for_key_hash(id) {
        Some(h) => h.to_owned(),
        None => hash(b"id\0", id.as_str().as_bytes()),
    }
}

/// The key hash inside an id made by [`CheckpointId::for_key`].
fn for_key_hash(id: &CheckpointId) -> Option<&str> {
    let h = id.as_str().strip_prefix(FOR_KEY_PREFIX)?;
    (h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(h)
}

fn hash(domain: &[u8], name: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(domain);
    hasher.update(name);
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

impl CheckpointId {
    /// The checkpoint id of a checkpoint that holds exactly one source key: `k-` and the key's SHA-256. With
    /// [`Worker`], such a checkpoint's seal is also its key's claim (one conditional create seals it), and a
    /// retried task derives the same id from its input.
    ///
    /// ```
    /// use sinkpoint::CheckpointId;
    /// let id = CheckpointId::for_key(b"s3://in/0001.parquet");
    /// assert!(id.as_str().starts_with("k-"));
    /// assert_eq!(id, CheckpointId::for_key(b"s3://in/0001.parquet"));
    /// ```
    pub fn for_key(key: &[u8]) -> CheckpointId {
        CheckpointId(format!("{FOR_KEY_PREFIX}{}", key_hash(key)))
    }

    /// The checkpoint id of a checkpoint that holds exactly `keys` (a task's inputs, in any order): `ks-` and
    /// the SHA-256 of the sorted keys, so a retried task that reads the same inputs derives the same id and its
    /// two attempts race on one claim. One key gives [`CheckpointId::for_key`]'s id.
    ///
    /// ```
    /// use sinkpoint::CheckpointId;
    /// let (a, b) = (b"s3://in/0001.parquet".as_slice(), b"s3://in/0002.parquet".as_slice());
    /// assert_eq!(CheckpointId::for_keys(&[a, b]), CheckpointId::for_keys(&[b, a]));
    /// assert!(CheckpointId::for_keys(&[a, b]).as_str().starts_with("ks-"));
    /// assert_eq!(CheckpointId::for_keys(&[a]), CheckpointId::for_key(a));
    /// ```
    pub fn for_keys(keys: &[&[u8]]) -> CheckpointId {
        if let [key] = keys {
            return CheckpointId::for_key(key);
        }
        let mut sorted = keys.to_vec();
        sorted.sort_unstable();
        // Length-prefixed, so no two lists of keys hash the same bytes.
        let mut name = Vec::with_capacity(sorted.iter().map(|k| k.len() + 8).sum());
        for key in sorted {
            name.extend_from_slice(&(key.len() as u64).to_le_bytes());
            name.extend_from_slice(key);
        }
        CheckpointId(format!("{FOR_KEYS_PREFIX}{}", hash(b"keys\0", &name)))
    }
}

impl SharedStaging {
    /// The transient error of a request that got no answer within the timeout (`what` names the object).
    fn no_answer(&self, what: &str) -> Error {
        Error::io(format!("{what}: no answer in {} ms", self.timeout.as_millis()))
    }

    async fn timed<T>(&self, what: &Path, f: impl Future<Output = object_store::Result<T>>) -> Result<T> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(r) => r.map_err(Error::from),
            Err(_) => Err(self.no_answer(&self.describe(what))),
        }
    }

    /// The object's bytes, `None` if absent.
    async fn get(&self, path: &Path) -> Result<Option<bytes::Bytes>> {
        let store = self.store.clone();
        let got = tokio::time::timeout(self.timeout, async move { store.get(path).await?.bytes().await }).await;
        match got {
            Ok(Ok(b)) => Ok(Some(b)),
            Ok(Err(object_store::Error::NotFound { .. })) => Ok(None),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(self.no_answer(&self.describe(path))),
        }
    }

    /// The shared object at `path`, decoded and checked, `None` if absent.
    async fn read_object(&self, path: &Path) -> Result<Option<envelope::Body>> {
        match self.get(path).await? {
            None => Ok(None),
            Some(bytes) => envelope::decode(&bytes, &self.describe(path)).map(Some),
        }
    }

    /// Puts an object under a name no one else writes (overwriting an ambiguous earlier try of the same put).
    async fn put(&self, path: &Path, bytes: Vec<u8>) -> Result<()> {
        self.timed(path, self.store.put(path, bytes.into())).await.map(drop)
    }

    /// Creates `path` holding `bytes` through the create-once primitive in its settling mode, each request within
    /// the timeout: an ambiguous answer is settled by reading back (the bytes carry the writer's session, so equal
    /// bytes mean ours). Never assumes: unsettled after [`SHARED_CREATE_ATTEMPTS_MAX`] tries, the error says so.
    async fn create(&self, path: &Path, bytes: &[u8]) -> Result<Created> {
        let create = CreateOnce::settling(SHARED_CREATE_ATTEMPTS_MAX).timeout(self.timeout);
        match create.create(self.store.as_ref(), path, &bytes::Bytes::copy_from_slice(bytes)).await {
            Ok(created) => Ok(created),
            Err(CreateError::Unsupported(e)) => Err(e.into()),
            Err(CreateError::Unsettled { attempts, last }) => Err(Error::io(format!(
                "{}: a conditional create could not be settled in {attempts} tries (last: {last}); retry the call: \
                 it is idempotent",
                self.describe(path)
            ))),
        }
    }

    /// Deletes one object; an absent one is already deleted.
    async fn delete(&self, path: &Path) -> Result<()> {
        match tokio::time::timeout(self.timeout, self.store.delete(path)).await {
            Ok(Ok(()) | Err(object_store::Error::NotFound { .. })) => Ok(()),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(self.no_answer(&self.describe(path))),
        }
    }

    /// Deletes every path (an absent one is already deleted) through the store's bulk delete where it has one, in
    /// streams of at least [`DELETE_BATCH_OBJECTS_MAX`] paths, up to [`SHARED_CONCURRENT_MAX`] at once.
    pub(crate) async fn delete_all(&self, paths: Vec<Path>) -> Result<()> {
        use futures::{StreamExt as _, TryStreamExt as _};
        // Full bulk requests first (one request per DELETE_BATCH_OBJECTS_MAX on S3), spread over streams only
        // past that: 50 entries split 16 ways were 13 requests where 1 does (test_requests.py counted them).
        let chunk = paths.len().div_ceil(SHARED_CONCURRENT_MAX).max(DELETE_BATCH_OBJECTS_MAX);
        let chunks: Vec<Vec<Path>> = paths.chunks(chunk).map(<[Path]>::to_vec).collect();
        futures::stream::iter(chunks)
            .map(|chunk| async move {
                let locations = futures::stream::iter(chunk.into_iter().map(Ok)).boxed();
                let mut results = self.store.delete_stream(locations);
                loop {
                    let next = tokio::time::timeout(self.timeout, results.next())
                        .await
                        .map_err(|_| self.no_answer(&format!("{}: a bulk delete", self.root)))?;
                    match next {
                        None => return Ok::<_, Error>(()),
                        Some(Ok(_) | Err(object_store::Error::NotFound { .. })) => {}
                        Some(Err(e)) => return Err(e.into()),
                    }
                }
            })
            .buffer_unordered(SHARED_CONCURRENT_MAX)
            .try_collect::<Vec<()>>()
            .await
            .map(drop)
    }

    /// The first `max` objects under `dir` (in the store's listing order).
    async fn list(&self, dir: &Path, max: usize) -> Result<Vec<object_store::ObjectMeta>> {
        let mut out = Vec::new();
        self.list_each(dir, |meta| {
            out.push(meta);
            out.len() < max
        })
        .await?;
        Ok(out)
    }

    /// Hands each object under `dir` to `each` as the listing streams in, until `each` returns false or the
    /// listing ends; returns how many objects it was handed. Each step gets the request timeout, not the whole
    /// listing: a long listing is many requests (one per [`LIST_PAGE_OBJECTS_MAX`]).
    pub(crate) async fn list_each(
        &self,
        dir: &Path,
        mut each: impl FnMut(object_store::ObjectMeta) -> bool,
    ) -> Result<u64> {
        use futures::StreamExt as _;
        let mut listing = self.store.list(Some(dir));
        let mut seen = 0u64;
        loop {
            match tokio::time::timeout(self.timeout, listing.next()).await {
                Err(_) => return Err(self.no_answer(&format!("{}: a listing", self.describe(dir)))),
                Ok(None) => return Ok(seen),
                Ok(Some(meta)) => {
                    seen += 1;
                    if !each(meta?) {
                        return Ok(seen);
                    }
                }
            }
        }
    }
}

/// The list requests a listing that returned `objects` objects made: one per page, at least one.
fn list_requests(objects: u64) -> u64 {
    objects.div_ceil(LIST_PAGE_OBJECTS_MAX).max(1)
}
