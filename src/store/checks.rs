//! Checks of a call's arguments at the store's boundary, before anything reaches the writer: an argument that
//! fails one is `InvalidInput` and nothing is written.

use crate::error::{Error, InvalidInput, Result, TransitionError};
use crate::limits::{
    COMMIT_CHECKPOINTS_MAX, REASON_BYTES_MAX, SEAL_PARTS_MAX, STAGE_BYTES_MAX, STAGE_KEYS_MAX, STAGE_RESULTS_MAX,
};
use crate::types::{CheckpointId, Part, SourceKey, WriteResult, check_source_key};

pub(crate) fn check_stage(part: Part, keys: &[SourceKey], results: &[WriteResult]) -> Result<()> {
    // A part at or beyond the seal limit could never be sealed; refusing it here also bounds a checkpoint's
    // result count well inside its u32.
    let part = part.get();
    if part >= SEAL_PARTS_MAX {
        let (value, max) = (u64::from(part), u64::from(SEAL_PARTS_MAX - 1));
        return Err(InvalidInput::Range { what: "part index", value, min: 0, max }.into());
    }
    if keys.len() > STAGE_KEYS_MAX {
        return Err(Error::count("source keys in one stage call", keys.len(), STAGE_KEYS_MAX));
    }
    if results.len() > STAGE_RESULTS_MAX {
        return Err(Error::count("write results in one stage call", results.len(), STAGE_RESULTS_MAX));
    }
    let mut bytes = 0usize;
    for key in keys {
        check_source_key(key)?;
        bytes += key.len();
    }
    for result in results {
        result.check()?;
        bytes += result.bytes().len();
    }
    if bytes > STAGE_BYTES_MAX {
        return Err(Error::count("bytes in one stage call", bytes, STAGE_BYTES_MAX));
    }
    Ok(())
}

pub(super) fn sorted_ids(ids: &[CheckpointId]) -> Result<Vec<CheckpointId>> {
    if ids.is_empty() {
        return Err(TransitionError::NoCheckpoints.into());
    }
    if ids.len() > COMMIT_CHECKPOINTS_MAX {
        return Err(Error::count("checkpoints in one call", ids.len(), COMMIT_CHECKPOINTS_MAX));
    }
    for id in ids {
        id.check()?;
    }
    let mut sorted = ids.to_vec();
    sorted.sort();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(TransitionError::DuplicateId { id: w[0].clone() }.into());
    }
    Ok(sorted)
}

pub(super) fn check_reason(reason: &str) -> Result<()> {
    // A reason of spaces says nothing to the next operator.
    if reason.trim().is_empty() || reason.len() > REASON_BYTES_MAX {
        return Err(InvalidInput::Length { what: "operator reason", len: reason.len(), max: REASON_BYTES_MAX }.into());
    }
    Ok(())
}

pub(super) fn truncate(reason: &str) -> String {
    let mut end = reason.len().min(REASON_BYTES_MAX);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_owned()
}
