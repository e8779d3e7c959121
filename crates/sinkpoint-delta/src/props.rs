//! The `commitInfo` fields a sinkpoint commit carries: what a reader of the table's history sees of the job.
//!
//! They are a courtesy to readers, never read back by the adapter: Delta's log cleanup drops old `commitInfo`
//! with the commit files it removes, so the key check and the probe rely only on the job's `txn`
//! ([`crate::fence`]).

use std::collections::HashMap;

use deltalake::kernel::Add;
use serde_json::Value;
use sinkpoint::{CheckpointId, Epoch, TargetCommit};

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

/// A sinkpoint commit of one key as its commit file records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Landed {
    /// The epoch of the writer that sent it.
    pub(crate) epoch: Epoch,
    /// The checkpoint ids it covers.
    pub(crate) ids: Vec<CheckpointId>,
    /// The data files it added, sorted.
    pub(crate) files: Vec<String>,
}

/// What one commit file (`_delta_log/<version>.json`, its JSON lines) says of key `n` of `job`, whose app id is
/// `app`: `Ok(Some(_))` when it holds the job's `txn` for `n` and what sinkpoint recorded with it, `Ok(None)` when
/// it holds no `txn` of the job for `n`, `Err` when it holds that `txn` but not a readable record (another writer
/// used the job's app id, or the `commitInfo` is damaged).
pub(crate) fn landed_key(commit: &[u8], app: &str, job: &str, n: u64) -> Result<Option<Landed>, String> {
    let mut holds_key = false;
    let (mut info, mut files) = (None, Vec::new());
    for line in commit.split(|b| *b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)) {
        let action: Value = serde_json::from_slice(line).map_err(|e| format!("a log line does not parse: {e}"))?;
        if let Some(txn) = action.get("txn") {
            holds_key |= txn.get("appId").and_then(Value::as_str) == Some(app)
                && txn.get("version").and_then(Value::as_u64) == Some(n);
        } else if let Some(commit_info) = action.get("commitInfo") {
            info = Some(commit_info.clone());
        } else if let Some(add) = action.get("add") {
            // Through delta-rs's own type: it percent-decodes the path as the write result holds it.
            let add: Add = serde_json::from_value(add.clone()).map_err(|e| format!("an add does not parse: {e}"))?;
            files.push(add.path);
        }
    }
    if !holds_key {
        return Ok(None);
    }
    let info = info.ok_or("the commit holds the job's txn but no commitInfo")?;
    if info.get(JOB).and_then(Value::as_str) != Some(job) || info.get(KEY).and_then(Value::as_u64) != Some(n) {
        return Err(format!("the commit holds the job's txn but its commitInfo names another {JOB} or {KEY}"));
    }
    let epoch = info.get(EPOCH).and_then(Value::as_u64).ok_or(format!("{EPOCH} is missing"))?;
    let ids = info.get(IDS).and_then(Value::as_array).ok_or(format!("{IDS} is missing"))?;
    let ids = ids
        .iter()
        .map(|id| id.as_str().ok_or(format!("{IDS} holds a non-string")))
        .map(|id| id.and_then(|id| CheckpointId::new(id).map_err(|e| format!("{IDS}: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    files.sort_unstable();
    Ok(Some(Landed { epoch, ids, files }))
}
