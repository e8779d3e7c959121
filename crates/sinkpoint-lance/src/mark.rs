//! The job mark: one entry per job in the table's metadata, written in the same manifest as the job's commit,
//! and the pure decisions (the key check, the probe) taken from it.
//!
//! Lance carries a manifest's `table_metadata` into every later version: appends, compaction, deletes, index
//! builds and overwrites all start from the previous manifest, and a restore brings back the old manifest whole,
//! its mark with its data. Cleanup never removes the latest manifest. So the latest version always says which
//! key of each job the table holds last, whatever cleanup ran: the key check and the probe read one manifest,
//! not the table's history.
//!
//! The mark of job `J` is the metadata entry [`MARK_PREFIX`]`J`, a small JSON object (see [`JobMark`]). The
//! commit's fence sets it into the manifest it writes, so the mark and the rows land in one atomic put.
//!
//! Public for the adapter's tests and golden vectors only: not part of the crate's API.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use sinkpoint::{CheckpointId, Epoch};

/// The table-metadata key of a job's mark is this prefix followed by the job id.
pub const MARK_PREFIX: &str = "sinkpoint.job.";
/// The mark's encoding; a mark of another version is refused, never guessed.
const MARK_FORMAT_VERSION: u32 = 1;
/// Bytes of the SHA-256 of a commit's checkpoint ids and data files kept in the mark (128 bits: a collision
/// between two sets of one key is not a practical concern).
const DIGEST_BYTES: usize = 16;

/// What the latest version says of a job's last landed key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobMark {
    /// The encoding ([`MARK_FORMAT_VERSION`]).
    #[serde(rename = "v")]
    pub format: u32,
    /// The job's last landed key n (keys land in order, so every key below it landed too).
    pub key: u64,
    /// The epoch of the writer that landed it.
    pub epoch: Epoch,
    /// The version it landed at (its transaction there holds the checkpoint ids in full, until cleaned).
    pub version: u64,
    /// [`digest`] of its checkpoint ids and data files.
    pub digest: String,
}

impl JobMark {
    /// The mark of key `key` landing at `version`.
    pub fn new(key: u64, epoch: Epoch, version: u64, digest: String) -> Self {
        Self { format: MARK_FORMAT_VERSION, key, epoch, version, digest }
    }

    /// The metadata entry holding this mark for `job`.
    pub fn entry(&self, job: &str) -> (String, String) {
        // A struct of integers and a hex string always serialises.
        (mark_key(job), serde_json::to_string(self).unwrap_or_default())
    }
}

/// The metadata key of `job`'s mark.
pub fn mark_key(job: &str) -> String {
    format!("{MARK_PREFIX}{job}")
}

/// `job`'s mark in `metadata` (a manifest's `table_metadata`): `None` when the job never landed a key here;
/// `Err` when the entry is there but not a mark this adapter reads (damage or a newer format: never guess).
pub fn read_mark(metadata: &HashMap<String, String>, job: &str) -> Result<Option<JobMark>, String> {
    let Some(raw) = metadata.get(&mark_key(job)) else { return Ok(None) };
    let mark: JobMark =
        serde_json::from_str(raw).map_err(|e| format!("the table's mark of job {job} ({raw:?}) does not parse: {e}"))?;
    if mark.format != MARK_FORMAT_VERSION {
        return Err(format!(
            "the table's mark of job {job} has format {}, this adapter reads format {MARK_FORMAT_VERSION}: commit \
             with the sinkpoint version that wrote it",
            mark.format
        ));
    }
    Ok(Some(mark))
}

/// The digest of a commit: the first [`DIGEST_BYTES`] of the SHA-256 of its checkpoint ids and data files, each
/// sorted and length-prefixed, in hex. Two commits of one key are the same commit when epoch and digest match.
pub fn digest(ids: &[CheckpointId], files: &[String]) -> String {
    let mut ids: Vec<&str> = ids.iter().map(CheckpointId::as_str).collect();
    ids.sort_unstable();
    let mut files: Vec<&str> = files.iter().map(String::as_str).collect();
    files.sort_unstable();
    let mut hash = Sha256::new();
    for (tag, list) in [(b'i', &ids), (b'f', &files)] {
        hash.update([tag]);
        hash.update((list.len() as u64).to_le_bytes());
        for item in list {
            hash.update((item.len() as u64).to_le_bytes());
            hash.update(item.as_bytes());
        }
    }
    hash.finalize()[..DIGEST_BYTES].iter().map(|b| format!("{b:02x}")).collect()
}

/// What the key check of a commit decides from the job's mark in the version it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyCheck {
    /// The key is not in the table and nothing newer of the job is: commit at the next version.
    Commit,
    /// The same commit (epoch and digest) is there: an earlier attempt landed and its answer was lost.
    AlreadyLanded,
    /// Another commit holds the key, or a later key or a newer epoch landed: ours must not land.
    Refused(String),
}

/// The key check of key `n` by epoch `epoch` with digest `digest`, against `mark` (the job's mark in the
/// version the commit builds on).
pub fn key_check(mark: Option<&JobMark>, n: u64, epoch: Epoch, digest: &str) -> KeyCheck {
    let Some(mark) = mark else { return KeyCheck::Commit };
    if mark.key == n {
        return if mark.epoch == epoch && mark.digest == digest {
            KeyCheck::AlreadyLanded
        } else {
            KeyCheck::Refused(format!(
                "key {n} is taken: epoch {} landed it at version {} with another set (digest {})",
                mark.epoch, mark.version, mark.digest
            ))
        };
    }
    if mark.key > n || mark.epoch > epoch {
        return KeyCheck::Refused(format!(
            "fenced: key {} of epoch {} landed at version {}, after this key's intent",
            mark.key, mark.epoch, mark.version
        ));
    }
    KeyCheck::Commit
}

/// What a probe of key `n` reads after the mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeStep {
    /// The table holds no key `n` of the job (nor any later one).
    NotCommitted,
    /// Key `n` is the job's last landed key: its ids are in the transaction of `version`.
    ReadIds {
        /// Where key `n` landed.
        version: u64,
    },
    /// A later key landed, so key `n` landed before `version`.
    LandedBefore {
        /// Where the job's last key landed.
        version: u64,
    },
}

/// The probe of key `n` from `mark` (the job's mark in the latest version).
pub fn probe_step(mark: Option<&JobMark>, n: u64) -> ProbeStep {
    match mark {
        None => ProbeStep::NotCommitted,
        Some(mark) if mark.key < n => ProbeStep::NotCommitted,
        Some(mark) if mark.key == n => ProbeStep::ReadIds { version: mark.version },
        Some(mark) => ProbeStep::LandedBefore { version: mark.version },
    }
}
