//! The committer's side: find what workers sealed since the last round (the claims it does not know yet, and
//! the inbox's entries), adopt it into the committer's own store, make that durable in its mirror, then clear
//! the inbox.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path;

use super::envelope::{self, Body, Released, Seal, Staged};
use super::{CurrentClaim, SharedStaging, list_requests, parse_claim_name, seal_hash};
use crate::error::{Error, Result, TransitionError};
use crate::limits::{
    ADOPT_EXPECTED_IDS_MAX, ADOPT_IN_FLIGHT_MAX, CLAIM_GENERATIONS_MAX, SHARED_CONCURRENT_MAX, SHARED_ROUND_ENTRIES_MAX,
};
use crate::state::{self, CheckpointState, StateFilter};
use crate::store::Store;
use crate::types::{Attempt, CheckpointId, Part, StagePart, WriteResult};

/// A sealed checkpoint the committer's store refused (its key is owned by another adopted checkpoint): it is
/// aborted there, and its results are in [`AdoptReport::cleanup`] and the store's garbage ledger. Also a seal a
/// round left as it was ([`AdoptReport::held_back`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Refused {
    /// The checkpoint.
    pub id: CheckpointId,
    /// Why.
    pub reason: String,
}

/// What one [`Inbox::adopt`] round did.
#[derive(Clone, Default, Debug)]
pub struct AdoptReport {
    /// Checkpoints sealed by workers and now Sealed in the committer's store (durable in its mirror).
    pub adopted: Vec<CheckpointId>,
    /// Sealed checkpoints read this round that the store already held (a round that crashed after adopting,
    /// before clearing; an inbox entry of an adopted checkpoint). Claims the store already holds are not read.
    pub already_adopted: usize,
    /// Checkpoints with staged parts and no seal yet: tasks still running, or attempts that died before
    /// sealing (their parts stay until a seal of the same checkpoint arrives).
    pub unsealed: usize,
    /// Write results staged by attempts that did not win their checkpoint's seal, and those of released seals:
    /// delete their data files.
    pub cleanup: Vec<WriteResult>,
    /// Sealed checkpoints the store refused.
    pub refused: Vec<Refused>,
    /// Checkpoints whose claim this round released: the store no longer holds their seal (an operator
    /// force-aborted them, or restarted them past it), so workers see their inputs unprocessed again and the
    /// next seal of each is adopted as its next attempt. The released seals' results are in `cleanup`.
    pub released: Vec<CheckpointId>,
    /// Seals this round could not settle and left as they were, nothing written (a refusal of the store that
    /// concerns that checkpoint alone; the reason says what to do). The rest of the round went on; the next
    /// round tries them again.
    pub held_back: Vec<Refused>,
    /// Object-store requests this round made: list requests (one per 1,000 objects listed, at least one per
    /// listing: the claims' and the inbox's), reads, one put per claim released, and one per inbox entry
    /// deleted (an upper bound: a store with a bulk delete, such as S3, takes up to 1,000 in one request).
    pub requests: u64,
}

/// The committer's view of a job's shared staging. A round ([`Inbox::adopt`]) lists the claims (a list request
/// per 1,000 claims: the one part that grows with the job's history, in requests and not in reads; a round of
/// [`Inbox::adopt_expected`] lists none and reads the claims of the ids it is given), reads only the
/// claims it does not know (a claim is known when the store holds its checkpoint adopted, Sealed or later;
/// when this handle read it before and found a key claim; or when this handle settled it before and neither
/// the claim's generations nor the store's record of its checkpoint changed since), lists the inbox (parts
/// staged by [`super::Worker::stage`], which only holds what is not adopted yet), reads each part of an attempt
/// that lost, and deletes the adopted entries. Cheap to clone; clones share the caches.
#[derive(Clone, Debug)]
pub struct Inbox {
    pub(crate) shared: SharedStaging,
    /// Names of claims this handle read and found to be key claims: they are never read again.
    key_claims: Arc<Mutex<HashSet<String>>>,
    /// Claims of checkpoints the store holds Aborted or Staged that this handle settled (released, or left as
    /// a refused seal): read again only once a newer generation is listed or the store's record changed.
    quiet: Arc<Mutex<HashMap<String, Quiet>>>,
}

/// A claim this handle settled without adopting it, and what it was settled against.
#[derive(Clone, Debug)]
struct Quiet {
    id: CheckpointId,
    /// The newest generation listed when it was settled.
    generation: u32,
    /// The store's record of the checkpoint then: state and attempt.
    record: Option<(CheckpointState, u32)>,
}

/// What a group's claim holds: its newest generation's seal, or a key claim.
pub(crate) enum ClaimAt {
    Seal(Seal, u32),
    KeyClaim,
}

/// A claim this round settles: its hash, the newest generation listed (or read), what it holds, and the inbox
/// entries staged toward it.
struct Found {
    hash: String,
    newest: u32,
    claim: ClaimAt,
    entries: Vec<Path>,
}

/// Which inbox groups whose claim a round did not read it reads.
#[derive(Clone, Copy)]
enum Unread<'a> {
    /// The round listed the claims (`adopted`: the claim names of the checkpoints the store holds adopted): a
    /// group whose claim was not listed has none yet; one of an adopted or quietly settled checkpoint is read
    /// again (its entries are left from a round that crashed before clearing, or a loser's).
    Listed(&'a HashSet<String>),
    /// The round listed no claims: every group's claim is read.
    ReadEach,
}

impl Unread<'_> {
    fn read_again(self, hash: &str, quiet: &HashMap<String, Quiet>) -> bool {
        match self {
            Unread::Listed(adopted) => adopted.contains(hash) || quiet.contains_key(hash),
            Unread::ReadEach => true,
        }
    }
}

/// What a round cleans once the store's side is in the mirror.
struct Chores {
    /// Inbox entries to delete.
    clear: Vec<Path>,
    /// Entries of attempts that lost: read for their results (to the garbage ledger) before they go.
    losers: Vec<Path>,
    /// Claims to release, each by a `Released` object at its generation.
    releases: Vec<(Path, Released)>,
}

/// What settling one seal came to.
enum Settled {
    New,
    Already,
    Refused(String),
    /// Released, after the flush, by a `Released` object at this generation naming the next.
    Release {
        next: u32,
    },
    /// Left as it is: a refused seal whose key the store holds processed by another checkpoint.
    Quiet,
    HeldBack(String),
}

impl Inbox {
    /// The committer's inbox of `shared`'s job.
    pub fn new(shared: SharedStaging) -> Self {
        Self { shared, key_claims: Arc::default(), quiet: Arc::default() }
    }

    /// Adopts every checkpoint sealed since the last round into `store` (the committer's, of the same job),
    /// waits until its mirror holds them, then deletes their inbox entries. A crash anywhere repeats nothing
    /// wrongly: adoption is idempotent (a checkpoint the store holds Sealed or later is never adopted again),
    /// the store never forgets a checkpoint, and entries are deleted only after their adoption is durable.
    ///
    /// A seal whose checkpoint the store no longer holds (an operator force-aborted it after adoption, or
    /// restarted it) is **released**: its claim is overwritten, after the flush, with a `Released` object naming
    /// the claim's next generation, so workers see its input unprocessed and a rerun's seal, created at that
    /// generation, is adopted as the checkpoint's next attempt. A seal of generation `g` is only adopted into an
    /// attempt at or above `g`, so a released seal is never adopted again (`state::adoption`).
    ///
    /// Seals are found by listing the claims, whole (paged, never cut short: a job holds any number), keeping
    /// only the names not known yet, at most `SHARED_ROUND_ENTRIES_MAX` (100,000) of them (the rest wait for the next
    /// round). Each is read once (following released generations): a seal is settled, a key claim remembered
    /// in this handle. The inbox is listed too, for the parts of [`super::Worker::stage`]: a group whose claim
    /// this round read is settled by that read; one whose claim is known is read again (its entries are left
    /// from a round that crashed before clearing, or of a loser, and the seal tells which); one whose claim was
    /// not listed is unsealed.
    ///
    /// A refusal that concerns one checkpoint alone never fails the round: that seal is left as it was and
    /// reported in [`AdoptReport::held_back`], and the others are adopted, flushed and cleared.
    pub async fn adopt(&self, store: &Store) -> Result<AdoptReport> {
        self.check_job(store)?;
        let mut report = AdoptReport::default();
        let adopted = adopted_claims(store)?;
        // The claims listing, whole; only the names neither the store nor this handle knows are read.
        let (unknown, listed) = self.unknown_claims(store, &adopted).await?;
        report.requests += list_requests(listed);
        let claims = self.read_claims(store, unknown, &mut report).await?;
        let found = self.match_inbox(claims, Unread::Listed(&adopted), &mut report).await?;
        let chores = self.settle_all(store, found, &mut report).await?;
        self.finish_round(store, chores, &mut report).await?;
        Ok(report)
    }

    /// One adoption round that reads only the claims of `expected`, the checkpoints the caller waits for (the ids
    /// its engine's tasks reported, or the inputs its run planned), and lists no claim: its cost follows
    /// `expected` and the inbox, never the job's history. Otherwise it does what [`Inbox::adopt`] does, with the
    /// same guarantees (idempotent, entries deleted only once the adoptions are in the mirror, releases,
    /// held-back seals).
    ///
    /// Per id: nothing when the store holds it adopted (Sealed or later: a point lookup in the local store),
    /// else one read of its claim (one more per release). The inbox is listed as in `adopt` (it holds only what is
    /// not adopted yet), and the claim of each of its groups not read already is read: a multi-part checkpoint
    /// is found through its parts, expected or not. A seal of an id not in `expected` and with no inbox entry
    /// is not found by this round: [`Inbox::adopt`] (the listing) finds every seal.
    ///
    /// More than [`ADOPT_EXPECTED_IDS_MAX`] ids is refused, nothing read: split them into rounds.
    ///
    /// ```
    /// # async fn doc() -> sinkpoint::Result<()> {
    /// use std::sync::Arc;
    /// use object_store::memory::InMemory;
    /// use sinkpoint::shared::{Inbox, SharedStaging, Worker};
    /// use sinkpoint::{CheckpointId, Format, JobId, Store, TargetIdentity, WriteResult};
    /// let shared = SharedStaging::new(Arc::new(InMemory::new()), "staging", JobId::new("nightly")?)?;
    /// let (input, file) = (b"in/0001.parquet".to_vec(), WriteResult::new(Format::Parquet, b"f-1".to_vec())?);
    /// let id = CheckpointId::for_key(&input);
    /// Worker::new(shared.clone(), "w0")?.stage_and_seal(&id, vec![input], vec![file]).await?;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = Store::builder(JobId::new("nightly")?, TargetIdentity::new("dir:table")?)
    ///     .path(dir.path().join("committer.redb"))
    ///     .open()
    ///     .await?;
    /// let report = Inbox::new(shared).adopt_expected(&store, std::slice::from_ref(&id)).await?;
    /// assert_eq!((report.adopted, report.requests), (vec![id], 2)); // its claim read, the inbox listed
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(doc()).unwrap();
    /// ```
    pub async fn adopt_expected(&self, store: &Store, expected: &[CheckpointId]) -> Result<AdoptReport> {
        self.check_job(store)?;
        if expected.len() > ADOPT_EXPECTED_IDS_MAX {
            return Err(Error::invalid_input(format!(
                "{} expected checkpoint ids in one adoption round; at most {ADOPT_EXPECTED_IDS_MAX}: split them into \
                 rounds",
                expected.len()
            )));
        }
        let mut report = AdoptReport::default();
        let mut unread: BTreeMap<String, u32> = BTreeMap::new();
        for id in expected {
            if !record_of(store, id)?.is_some_and(|(state, _)| is_adopted(state)) {
                unread.insert(seal_hash(id), 0);
            }
        }
        let claims = self.read_claims(store, unread.into_iter().collect(), &mut report).await?;
        let found = self.match_inbox(claims, Unread::ReadEach, &mut report).await?;
        let chores = self.settle_all(store, found, &mut report).await?;
        self.finish_round(store, chores, &mut report).await?;
        Ok(report)
    }

    fn check_job(&self, store: &Store) -> Result<()> {
        if store.job() != self.shared.job() {
            return Err(Error::wrong_store(format!(
                "the inbox is job {}'s, the store job {}'s: open both for the same job",
                self.shared.job(),
                store.job()
            )));
        }
        Ok(())
    }

    /// Reads the claims `unread` names (each with the newest generation listed, 0 when not listed), following
    /// released generations; returns the seals and key claims among them by hash, with the newest generation
    /// seen. A released claim with no seal after it is settled quietly until one comes.
    async fn read_claims(
        &self,
        store: &Store,
        unread: Vec<(String, u32)>,
        report: &mut AdoptReport,
    ) -> Result<BTreeMap<String, (ClaimAt, u32)>> {
        // Reads and adoptions run up to ADOPT_IN_FLIGHT_MAX at a time: a round after 64 workers sealed costs one
        // round trip, not 64, and the store folds the concurrent adoptions into a few group commits.
        let read: Vec<(String, u32, CurrentClaim)> = futures::stream::iter(unread)
            .map(|(hash, listed)| async move {
                Ok::<_, Error>((hash.clone(), listed, self.shared.current_claim(&hash).await?))
            })
            .buffered(ADOPT_IN_FLIGHT_MAX)
            .try_collect()
            .await?;
        let mut claims: BTreeMap<String, (ClaimAt, u32)> = BTreeMap::new();
        for (hash, listed, current) in read {
            report.requests += current.reads;
            let newest = listed.max(current.generation);
            match current.body {
                // Listed, then not found: claims are never deleted, so a store that lists before it reads. Or a
                // released claim whose next generation is not sealed yet: settled until one is. Or, for an
                // expected id, a seal not made yet.
                None => {
                    if let Some(id) = current.released {
                        let record = record_of(store, &id)?;
                        self.quiet()?.insert(hash, Quiet { id, generation: newest, record });
                    }
                }
                Some(Body::KeyClaim(_)) => {
                    self.key_claims()?.insert(hash.clone());
                    claims.insert(hash, (ClaimAt::KeyClaim, newest));
                }
                Some(Body::Seal(seal)) => {
                    claims.insert(hash, (ClaimAt::Seal(seal, current.generation), newest));
                }
                Some(Body::Staged(_) | Body::Released(_)) => {
                    return Err(Error::corrupt(format!(
                        "{}: not a claim where a claim belongs",
                        self.shared.describe(&self.shared.claim_at(&hash, current.generation))
                    )));
                }
            }
        }
        Ok(claims)
    }

    /// (3) The inbox: the parts of multi-part checkpoints and of attempts that lost, matched with the claims read
    /// (a group whose claim this round did not read has it read when `unread` says so); every seal with its
    /// entries.
    async fn match_inbox(
        &self,
        mut claims: BTreeMap<String, (ClaimAt, u32)>,
        unread: Unread<'_>,
        report: &mut AdoptReport,
    ) -> Result<Vec<Found>> {
        let (groups, listed) = self.groups().await?;
        report.requests += list_requests(listed);
        let mut again: Vec<(String, Vec<Path>)> = Vec::new();
        let mut found: Vec<Found> = Vec::new();
        for (hash, entries) in groups {
            if let Some((claim, newest)) = claims.remove(&hash) {
                found.push(Found { hash, newest, claim, entries });
            } else if self.key_claims()?.contains(&hash) {
                found.push(Found { hash, newest: 0, claim: ClaimAt::KeyClaim, entries });
            } else if unread.read_again(&hash, &*self.quiet()?) {
                again.push((hash, entries));
            } else {
                // Not in the claims listing: no claim yet (a seal created since is found next round).
                report.unsealed += 1;
            }
        }
        let reread: Vec<(String, CurrentClaim, Vec<Path>)> = futures::stream::iter(again)
            .map(|(hash, entries)| async move {
                Ok::<_, Error>((hash.clone(), self.shared.current_claim(&hash).await?, entries))
            })
            .buffered(ADOPT_IN_FLIGHT_MAX)
            .try_collect()
            .await?;
        for (hash, current, entries) in reread {
            report.requests += current.reads;
            match current.body {
                Some(Body::Seal(seal)) => {
                    let (newest, claim) = (current.generation, ClaimAt::Seal(seal, current.generation));
                    found.push(Found { hash, newest, claim, entries });
                }
                Some(Body::KeyClaim(_)) => found.push(Found { hash, newest: 0, claim: ClaimAt::KeyClaim, entries }),
                // No seal in the newest generation: the entries stage toward it.
                _ => report.unsealed += 1,
            }
        }
        // Seals this round read whose checkpoints have no inbox entries (stage_and_seal's).
        for (hash, (claim, newest)) in claims {
            found.push(Found { hash, newest, claim, entries: Vec::new() });
        }
        Ok(found)
    }

    /// (4) Each seal settled in the store (adopted, refused, released or held back), concurrently; returns what
    /// the round must then clean: the entries to delete, the losers' entries to read first, the claims to release.
    async fn settle_all(&self, store: &Store, found: Vec<Found>, report: &mut AdoptReport) -> Result<Chores> {
        let settled: Vec<(Found, Option<Settled>)> = futures::stream::iter(found)
            .map(|found| async move {
                let settled = match &found.claim {
                    ClaimAt::KeyClaim => None,
                    ClaimAt::Seal(seal, generation) => Some(settle_one(store, seal, *generation).await?),
                };
                Ok::<_, Error>((found, settled))
            })
            .buffered(ADOPT_IN_FLIGHT_MAX)
            .try_collect()
            .await?;
        let mut clear: Vec<Path> = Vec::new();
        let mut losers: Vec<Path> = Vec::new();
        let mut releases: Vec<(Path, Released)> = Vec::new();
        for (Found { hash, newest, claim, entries }, settled) in settled {
            let seal = match (claim, settled) {
                (ClaimAt::KeyClaim, _) => {
                    losers.extend(entries.iter().cloned());
                    clear.extend(entries);
                    continue;
                }
                (ClaimAt::Seal(seal, generation), Some(settled)) => (seal, generation, settled),
                (ClaimAt::Seal(..), None) => return Err(Error::bug("a seal left unsettled")),
            };
            let (seal, generation, settled) = seal;
            match settled {
                Settled::New | Settled::Already | Settled::Refused(_) | Settled::Quiet => {
                    losers.extend(entries.iter().filter(|e| !is_winners(e, &seal)).cloned());
                    clear.extend(entries);
                }
                // The entries stage toward a seal to come (or are a held-back seal's): left for a later round.
                Settled::Release { .. } | Settled::HeldBack(_) => {
                    if !entries.is_empty() {
                        report.unsealed += 1;
                    }
                }
            }
            match settled {
                Settled::New => report.adopted.push(seal.id),
                Settled::Already => report.already_adopted += 1,
                Settled::Refused(reason) => {
                    self.settle_quietly(store, hash, &seal.id, newest)?;
                    report.cleanup.extend(seal.results);
                    report.refused.push(Refused { id: seal.id, reason });
                }
                Settled::Quiet => self.settle_quietly(store, hash, &seal.id, newest)?,
                Settled::Release { next } => {
                    let path = self.shared.claim_at(&hash, generation);
                    releases.push((path, Released { id: seal.id.clone(), next }));
                    // The next generation is not listed yet: settled until it is.
                    self.settle_quietly(store, hash, &seal.id, newest)?;
                    report.cleanup.extend(seal.results);
                    report.released.push(seal.id);
                }
                Settled::HeldBack(reason) => report.held_back.push(Refused { id: seal.id, reason }),
            }
        }
        Ok(Chores { clear, losers, releases })
    }

    /// (5) The losers' results to the garbage ledger, the store flushed to its mirror, then the entries deleted and
    /// the claims released.
    async fn finish_round(&self, store: &Store, chores: Chores, report: &mut AdoptReport) -> Result<()> {
        let Chores { clear, losers, releases } = chores;
        let lost: Vec<Option<Staged>> = futures::stream::iter(&losers)
            .map(|path| self.read_staged(path))
            .buffered(SHARED_CONCURRENT_MAX)
            .try_collect()
            .await?;
        report.requests += losers.len() as u64;
        // The losers' results go to the store's garbage ledger (made durable by the flush below, before their
        // entries go), so the data-file collector deletes their files even if no caller reads the report.
        for staged in lost.into_iter().flatten() {
            if !staged.results.is_empty() {
                store.discard(&staged.id, Attempt::new(staged.attempt), staged.results.clone()).await?;
            }
            report.cleanup.extend(staged.results);
        }
        // Entries go, and claims are released, only once the store's side is in the mirror: a committer that
        // loses its disk now restores the adopted checkpoints and does not need the inbox to find them again,
        // and a released claim's checkpoint is restored dropped (a seal released while the mirror still held it
        // adopted would be committed and read again).
        store.flush().await?;
        report.requests += clear.len() as u64;
        self.shared.delete_all(clear).await?;
        report.requests += releases.len() as u64;
        futures::stream::iter(releases)
            .map(|(path, released)| async move {
                let bytes = envelope::encode(&Body::Released(released))?;
                self.shared.put(&path, bytes).await
            })
            .buffered(SHARED_CONCURRENT_MAX)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// The newest generation of the claim at `hash`: a seal, another checkpoint's key claim, or nothing yet.
    pub(crate) async fn read_seal(&self, hash: &str) -> Result<Option<ClaimAt>> {
        let current = self.shared.current_claim(hash).await?;
        match current.body {
            None => Ok(None),
            Some(Body::Seal(seal)) => Ok(Some(ClaimAt::Seal(seal, current.generation))),
            // A `for_key` checkpoint whose key another checkpoint claimed: none of its attempts can seal.
            Some(Body::KeyClaim(_)) => Ok(Some(ClaimAt::KeyClaim)),
            Some(Body::Staged(_) | Body::Released(_)) => Err(Error::corrupt(format!(
                "{}: not a claim where a claim belongs",
                self.shared.describe(&self.shared.claim_at(hash, current.generation))
            ))),
        }
    }

    /// Remembers that the claim `hash` of `id` is settled as its generations and the store's record of `id`
    /// now stand.
    fn settle_quietly(&self, store: &Store, hash: String, id: &CheckpointId, generation: u32) -> Result<()> {
        let record = record_of(store, id)?;
        self.quiet()?.insert(hash, Quiet { id: id.clone(), generation, record });
        Ok(())
    }

    /// The first [`SHARED_ROUND_ENTRIES_MAX`] inbox entries grouped by the claim they stage toward, in claim
    /// order, and how many objects the listing returned.
    async fn groups(&self) -> Result<(BTreeMap<String, Vec<Path>>, u64)> {
        let root = self.shared.inbox_root();
        let mut groups: BTreeMap<String, Vec<Path>> = BTreeMap::new();
        let listed = self.shared.list(&root, SHARED_ROUND_ENTRIES_MAX).await?;
        let count = listed.len() as u64;
        for meta in listed {
            let parts: Vec<_> = meta.location.prefix_match(&root).map(|p| p.collect()).unwrap_or_default();
            match parts.as_slice() {
                [hash, _name] => groups.entry(hash.as_ref().to_owned()).or_default().push(meta.location.clone()),
                _ => tracing::warn!(path = %meta.location, "an object in the inbox that no worker writes; left alone"),
            }
        }
        Ok((groups, count))
    }

    /// Lists every claim and keeps the hashes whose claim is not known: not of a checkpoint in `adopted`, not
    /// a key claim this handle read, and not settled quietly by this handle as the listing's generations and
    /// the store's record still stand. Each with the newest generation listed, at most
    /// [`SHARED_ROUND_ENTRIES_MAX`] (the listing stops there: the rest are found next round). Returns them and
    /// how many objects the listing returned.
    async fn unknown_claims(&self, store: &Store, adopted: &HashSet<String>) -> Result<(Vec<(String, u32)>, u64)> {
        let root = self.shared.claims_root();
        let key_claims = self.key_claims()?.clone();
        let mut unknown: BTreeMap<String, u32> = BTreeMap::new();
        let listed = self
            .shared
            .list_each(&root, |meta| {
                let parts: Vec<_> = meta.location.prefix_match(&root).map(|p| p.collect()).unwrap_or_default();
                match parts.as_slice() {
                    [name] => match parse_claim_name(name.as_ref()) {
                        Some((hash, generation)) if !adopted.contains(hash) && !key_claims.contains(hash) => {
                            let newest = unknown.entry(hash.to_owned()).or_default();
                            *newest = (*newest).max(generation);
                        }
                        Some(_) => {}
                        None => tracing::warn!(path = %meta.location, "a stray object among the claims; left alone"),
                    },
                    _ => tracing::warn!(path = %meta.location, "a stray object among the claims; left alone"),
                }
                unknown.len() < SHARED_ROUND_ENTRIES_MAX
            })
            .await?;
        let quiet = self.quiet()?.clone();
        let mut kept = Vec::with_capacity(unknown.len());
        for (hash, newest) in unknown {
            if let Some(q) = quiet.get(&hash)
                && newest <= q.generation
                && record_of(store, &q.id)? == q.record
            {
                continue;
            }
            kept.push((hash, newest));
        }
        Ok((kept, listed))
    }

    fn quiet(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, Quiet>>> {
        self.quiet.lock().map_err(|_| Error::bug("an inbox handle's lock was poisoned by a panic"))
    }

    fn key_claims(&self) -> Result<std::sync::MutexGuard<'_, HashSet<String>>> {
        self.key_claims.lock().map_err(|_| Error::bug("an inbox handle's lock was poisoned by a panic"))
    }

    pub(crate) async fn read_staged(&self, path: &Path) -> Result<Option<Staged>> {
        let Some(bytes) = self.shared.get(path).await? else { return Ok(None) };
        match envelope::decode(&bytes, &self.shared.describe(path))? {
            Body::Staged(s) => Ok(Some(s)),
            _ => Err(Error::corrupt(format!("{}: not a staged part", self.shared.describe(path)))),
        }
    }
}

/// Whether an inbox entry is one of the winning attempt's parts (its results are in the seal): named by the
/// winner's session and attempt.
pub(crate) fn is_winners(entry: &Path, seal: &Seal) -> bool {
    let prefix = format!("{:032x}-{:010}-", seal.author.session, seal.attempt);
    entry.filename().is_some_and(|name| name.starts_with(&prefix))
}

/// The claim names of every checkpoint `store` holds adopted (Sealed, Committing, CommitUnknown, Committed):
/// `seal_hash` of each id (for an id from [`CheckpointId::for_key`], its key's hash, read from the id). A claim
/// named so needs no read, whatever its generation: adopting its seal again would find the checkpoint already
/// there. A checkpoint the store holds Aborted or Staged is not among them: its seal may be one to release, or
/// to adopt as its next attempt.
fn adopted_claims(store: &Store) -> Result<HashSet<String>> {
    let mut adopted = HashSet::new();
    for filter in StateFilter::ALL {
        if !is_adopted_filter(filter) {
            continue;
        }
        store.each_id(filter, |id| {
            adopted.insert(seal_hash(id));
        })?;
    }
    Ok(adopted)
}

/// Whether the store's state `filter` is one of an adopted checkpoint's: Sealed or later, never dropped. Staged
/// and Aborted are not: a seal of such a checkpoint may be one to release, or to adopt as its next attempt.
fn is_adopted_filter(filter: StateFilter) -> bool {
    !matches!(filter, StateFilter::Staged | StateFilter::Aborted)
}

fn is_adopted(state: CheckpointState) -> bool {
    is_adopted_filter(StateFilter::from(state))
}

/// The store's record of `id`: its state and attempt.
fn record_of(store: &Store, id: &CheckpointId) -> Result<Option<(CheckpointState, u32)>> {
    Ok(store.get(id)?.map(|info| (info.state, info.attempt.get())))
}

/// Settles one seal found in generation `generation` of its claim against the store: adopts it (as a one-part
/// checkpoint, idempotent across a crash at any point), finds it adopted, or retires it (the store dropped
/// it: its results go to the garbage ledger, and the caller releases the claim after the flush). A refusal
/// of the store that concerns this checkpoint alone holds it back instead of failing the round.
async fn settle_one(store: &Store, seal: &Seal, generation: u32) -> Result<Settled> {
    match settle_in_store(store, seal, generation).await {
        Err(e) if e.transition().is_some() => Ok(Settled::HeldBack(format!(
            "{e} (the seal of generation {generation} of its claim is left as it is; the next adoption round \
             tries it again)"
        ))),
        other => other,
    }
}

async fn settle_in_store(store: &Store, seal: &Seal, generation: u32) -> Result<Settled> {
    let id = &seal.id;
    let record = record_of(store, id)?;
    let sealed = match state::adoption(record, generation) {
        state::Adoption::Already => return Ok(Settled::Already),
        state::Adoption::Unaccounted => {
            let at = record
                .map_or_else(|| "holds no record of it".to_owned(), |(s, a)| format!("holds it {s:?} at attempt {a}"));
            return Ok(Settled::HeldBack(format!(
                "checkpoint {id}: its claim is at generation {generation} (earlier seals were released), and the \
                 committer's store {at}, which does not account for that: open the store that adopted its earlier \
                 seals (restore it from the job's mirror)"
            )));
        }
        state::Adoption::Retire { abort_first } => {
            for key in &seal.keys {
                if store.is_processed(key)? {
                    // Refused at adoption (KeyConflict): the key is another checkpoint's, so the claim stands.
                    return Ok(Settled::Quiet);
                }
            }
            let attempt = record.map_or(0, |(_, a)| a);
            let Some(next) = attempt.checked_add(1).filter(|n| *n <= CLAIM_GENERATIONS_MAX) else {
                // Checked before anything is written: the seal stays as it is, this checkpoint alone held back.
                return Ok(Settled::HeldBack(format!(
                    "checkpoint {id}: its claim's next generation would pass {}, the highest a claim reaches, so it \
                     cannot be released again; run its input under a new job",
                    CLAIM_GENERATIONS_MAX
                )));
            };
            if abort_first {
                store.abort(id).await?;
            }
            if !seal.results.is_empty() {
                store.discard(id, Attempt::new(attempt), seal.results.clone()).await?;
            }
            return Ok(Settled::Release { next });
        }
        state::Adoption::First => {
            let part =
                StagePart::new(Attempt::FIRST, Part::FIRST).keys(seal.keys.clone()).results(seal.results.clone());
            // One durable commit: the part and the seal together.
            match store.stage_and_seal(id, part, 1).await {
                // Left Staged by an earlier committer (a refused seal whose abort a crash cut off): complete, so
                // sealed.
                Err(e) if matches!(e.transition(), Some(TransitionError::Orphaned { .. })) => store.seal(id, 1).await,
                other => other.map(drop),
            }
        }
        // One durable commit: the next attempt begun, its part staged and sealed.
        state::Adoption::Next => {
            store.restart_stage_and_seal(id, seal.keys.clone(), seal.results.clone()).await.map(drop)
        }
    };
    match sealed {
        Ok(()) => Ok(Settled::New),
        Err(e) if matches!(e.transition(), Some(TransitionError::KeyConflict { .. })) => {
            let reason = e.to_string();
            // The abort drops the staged part into the garbage ledger (durable with the round's flush).
            store.abort(id).await?;
            Ok(Settled::Refused(reason))
        }
        Err(e) => Err(e),
    }
}
