//! The `commitInfo` fields a sinkpoint commit carries: what a reader of the table's history sees of the job.
//!
//! They are a courtesy to readers, never read back by the adapter: Delta's log cleanup drops old `commitInfo`
//! with the commit files it removes, so the key check and the probe rely only on the job's `txn`
//! ([`crate::fence`]).

use std::collections::HashMap;

use serde_json::Value;
use sinkpoint::{CheckpointId, TargetCommit};

/// The job id.
pub(crate) const JOB: &str = "sinkpoint.job";
/// The key number n.
pub(crate) const KEY: &str = "sinkpoint.key";
/// The writer's epoch.
pub(crate) const EPOCH: &str = "sinkpoint.epoch";
/// The covered checkpoint ids, a JSON array of strings.
pub(crate) const IDS: &str = "sinkpoint.ids";
/// Whether this is the job's final commit.
pub(crate) const FINAL: &str = "sinkpoint.final";

/// The `commitInfo` fields for `commit`.
pub(crate) fn encode(commit: &TargetCommit<'_>) -> HashMap<String, Value> {
    let ids: Vec<Value> = commit.ids.iter().map(CheckpointId::as_str).map(Value::from).collect();
    HashMap::from([
        (JOB.to_owned(), Value::from(commit.key.job.as_str())),
        (KEY.to_owned(), Value::from(commit.key.n)),
        (EPOCH.to_owned(), Value::from(commit.epoch)),
        (IDS.to_owned(), Value::Array(ids)),
        (FINAL.to_owned(), Value::from(commit.final_commit)),
    ])
}
