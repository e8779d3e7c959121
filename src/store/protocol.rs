//! The commit protocol's raw steps (begin, commit empty, mark committed / unknown / not committed): crate-private,
//! because a step called out of order breaks exactly-once; the committer and `testkit::RawProtocol` call them.

use super::Store;
use super::checks::{sorted_ids, truncate};
use crate::error::Result;
use crate::types::CheckpointId;
use crate::wal::record::Record;
use crate::wal::writer::CallDurability;

/// The commit protocol's raw steps on a store: only [`crate::Committer`] (and tests) call them, in order.
pub(crate) struct Protocol<'a> {
    pub(super) store: &'a Store,
}

impl Protocol<'_> {
    /// Binds commit key `key` to `ids` (all Sealed, with results) durably, before the target is called.
    pub(crate) async fn begin_commit(
        &self,
        key: u64,
        ids: &[CheckpointId],
        target_version: Option<u64>,
        final_commit: bool,
    ) -> Result<()> {
        let ids = sorted_ids(ids)?;
        let record = Record::BeginCommit { key, ids, target_version, final_commit };
        self.store.call(record, CallDurability::Immediate).await.map(drop)
    }

    /// Marks Sealed checkpoints without write results committed, without a target commit.
    pub(crate) async fn commit_empty(&self, ids: &[CheckpointId]) -> Result<()> {
        let ids = sorted_ids(ids)?;
        self.store.call(Record::CommitEmpty { ids }, CallDurability::Immediate).await.map(drop)
    }

    /// Marks commit key `key` committed: the target provably holds it. Releases its write results.
    pub(crate) async fn mark_committed(&self, key: u64) -> Result<()> {
        self.store.call(Record::MarkCommitted { key }, CallDurability::Immediate).await.map(drop)
    }

    /// Marks commit key `key` as of unknown outcome: only a probe or [`Operator::resolve`] leaves that state.
    pub(crate) async fn mark_unknown(&self, key: u64, reason: &str) -> Result<()> {
        let reason = truncate(reason);
        self.store.call(Record::MarkUnknown { key, reason }, CallDurability::Immediate).await.map(drop)
    }

    /// Records that a probe found key `key` not committed: it goes back to Committing, to be re-committed under
    /// the same key.
    pub(crate) async fn mark_not_committed(&self, key: u64) -> Result<()> {
        self.store.call(Record::MarkNotCommitted { key }, CallDurability::Immediate).await.map(drop)
    }

    /// Records the job's end durably, so that every rerun's `recover` reports `finished` (the fast path).
    /// Refused with [`crate::TransitionError::Unfinished`] or [`crate::TransitionError::CommitInFlight`] while anything waits for
    /// the target; a no-op once recorded. A Staged checkpoint does not block it: restart or abort orphans first. The committer's [`crate::Committer::finish`] commits everything first.
    pub(crate) async fn mark_finished(&self) -> Result<()> {
        self.store.call(Record::Finish, CallDurability::Immediate).await.map(drop)
    }
}
