//! The committer's side: find what workers sealed since the last round (the inbox holds only that), adopt it
//! into the committer's own store, make that durable in its mirror, then clear the inbox.

use std::collections::BTreeMap;

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path;

use super::envelope::{self, Body, Seal, Staged};
use super::{SHARED_CONCURRENT_MAX, SHARED_ROUND_ENTRIES_MAX, SharedStaging};
use crate::error::{Error, Result, TransitionError};
use crate::state::CheckpointState;
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
    /// Sealed checkpoints the store already held (a round that crashed after adopting, before clearing).
    pub already_adopted: usize,
    /// Checkpoints with staged parts and no seal yet: tasks still running, or attempts that died before
    /// sealing (their parts stay until a seal of the same checkpoint arrives).
    pub unsealed: usize,
    /// Write results staged by attempts that did not win their checkpoint's seal: delete their data files.
    pub cleanup: Vec<WriteResult>,
    /// Sealed checkpoints the store refused.
    pub refused: Vec<Refused>,
    /// Object-store requests this round made (lists, reads, deletes).
    pub requests: u64,
}

/// The committer's view of a job's shared staging. Its rounds cost what is new: one listing of the inbox
/// (which only holds parts not yet adopted), one read per sealed checkpoint, one read per part of an attempt
/// that lost, one delete per inbox entry; nothing is read from the job's history.
#[derive(Clone, Debug)]
pub struct Inbox {
    pub(super) shared: SharedStaging,
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
        Self { shared }
    }

    /// Adopts every checkpoint sealed since the last round into `store` (the committer's, of the same job),
    /// waits until its mirror holds them, then deletes their inbox entries. A crash anywhere repeats nothing
    /// wrongly: adoption is idempotent, and entries are deleted only after their adoption is durable.
    pub async fn adopt(&self, store: &Store) -> Result<AdoptReport> {
        if store.job() != self.shared.job() {
            return Err(Error::wrong_store(format!(
                "the inbox is job {}'s, the store job {}'s: open both for the same job",
                self.shared.job(),
                store.job()
            )));
        }
        let mut report = AdoptReport::default();
        let groups = self.groups().await?;
        report.requests += 1;
        // Reads and adoptions run up to SHARED_CONCURRENT_MAX at a time: a round after 64 workers sealed costs
        // a few round trips, not 64, and the store folds the concurrent adoptions into a few group commits.
        let claims: Vec<(Option<ClaimAt>, Vec<Path>)> = futures::stream::iter(groups)
            .map(|(hash, entries)| async move { Ok::<_, Error>((self.read_seal(&hash).await?, entries)) })
            .buffered(SHARED_CONCURRENT_MAX)
            .try_collect()
            .await?;
        report.requests += claims.len() as u64;
        let mut clear: Vec<Path> = Vec::new();
        let mut losers: Vec<Path> = Vec::new();
        let mut sealed: Vec<Seal> = Vec::new();
        for (claim, entries) in claims {
            match claim {
                None => report.unsealed += 1,
                Some(ClaimAt::KeyClaim) => {
                    losers.extend(entries.iter().cloned());
                    clear.extend(entries);
                }
                Some(ClaimAt::Seal(seal)) => {
                    losers.extend(entries.iter().filter(|e| !is_winners(e, &seal)).cloned());
                    clear.extend(entries);
                    sealed.push(seal);
                }
            }
        }
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
        report.cleanup.extend(lost.into_iter().flatten().flat_map(|s| s.results));
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

    /// The inbox's entries grouped by the claim they stage toward, in claim order.
    async fn groups(&self) -> Result<BTreeMap<String, Vec<Path>>> {
        let root = self.shared.inbox_root();
        let mut groups: BTreeMap<String, Vec<Path>> = BTreeMap::new();
        for meta in self.shared.list(&root, SHARED_ROUND_ENTRIES_MAX).await? {
            let parts: Vec<_> = meta.location.prefix_match(&root).map(|p| p.collect()).unwrap_or_default();
            match parts.as_slice() {
                [hash, _name] => groups.entry(hash.as_ref().to_owned()).or_default().push(meta.location.clone()),
                _ => tracing::warn!(path = %meta.location, "an object in the inbox that no worker writes; left alone"),
            }
        }
        Ok(groups)
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
