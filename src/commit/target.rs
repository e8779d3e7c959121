//! The [`Target`] contract every table adapter meets, and the outcomes it answers with: the seam between
//! the committer and a table format (Lance, Delta, Iceberg, the reference [`crate::DirTable`]).

use async_trait::async_trait;

use crate::types::{CheckpointId, CommitKey, Epoch, WriteResult};

/// One commit offered to the target: everything it must write atomically with the data.
#[derive(Clone, Debug)]
pub struct TargetCommit<'a> {
    /// The commit key `(job, n)`; the target must refuse a second commit under it.
    pub key: &'a CommitKey,
    /// The checkpoints it covers, sorted; recorded in the target's commit so a probe can return them.
    pub ids: &'a [CheckpointId],
    /// The writer's epoch; recorded in the target's commit.
    pub epoch: Epoch,
    /// The write results to publish, in checkpoint then part order.
    pub results: &'a [WriteResult],
    /// Whether this is the job's last commit (the fast path of a rerun looks for it).
    pub final_commit: bool,
    /// The target version the commit was prepared against ([`Target::version`] before the intent was
    /// recorded).
    pub prepared_version: Option<u64>,
}

/// The target's answer to a commit.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum CommitOutcome {
    /// The commit landed.
    Committed,
    /// The commit definitely did not land and never will (a refused precondition, a validation error). The
    /// committer probes before re-committing under the same key.
    NotLanded {
        /// Why, in the target's words.
        reason: String,
    },
    /// It may or may not have landed (a timeout, a 5xx, a lost response). Only a probe can tell.
    Unknown {
        /// What happened.
        reason: String,
    },
}

/// The target's answer to a probe of one key.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ProbeOutcome {
    /// A commit under this key is in the table. `ids` are the checkpoints it recorded; `None` for a target that
    /// keeps only a watermark ("version ≥ n", like Delta's `txn`), which is sound only because keys are
    /// strictly sequential.
    Committed {
        /// The checkpoints the landed commit recorded, if the target keeps them, in any order.
        ids: Option<Vec<CheckpointId>>,
    },
    /// The target knows no commit under this key landed, and none can land later.
    NotCommitted,
    /// The target cannot tell (unreachable, or its history was expired past the key).
    Unknown {
        /// Why.
        reason: String,
    },
}

/// The contract every table adapter implements.
///
/// An adapter guarantees:
/// 1. **Key exclusivity**: at most one commit per [`CommitKey`] can ever land; where the format allows it, the
///    commit is conditional on the target's last key for the job being `n − 1` (this is where a zombie
///    writer's late commit is refused).
/// 2. **Atomicity**: the key, the covered ids and the epoch are written atomically with the data.
/// 3. **Honest probes**: [`Target::probe`] never answers [`ProbeOutcome::NotCommitted`] unless it knows: a key
///    whose history was expired is [`ProbeOutcome::Unknown`].
/// 4. **No hidden retries**: the table library's own rebase-and-retry is switched off or key-exclusive, and a
///    commit that may have landed is reported [`CommitOutcome::Unknown`], never `NotLanded`.
///
/// A probe's `ids` may come in any order: the committer compares them with the recorded set as sets.
///
/// Fencing through the mirror does **not** keep a paused zombie away from the table: a writer paused right
/// after its commit intent still calls [`Target::commit`] when it resumes, whatever newer epoch has claimed the
/// mirror since. Only guarantee 1, key exclusivity, refuses it; an adapter without it is not safe.
///
/// The committer probes the first key n an open begins, before it begins it (one probe an open, and again after
/// an un-bind): a target that already holds n proves the store is behind the table (a mirror that went
/// backwards), and the store is refused. Later keys follow the store's own commits; another writer's landing in
/// between is refused by key exclusivity.
///
/// The reference adapter is [`crate::DirTable`].
#[async_trait]
pub trait Target: Send + Sync {
    /// The table's current version, recorded with the commit intent to bound a later probe.
    async fn version(&self) -> crate::Result<Option<u64>>;

    /// Commits `commit` atomically, or says it did not, or says it cannot tell.
    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome;

    /// Whether a commit under `key` is in the table. `prepared_version` is what the intent recorded.
    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome;
}
