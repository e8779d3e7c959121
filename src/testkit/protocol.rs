//! The commit protocol's raw steps, for tests that drive it by hand (a naive committer that shows what the real
//! one prevents, the model suite, benches that build a store in a given state). Users never see them: on
//! [`Store`] they are crate-private, because a step called out of order (a key marked committed that never
//! reached the table) breaks exactly-once. Only [`crate::Committer`] calls them in production.

use async_trait::async_trait;

use crate::error::Result;
use crate::store::Store;
use crate::types::CheckpointId;

/// The committer's steps on a [`Store`], for tests. Import it (`use sinkpoint::testkit::RawProtocol;`) and call
/// them as methods.
#[async_trait]
pub trait RawProtocol {
    /// Binds commit key `key` to `ids` (all Sealed, with results) durably, before the target is called.
    async fn begin_commit(
        &self,
        key: u64,
        ids: &[CheckpointId],
        target_version: Option<u64>,
        final_commit: bool,
    ) -> Result<()>;
    /// Marks Sealed checkpoints without write results committed, without a target commit.
    async fn commit_empty(&self, ids: &[CheckpointId]) -> Result<()>;
    /// Marks commit key `key` committed, releasing its write results.
    async fn mark_committed(&self, key: u64) -> Result<()>;
    /// Marks commit key `key` as of unknown outcome.
    async fn mark_unknown(&self, key: u64, reason: &str) -> Result<()>;
    /// Records that a probe found key `key` not committed.
    async fn mark_not_committed(&self, key: u64) -> Result<()>;
    /// Records the job's end: refused while anything waits for the target.
    async fn mark_finished(&self) -> Result<()>;
}

#[async_trait]
impl RawProtocol for Store {
    async fn begin_commit(
        &self,
        key: u64,
        ids: &[CheckpointId],
        target_version: Option<u64>,
        final_commit: bool,
    ) -> Result<()> {
        self.protocol().begin_commit(key, ids, target_version, final_commit).await
    }

    async fn commit_empty(&self, ids: &[CheckpointId]) -> Result<()> {
        self.protocol().commit_empty(ids).await
    }

    async fn mark_committed(&self, key: u64) -> Result<()> {
        self.protocol().mark_committed(key).await
    }

    async fn mark_unknown(&self, key: u64, reason: &str) -> Result<()> {
        self.protocol().mark_unknown(key, reason).await
    }

    async fn mark_not_committed(&self, key: u64) -> Result<()> {
        self.protocol().mark_not_committed(key).await
    }

    async fn mark_finished(&self) -> Result<()> {
        self.protocol().mark_finished().await
    }
}
