//! The committer's side: find what workers sealed since the last round (the claims it does not know yet, and
//! the inbox's entries), adopt it into the committer's own store, make that durable in its mirror, then clear
//! the inbox.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path;

use super::envelope::{self, Body, Seal, Staged};
use super::{SHARED_CONCURRENT_MAX, SHARED_ROUND_ENTRIES_MAX, SharedStaging, list_requests, seal_hash};
use crate::error::{Error, Result, TransitionError};
use crate::state::{CheckpointState, StateFilter};
use crate::store::Store;
use crate::types::{Attempt, CheckpointId, Part, StagePart, WriteResult};

/// A sealed checkpoint the committer's store refused (its key is owned by another adopted checkpoint): it is
/// aborted there, and its results are in [`AdoptReport::cleanup`].
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
    /// Write results staged by attempts that did not win their checkpoint's seal: delete their data files.
    pub cleanup: Vec<WriteResult>,
    /// Sealed checkpoints the store refused.
    pub refused: Vec<Refused>,
    /// Object-store requests this round made: list requests (one per 1,000 objects listed, at least one per
    /// listing: the claims' and the inbox's), reads, and one per inbox entry deleted (an upper bound: a store
    /// with a bulk delete, such as S3, takes up to 1,000 in one request).
    pub requests: u64,
}

/// The committer's view of a job's shared staging. A round lists the claims (a list request per 1,000
/// claims: the one part that grows with the job's history, in requests and not in reads), reads only the
/// claims it does not know (a claim is known when the store holds its checkpoint past Staged, or this handle
/// read it before and found a key claim), lists the inbox (parts staged by [`super::Worker::stage`], which only
/// holds what is not adopted yet), reads each part of an attempt that lost, and deletes the adopted entries.
/// Cheap to clone; clones share the cache of key claims.
#[derive(Clone, Debug)]
pub struct Inbox {
    pub(super) shared: SharedStaging,
    /// Names of claims this handle read and found to be key claims: they are never read again.
    key_claims: Arc<Mutex<HashSet<String>>>,
}

/// What a group's claim holds.
pub(super) enum ClaimAt {
    Seal(Seal),
    KeyClaim,
}

/// What adopting one seal came to.
enum Adoption {
    New,
    Already,
    Refused(String),
}

impl Inbox {
    /// The committer's inbox of `shared`'s job.
    pub fn new(shared: SharedStaging) -> Self {
        Self { shared, key_claims: Arc::default() }
    }

    /// Adopts every checkpoint sealed since the last round into `store` (the committer's, of the same job),
    /// waits until its mirror holds them, then deletes their inbox entries. A crash anywhere repeats nothing
    /// wrongly: adoption is idempotent (a checkpoint the store holds past Staged is never adopted again), the
    /// store never forgets a checkpoint, and entries are deleted only after their adoption is durable.
    ///
    /// Seals are found by listing the claims, whole (paged, never cut short: a job holds any number), keeping
    /// only the names not known yet, at most [`SHARED_ROUND_ENTRIES_MAX`] of them (the rest wait for the next
    /// round). Each is read once: a seal is adopted, a key claim remembered in this handle. The inbox is listed
    /// too, for the parts of [`super::Worker::stage`]: a group whose claim this round read is settled by that
    /// read; one whose claim is known from the store is read again (its entries are left from a round that
    /// crashed before clearing, or of a loser, and the seal tells which); one whose claim was not listed is
    /// unsealed.
    pub async fn adopt(&self, store: &Store) -> Result<AdoptReport> {
        if store.job() != self.shared.job() {
            return Err(Error::wrong_store(format!(
                "the inbox is job {}'s, the store job {}'s: open both for the same job",
                self.shared.job(),
                store.job()
            )));
        }
        let mut report = AdoptReport::default();
        // (1) The claims the store settled: their checkpoints are past Staged there (adopted, refused and
        // aborted, or committed), so reading them again would adopt nothing.
        let settled = settled_claims(store)?;
        // (2) The claims listing, whole; only the names neither the store nor this handle knows are kept.
        let (unknown, listed) = self.unknown_claims(&settled).await?;
        report.requests += list_requests(listed);
        // Reads and adoptions run up to SHARED_CONCURRENT_MAX at a time: a round after 64 workers sealed costs
        // a few round trips, not 64, and the store folds the concurrent adoptions into a few group commits.
        let read: Vec<(String, Option<ClaimAt>)> = futures::stream::iter(unknown)
            .map(|hash| async move { Ok::<_, Error>((hash.clone(), self.read_seal(&hash).await?)) })
            .buffered(SHARED_CONCURRENT_MAX)
            .try_collect()
            .await?;
        report.requests += read.len() as u64;
        let mut claims: BTreeMap<String, ClaimAt> = BTreeMap::new();
        for (hash, claim) in read {
            match claim {
                // Listed, then not found: claims are never deleted, so a store that lists before it reads.
                None => {}
                Some(ClaimAt::KeyClaim) => {
                    self.key_claims()?.insert(hash.clone());
                    claims.insert(hash, ClaimAt::KeyClaim);
                }
                Some(ClaimAt::Seal(seal)) => {
                    claims.insert(hash, ClaimAt::Seal(seal));
                }
            }
        }
        // (3) The inbox: the parts of multi-part checkpoints and of attempts that lost.
        let (groups, listed) = self.groups().await?;
        report.requests += list_requests(listed);
        let mut clear: Vec<Path> = Vec::new();
        let mut losers: Vec<Path> = Vec::new();
        let mut again: Vec<(String, Vec<Path>)> = Vec::new();
        let mut settled_groups: Vec<(ClaimAt, Vec<Path>)> = Vec::new();
        for (hash, entries) in groups {
            if let Some(claim) = claims.remove(&hash) {
                settled_groups.push((claim, entries));
            } else if self.key_claims()?.contains(&hash) {
                settled_groups.push((ClaimAt::KeyClaim, entries));
            } else if settled.contains(&hash) {
                again.push((hash, entries));
            } else {
                // Not in the claims listing: no claim yet (a seal created since is found next round).
                report.unsealed += 1;
            }
        }
        let reread: Vec<(Option<ClaimAt>, Vec<Path>)> = futures::stream::iter(again)
            .map(|(hash, entries)| async move { Ok::<_, Error>((self.read_seal(&hash).await?, entries)) })
            .buffered(SHARED_CONCURRENT_MAX)
            .try_collect()
            .await?;
        report.requests += reread.len() as u64;
        let mut sealed: Vec<Seal> = Vec::new();
        for (claim, entries) in reread {
            match claim {
                None => report.unsealed += 1,
                Some(claim) => settled_groups.push((claim, entries)),
            }
        }
        for (claim, entries) in settled_groups {
            match claim {
                ClaimAt::KeyClaim => {
                    losers.extend(entries.iter().cloned());
                    clear.extend(entries);
                }
                ClaimAt::Seal(seal) => {
                    losers.extend(entries.iter().filter(|e| !is_winners(e, &seal)).cloned());
                    clear.extend(entries);
                    sealed.push(seal);
                }
            }
        }
        // Seals this round read whose checkpoints have no inbox entries (stage_and_seal's).
        sealed.extend(claims.into_values().filter_map(|c| match c {
            ClaimAt::Seal(seal) => Some(seal),
            ClaimAt::KeyClaim => None,
        }));
        let adoptions: Vec<(Seal, Adoption)> = futures::stream::iter(sealed)
            .map(|seal| async move { adopt_one(store, &seal).await.map(|a| (seal, a)) })
            .buffered(SHARED_CONCURRENT_MAX)
            .try_collect()
            .await?;
        for (seal, adoption) in adoptions {
            match adoption {
                Adoption::New => report.adopted.push(seal.id),
                Adoption::Already => report.already_adopted += 1,
                Adoption::Refused(reason) => {
                    report.cleanup.extend(seal.results);
                    report.refused.push(Refused { id: seal.id, reason });
                }
            }
        }
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
        // Entries go only once the adoption is in the mirror: a committer that loses its disk now restores
        // the adopted checkpoints and does not need the inbox to find them again.
        store.flush().await?;
        report.requests += clear.len() as u64;
        self.shared.delete_all(clear).await?;
        Ok(report)
    }

    /// The claim at `hash`: a seal, another checkpoint's key claim, or nothing yet.
    pub(super) async fn read_seal(&self, hash: &str) -> Result<Option<ClaimAt>> {
        let path = self.shared.claim(hash);
        let Some(body) = self.shared.read_object(&path).await? else { return Ok(None) };
        match body {
            Body::Seal(seal) => Ok(Some(ClaimAt::Seal(seal))),
            // A `for_key` checkpoint whose key another checkpoint claimed: none of its attempts can seal.
            Body::KeyClaim(_) => Ok(Some(ClaimAt::KeyClaim)),
            Body::Staged(_) => {
                Err(Error::corrupt(format!("{}: a staged part in place of a seal", self.shared.describe(&path))))
            }
        }
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

    /// Lists every claim and keeps the names that are neither in `settled` nor key claims this handle read, in
    /// listing order, at most [`SHARED_ROUND_ENTRIES_MAX`] (the listing stops there: the rest are found next
    /// round). Returns them and how many objects the listing returned.
    async fn unknown_claims(&self, settled: &HashSet<String>) -> Result<(Vec<String>, u64)> {
        let root = self.shared.claims_root();
        let key_claims = self.key_claims()?.clone();
        let mut unknown: Vec<String> = Vec::new();
        let listed = self
            .shared
            .list_each(&root, |meta| {
                let parts: Vec<_> = meta.location.prefix_match(&root).map(|p| p.collect()).unwrap_or_default();
                match parts.as_slice() {
                    [hash] if !settled.contains(hash.as_ref()) && !key_claims.contains(hash.as_ref()) => {
                        unknown.push(hash.as_ref().to_owned());
                    }
                    [_hash] => {}
                    _ => tracing::warn!(path = %meta.location, "a stray object among the claims; left alone"),
                }
                unknown.len() < SHARED_ROUND_ENTRIES_MAX
            })
            .await?;
        Ok((unknown, listed))
    }

    fn key_claims(&self) -> Result<std::sync::MutexGuard<'_, HashSet<String>>> {
        self.key_claims.lock().map_err(|_| Error::bug("an inbox handle's lock was poisoned by a panic"))
    }

    pub(super) async fn read_staged(&self, path: &Path) -> Result<Option<Staged>> {
        let Some(bytes) = self.shared.get(path).await? else { return Ok(None) };
        match envelope::decode(&bytes, &self.shared.describe(path))? {
            Body::Staged(s) => Ok(Some(s)),
            _ => Err(Error::corrupt(format!("{}: not a staged part", self.shared.describe(path)))),
        }
    }
}

/// Whether an inbox entry is one of the winning attempt's parts (its results are in the seal): named by the
/// winner's session and attempt.
pub(super) fn is_winners(entry: &Path, seal: &Seal) -> bool {
    let prefix = format!("{:032x}-{:010}-", seal.author.session, seal.attempt);
    entry.filename().is_some_and(|name| name.starts_with(&prefix))
}

/// The claim names of every checkpoint `store` holds past Staged: `seal_hash` of each id (for an id from
/// [`CheckpointId::for_key`], its key's hash, read from the id). A claim named so needs no read: adopting its
/// seal again would find the checkpoint already there (or refused: a refused seal is aborted in the store).
fn settled_claims(store: &Store) -> Result<HashSet<String>> {
    let mut settled = HashSet::new();
    for filter in StateFilter::ALL {
        if filter == StateFilter::Staged {
            continue;
        }
        store.each_id(filter, |id| {
            settled.insert(seal_hash(id));
        })?;
    }
    Ok(settled)
}

/// Adopts one seal into the store as a one-part checkpoint: idempotent across a crash at any point.
async fn adopt_one(store: &Store, seal: &Seal) -> Result<Adoption> {
    let id = &seal.id;
    if store.get(id)?.is_some_and(|info| info.state != CheckpointState::Staged) {
        return Ok(Adoption::Already);
    }
    let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(seal.keys.clone()).results(seal.results.clone());
    // One durable commit: the part and the seal together.
    let sealed = match store.stage_and_seal(id, part, 1).await {
        // Left Staged by an earlier committer (a refused seal whose abort a crash cut off): complete, so sealed.
        Err(e) if matches!(e.transition(), Some(TransitionError::Orphaned { .. })) => store.seal(id, 1).await,
        other => other.map(drop),
    };
    match sealed {
        Ok(()) => Ok(Adoption::New),
        Err(e) if matches!(e.transition(), Some(TransitionError::KeyConflict { .. })) => {
            let reason = e.to_string();
            store.abort(id).await?;
            Ok(Adoption::Refused(reason))
        }
        Err(e) => Err(e),
    }
}
