//! The transaction properties a sinkpoint commit carries, and reading them back.

use std::collections::HashMap;

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

/// What a landed sinkpoint commit recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub(crate) job: String,
    pub(crate) n: u64,
    pub(crate) epoch: Epoch,
    pub(crate) ids: Vec<CheckpointId>,
}

/// The properties for `commit`.
pub(crate) fn encode(commit: &TargetCommit<'_>) -> HashMap<String, String> {
    let ids: Vec<&str> = commit.ids.iter().map(CheckpointId::as_str).collect();
    HashMap::from([
        (JOB.to_owned(), commit.key.job.as_str().to_owned()),
        (KEY.to_owned(), commit.key.n.to_string()),
        (EPOCH.to_owned(), commit.epoch.to_string()),
        // A Vec<&str> always serialises; an empty array would only hide a bug, never a real commit.
        (IDS.to_owned(), serde_json::to_string(&ids).unwrap_or_default()),
        (FINAL.to_owned(), commit.final_commit.to_string()),
    ])
}

/// The sinkpoint commit recorded in `props`: `None` for a foreign commit, `Err` for a sinkpoint commit whose
/// properties do not parse (damage: never guess a key from it).
pub(crate) fn decode(props: &HashMap<String, String>) -> Result<Option<Recorded>, String> {
    let Some(job) = props.get(JOB) else { return Ok(None) };
    let field = |name: &str| props.get(name).ok_or_else(|| format!("property {name} is missing"));
    let n = field(KEY)?.parse().map_err(|e| format!("property {KEY}: {e}"))?;
    let epoch = field(EPOCH)?.parse().map_err(|e| format!("property {EPOCH}: {e}"))?;
    let raw: Vec<String> = serde_json::from_str(field(IDS)?).map_err(|e| format!("property {IDS}: {e}"))?;
    let ids = raw
        .into_iter()
        .map(CheckpointId::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("property {IDS}: {e}"))?;
    Ok(Some(Recorded { job: job.clone(), n, epoch, ids }))
}
