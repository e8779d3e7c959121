//! The operator's collection of a job's inbox (`sinkpoint gc --shared`): entries of attempts that will never be
//! adopted, which the committer did not clear because it crashed first or because no seal ever came.
//!
//! - **Lost** (the claim holds a seal by another session or attempt) and **key claimed** (the claim is another
//!   checkpoint's key claim, so no attempt of this one can seal): the committer deletes these itself when it
//!   adopts; a crash between its flush and its deletes leaves them. They can never be adopted (a claim's seal
//!   is created once and adoption reads only the seal), so they are due at any age. The claim read is its
//!   newest generation: after a release (docs/protocols/shared-staging.md) with no seal yet, the entry is
//!   unclaimed.
//! - **Unclaimed** (no claim at all): a worker that died before sealing, or one still running. Due only once
//!   older than the grace period; a younger one is kept, for its worker may still seal. Before an unclaimed
//!   entry is deleted its claim is read again, and an entry a seal now names (its worker sealed late) is kept.
//!   A worker that seals after its entries were deleted is still adopted (the committer finds seals by listing
//!   the claims, and a seal holds every part), but the results this report named for deletion are then in a
//!   sealed checkpoint: the grace period must exceed any task's time from stage to seal.
//! - **Not here**: a checkpoint sealed by `Worker::stage_and_seal` has no inbox entry at all (its seal holds
//!   its one part). An attempt of it that died before its create landed, or that lost, left nothing in the
//!   object store to find; a loser's call returns its results (`SealLost`), a dead one's files are the
//!   target's orphans.
//! - **Never deleted**: a claim object (fencing and the skip set need every one of them, released ones included),
//!   the winner's entries
//!   (the committer adopts them), anything outside `<prefix>/jobs/<job>/shared/inbox/`.
//!
//! Each due entry's write results are read and reported: the data files they name are garbage too, and the
//! operator (or a target's own collector) deletes them; this module does not touch the table.

use std::collections::BTreeMap;

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::ObjectMeta;
use object_store::path::Path;

use super::{Progress, ProgressFn, is_young, object_age_ms};
use crate::error::Result;
use crate::limits::{DELETE_BATCH_OBJECTS_MAX, INBOX_GC_ENTRIES_MAX, SHARED_CONCURRENT_MAX};
use crate::shared::{ClaimAt, Inbox, SealedBy, is_winners};
use crate::types::{CheckpointId, WriteResult};

/// Why an inbox entry will never be adopted.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum InboxReason {
    /// Another attempt won the checkpoint's seal.
    Lost {
        /// The winner.
        winner: SealedBy,
    },
    /// The checkpoint's claim is another checkpoint's key claim: none of its attempts can seal.
    KeyClaimed,
    /// No claim: the worker died before sealing (or is still running, if the entry is younger than the grace).
    Unclaimed,
}

impl InboxReason {
    /// A short name, for reports.
    pub fn name(&self) -> &'static str {
        match self {
            InboxReason::Lost { .. } => "lost",
            InboxReason::KeyClaimed => "key-claimed",
            InboxReason::Unclaimed => "unclaimed",
        }
    }
}

/// One inbox entry that will never be adopted.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct InboxEntry {
    /// Its path in the object store.
    pub path: Path,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its age by the store's `last_modified`, in milliseconds (0 for a time in the future).
    pub age_ms: u64,
    /// Why.
    pub reason: InboxReason,
    /// The checkpoint it staged toward (read from the entry; `None` for a kept entry, which is not read).
    pub id: Option<CheckpointId>,
    /// Its write results (read only for due entries): delete their data files.
    pub results: Vec<WriteResult>,
}

/// What [`find_inbox_garbage`] found.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct InboxGarbage {
    /// Entries that will never be adopted: what [`delete_inbox_garbage`] deletes.
    pub due: Vec<InboxEntry>,
    /// Unclaimed entries younger than the grace period: kept (their workers may still seal).
    pub young: Vec<InboxEntry>,
    /// Whether the listing stopped at [`crate::limits::INBOX_GC_ENTRIES_MAX`] entries: run again after deleting.
    pub truncated: bool,
}

impl InboxGarbage {
    /// The bytes of the due entries.
    pub fn due_bytes(&self) -> u64 {
        self.due.iter().map(|e| e.bytes).sum()
    }

    /// The bytes of the kept entries.
    pub fn young_bytes(&self) -> u64 {
        self.young.iter().map(|e| e.bytes).sum()
    }
}

/// Lists the entries of `inbox` that will never be adopted (see the module's rules): lost and key-claimed ones
/// at any age, unclaimed ones at least `grace_ms` old at `now_wall_ms` (milliseconds since the Unix epoch,
/// compared with the store's `last_modified`; [`crate::limits::INBOX_GRACE_MS_DEFAULT`] is a day); younger
/// unclaimed ones are reported as kept. Reads one claim per checkpoint and each due entry; deletes nothing.
/// Tells `progress` how many entries it has listed as the listing streams in ([`Progress::Listed`]), then how
/// many claims and due entries it has read ([`Progress::Read`]: first of the claims, then of the claims and the
/// due entries).
pub async fn find_inbox_garbage(
    inbox: &Inbox,
    now_wall_ms: u64,
    grace_ms: u64,
    progress: ProgressFn,
) -> Result<InboxGarbage> {
    let shared = &inbox.shared;
    let root = shared.inbox_root();
    let mut listed = Vec::new();
    shared
        .list_each(&root, |meta| {
            listed.push(meta);
            progress(Progress::Listed(listed.len() as u64));
            listed.len() < INBOX_GC_ENTRIES_MAX
        })
        .await?;
    let truncated = listed.len() >= INBOX_GC_ENTRIES_MAX;
    let mut groups: BTreeMap<String, Vec<ObjectMeta>> = BTreeMap::new();
    for meta in listed {
        let parts: Vec<_> = meta.location.prefix_match(&root).map(|p| p.collect()).unwrap_or_default();
        if let [hash, _name] = parts.as_slice() {
            groups.entry(hash.as_ref().to_owned()).or_default().push(meta);
        }
    }
    let claims_of = groups.len() as u64;
    let mut read = 0;
    let claims: Vec<(Option<ClaimAt>, Vec<ObjectMeta>)> = futures::stream::iter(groups)
        .map(|(hash, entries)| async move { Ok::<_, crate::Error>((inbox.read_seal(&hash).await?, entries)) })
        .buffered(SHARED_CONCURRENT_MAX)
        .inspect_ok(|_| {
            read += 1;
            progress(Progress::Read { done: read, of: claims_of });
        })
        .try_collect()
        .await?;
    let mut report = InboxGarbage { truncated, ..InboxGarbage::default() };
    for (claim, entries) in claims {
        for meta in entries {
            let reason = match &claim {
                Some(ClaimAt::Seal(seal, _)) if is_winners(&meta.location, seal) => continue,
                Some(ClaimAt::Seal(seal, _)) => InboxReason::Lost {
                    winner: SealedBy {
                        worker: seal.author.worker.clone(),
                        session: seal.author.session,
                        attempt: seal.attempt,
                    },
                },
                Some(ClaimAt::KeyClaim) => InboxReason::KeyClaimed,
                None => InboxReason::Unclaimed,
            };
            let age_ms = object_age_ms(now_wall_ms, &meta);
            let entry = InboxEntry { path: meta.location, bytes: meta.size, age_ms, reason, id: None, results: vec![] };
            if entry.reason == InboxReason::Unclaimed && is_young(age_ms, grace_ms) {
                report.young.push(entry);
            } else {
                report.due.push(entry);
            }
        }
    }
    let reads_of = claims_of + report.due.len() as u64;
    let staged: Vec<_> = futures::stream::iter(&report.due)
        .map(|entry| inbox.read_staged(&entry.path))
        .buffered(SHARED_CONCURRENT_MAX)
        .inspect_ok(|_| {
            read += 1;
            progress(Progress::Read { done: read, of: reads_of });
        })
        .try_collect()
        .await?;
    for (entry, staged) in report.due.iter_mut().zip(staged) {
        if let Some(staged) = staged {
            entry.id = Some(staged.id);
            entry.results = staged.results;
        }
    }
    Ok(report)
}

/// Deletes the due entries of `garbage` (found by [`find_inbox_garbage`] on `inbox`), never a claim. An
/// unclaimed entry's claim is read again first, and an entry a seal now names (its worker sealed since the
/// report) is kept. Returns how many entries were deleted. Tells `progress` how many unclaimed entries' claims
/// it has read again ([`Progress::Read`]), then how many entries are deleted so far ([`Progress::Deleted`], after
/// each round of `SHARED_CONCURRENT_MAX` bulk deletes).
pub async fn delete_inbox_garbage(inbox: &Inbox, garbage: &InboxGarbage, progress: ProgressFn) -> Result<u64> {
    let shared = &inbox.shared;
    let rereads_of = garbage.due.iter().filter(|e| e.reason == InboxReason::Unclaimed).count() as u64;
    let mut reread = 0;
    let root = shared.inbox_root();
    let mut paths = Vec::new();
    for entry in &garbage.due {
        let parts: Vec<_> = entry.path.prefix_match(&root).map(|p| p.collect()).unwrap_or_default();
        let [hash, _name] = parts.as_slice() else {
            return Err(crate::Error::invalid_input(format!(
                "{} is not an entry of the inbox {root}: the report is of another job",
                entry.path
            )));
        };
        if entry.reason == InboxReason::Unclaimed {
            let claim = inbox.read_seal(hash.as_ref()).await?;
            reread += 1;
            progress(Progress::Read { done: reread, of: rereads_of });
            if let Some(ClaimAt::Seal(seal, _)) = claim
                && is_winners(&entry.path, &seal)
            {
                continue;
            }
        }
        paths.push(entry.path.clone());
    }
    let deleted = paths.len() as u64;
    // One `delete_all` per round of its concurrency (up to SHARED_CONCURRENT_MAX streams of whole bulk
    // requests), so that progress can be told between rounds; the same bulk requests, in rounds.
    let mut done = 0;
    for round in paths.chunks(SHARED_CONCURRENT_MAX * DELETE_BATCH_OBJECTS_MAX) {
        shared.delete_all(round.to_vec()).await?;
        done += round.len() as u64;
        progress(Progress::Deleted { done, of: deleted });
    }
    Ok(deleted)
}
