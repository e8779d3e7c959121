//! The operator's escape hatches on a [`Store`]: each records an operator's verdict, with its reason, after a check
//! of the table by hand. Kept behind [`Store::operator`] so that the writer's API (stage, seal, restart, abort)
//! and these hatches are two audiences with two entry points.

use super::Store;
use super::checks::{self, check_reason, sorted_ids};
use crate::error::{Error, Result};
use crate::state::CheckpointState;
use crate::types::{CheckpointId, WriteResult};
use crate::wal::apply::Decided;
use crate::wal::record::{Record, Resolution};
use crate::wal::writer::CallDurability;

/// The operator's view of a [`Store`] (from [`Store::operator`]): the escape hatches for a key or a checkpoint the
/// protocol cannot settle by itself.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sinkpoint::Error> {
/// use sinkpoint::{Attempt, CheckpointId, CheckpointState, JobId, Part, StagePart, Store, TargetIdentity};
///
/// let dir = tempfile::tempdir().unwrap();
/// let store = Store::builder(JobId::new("job-1")?, TargetIdentity::new("file:///tables/t")?)
///     .path(dir.path().join("sink.redb"))
///     .open()
///     .await?;
/// let id = CheckpointId::new("input-0017")?;
/// store.stage(&id, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"s3://in/0017.csv".to_vec()])).await?;
/// store.seal(&id, 1).await?;
/// // The input file was bad: drop its checkpoint so that a rerun reads it again.
/// store.operator().force_abort(&[id.clone()], "input 0017 was truncated; re-read it").await?;
/// assert_eq!(store.get(&id)?.unwrap().state, CheckpointState::Aborted);
/// assert!(!store.is_processed(b"s3://in/0017.csv")?);
/// store.close();
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct Operator<'a> {
    pub(super) store: &'a Store,
}

impl std::fmt::Debug for Operator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").field("store", self.store).finish()
    }
}

impl Operator<'_> {
    /// The operator's escape hatch, after checking the table by hand: resolves key `key`, whose outcome is unknown
    /// (CommitUnknown: a probe could not tell), as committed or not committed, recording `reason`. Never used by
    /// the protocol itself, and meant for a stopped job (a committer running beside it may move the key between
    /// the check and the record).
    ///
    /// A Committed verdict on a key that is only Committing is refused with nothing written
    /// (`IllegalTransition`): running the job settles it (its committer probes the table, and records
    /// CommitUnknown when the probe cannot tell), while a wrong Committed verdict would lose every row the key
    /// holds. A NotCommitted verdict is taken from Committing too (a wrong one costs nothing: the table refuses
    /// the re-send). The same verdict on a key it already settled changes nothing.
    pub async fn resolve(self, key: u64, resolution: Resolution, reason: &str) -> Result<()> {
        check_reason(reason)?;
        let current = self.store.commit_value(key)?.map(|c| c.state);
        crate::state::check_verdict(key, current, resolution)?;
        let record = Record::Resolve { key, resolution, reason: reason.to_owned() };
        self.store.call(record, CallDurability::Immediate).await.map(drop)
    }

    /// The operator's escape hatch: aborts Sealed checkpoints (refused, with nothing written, for any other
    /// state: `NotSealed`), un-processing their keys atomically so their inputs are read again; returns their
    /// write results (also in the garbage ledger). Never used by the protocol itself. For a checkpoint adopted
    /// from shared staging ([`crate::shared::Inbox::adopt`]) the next adoption round releases its worker's
    /// claim, so workers see its input unprocessed and a rerun's seal is adopted as its next attempt.
    pub async fn force_abort(self, ids: &[CheckpointId], reason: &str) -> Result<Vec<WriteResult>> {
        check_reason(reason)?;
        let ids = sorted_ids(ids)?;
        let record = Record::ForceAbort { ids, reason: reason.to_owned() };
        Ok(self.store.call(record, CallDurability::Immediate).await?.dropped)
    }

    /// The operator's escape hatch for a key in flight that no probe can settle or that mismatches, after
    /// checking the table by hand: un-binds key `key` (never marked committed) so its checkpoints are Sealed
    /// again with their results, recording `reason`. The key is reused: the committer probes it before it begins
    /// it again, so if the table still holds a commit under `key` the store is refused (`WrongStore`) instead of
    /// writing a duplicate; remove or account for that commit first. Never loses a result.
    pub async fn unbind(self, key: u64, reason: &str) -> Result<()> {
        check_reason(reason)?;
        let record = Record::Unbind { key, reason: reason.to_owned() };
        // The key is begun again later: the target may hold it (that is why it was un-bound), so probe it first.
        self.store.forget_target_checked();
        self.store.call(record, CallDurability::Immediate).await.map(drop)
    }

    /// The operator's lossless way out of a key that landed with other content than the store recorded, on a
    /// table that keeps every commit (Lance, Delta: the key never leaves the table, so [`Operator::unbind`] alone
    /// leads to a refusal at the next begin). After checking the table by hand, records what actually landed
    /// under `key`: the checkpoints `landed` Committed under it, every other checkpoint the store had bound to
    /// `key` Sealed again, to be committed under a later key. `key` must be the key in flight (then `landed`
    /// must be among its recorded checkpoints) or, after an un-bind, the next key to begin (then every id in
    /// `landed` must be Sealed). Refused, with nothing written, otherwise; never loses a result the table does
    /// not hold. The committer's next begin probes the target again.
    pub async fn settle_landed(self, key: u64, landed: &[CheckpointId], reason: &str) -> Result<()> {
        check_reason(reason)?;
        let landed = sorted_ids(landed)?;
        let snapshot = self.store.snapshot()?;
        let seq = snapshot.meta()?.seq;
        let mut records = Vec::with_capacity(3);
        if seq.in_flight == Some(key) {
            let recorded = snapshot.commit_value(key)?.map(|c| c.ids).unwrap_or_default();
            let foreign: Vec<&CheckpointId> = landed.iter().filter(|id| !recorded.contains(id)).collect();
            if !foreign.is_empty() {
                return Err(Error::invalid_input(format!(
                    "key {key} is in flight with {recorded:?}; {foreign:?} are not among them, so this store \
                     cannot record them as landed under it (a commit of other checkpoints is another writer's: \
                     stop it, and un-bind the key)"
                )));
            }
            records.push(Record::Unbind { key, reason: reason.to_owned() });
        } else if seq.in_flight.is_none() && seq.next_key == key {
            for id in &landed {
                let state = snapshot.get(id)?.map(|info| info.state);
                if state != Some(CheckpointState::Sealed) {
                    return Err(Error::invalid_input(format!(
                        "checkpoint {id} is {state:?}, not Sealed: only Sealed checkpoints can be recorded as \
                         landed under the next key {key}"
                    )));
                }
            }
        } else {
            return Err(Error::invalid_input(format!(
                "key {key} is neither in flight ({:?}) nor the next key to begin ({}): nothing to settle",
                seq.in_flight, seq.next_key
            )));
        }
        // The key's committed mark is an operator's verdict: a `Resolve` record (applied as `MarkCommitted` is)
        // carries the reason, so the next operator reads it back on either path.
        let names = landed.iter().map(CheckpointId::as_str).collect::<Vec<_>>().join(", ");
        let verdict = checks::truncate(&format!("settle-landed of {names}: {reason}"));
        records.push(Record::BeginCommit { key, ids: landed, target_version: None, final_commit: false });
        records.push(Record::Resolve { key, resolution: Resolution::Committed, reason: verdict });
        self.store.forget_target_checked();
        tracing::warn!(key, reason, "an operator recorded what landed under a key");
        match self.store.writer.call(records, CallDurability::Immediate).await? {
            Decided::Applied(_) => Ok(()),
            Decided::Refused(t) => Err(t.into()),
        }
    }
}
