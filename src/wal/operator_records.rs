//! The operator's records read back from log frames: what a hatch changed and why, for `inspect` and the
//! mirror's view (the reason lives only in the record).

use super::record::Record;
use crate::error::Result;
use crate::limits::INSPECT_OPERATOR_RECORDS_MAX;
use crate::state::Resolution;
use crate::types::{CheckpointId, Epoch};

/// A change an operator made through a hatch, as its log record keeps it, with the reason given.
///
/// The reason lives only in that record. A store file's log keeps it until the log is cut (without a mirror,
/// behind the newest 1,024 to 2,047 records, `LOG_RECORDS_RETAINED_MAX`; with one, as soon as the mirror holds
/// it), and the mirror keeps it until a newer snapshot of the mirror supersedes its segment. What lasts after
/// that is the change itself: a key resolved not-committed stays [`crate::CommitInfo::awaits_recommit`] until it is
/// re-committed; the other changes leave only their states.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct OperatorRecord {
    /// The record's sequence number in the log.
    pub seq: u64,
    /// The epoch of the writer that recorded it (the operator's own open of the store).
    pub epoch: Epoch,
    /// What was changed.
    pub action: OperatorAction,
    /// Why, in the operator's words (the `sinkpoint` CLI puts who first: `sinkpoint CLI, user@host: ...`).
    pub reason: String,
}

/// What an [`OperatorRecord`] changed.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum OperatorAction {
    /// [`crate::Operator::resolve`]: the key's outcome, settled by hand.
    Resolve {
        /// The commit key.
        key: u64,
        /// The verdict.
        resolution: Resolution,
    },
    /// [`crate::Operator::force_abort`]: sealed checkpoints aborted, their keys un-processed.
    ForceAbort {
        /// The checkpoints.
        ids: Vec<CheckpointId>,
    },
    /// [`crate::Operator::unbind`]: the key's checkpoints Sealed again, the key next to begin. Also the first step of
    /// [`crate::Operator::settle_landed`] on the key in flight (then the key's commit follows it in the log), and the
    /// committer's own un-bind of a key another writer's commit holds (its reason says so).
    Unbind {
        /// The commit key.
        key: u64,
    },
}

impl OperatorRecord {
    /// The operator's record in one log frame, if it holds one; frames of other records are passed over by their
    /// first payload byte, undecoded. `place` names the frame for an error.
    pub(crate) fn from_frame(bytes: &[u8], place: &str) -> Result<Option<Self>> {
        let tag = bytes.get(super::frame::FRAME_HEADER_BYTES);
        if !tag.is_some_and(|t| Record::OPERATOR_VARIANT_INDEXES.contains(t)) {
            return Ok(None);
        }
        let frame = super::frame::decode_exact(bytes, place)?;
        let (action, reason) = match Record::from_payload(frame.payload, place)? {
            Record::Resolve { key, resolution, reason } => (OperatorAction::Resolve { key, resolution }, reason),
            Record::ForceAbort { ids, reason } => (OperatorAction::ForceAbort { ids }, reason),
            Record::Unbind { key, reason } => (OperatorAction::Unbind { key }, reason),
            _ => return Ok(None),
        };
        Ok(Some(Self { seq: frame.seq, epoch: frame.epoch, action, reason }))
    }

    /// Keeps `record` among the newest [`INSPECT_OPERATOR_RECORDS_MAX`] in `kept`.
    pub(crate) fn keep(kept: &mut Vec<Self>, record: Self) {
        if kept.len() >= INSPECT_OPERATOR_RECORDS_MAX {
            kept.remove(0);
        }
        kept.push(record);
    }

    /// Whether this record names commit key `key`.
    pub fn names_key(&self, key: u64) -> bool {
        matches!(self.action, OperatorAction::Resolve { key: k, .. } | OperatorAction::Unbind { key: k } if k == key)
    }

    /// Whether this record names checkpoint `id`.
    pub fn names_checkpoint(&self, id: &CheckpointId) -> bool {
        matches!(&self.action, OperatorAction::ForceAbort { ids } if ids.contains(id))
    }
}
