//! The logical WAL records: one per accepted call, postcard-encoded inside a [`super::frame`].
//!
//! Format stability: variants are only ever appended; a retired variant keeps its place (postcard encodes the
//! variant index), and `tests::golden_encodings` freezes the bytes of each.

#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::error::Error;
pub(crate) use crate::state::Resolution;
use crate::types::{CheckpointId, JobId, SourceKey, TargetIdentity, WriteResult};

/// One accepted call, as logged.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub enum Record {
    /// The store was created for this job and target.
    Create {
        /// The job.
        job: JobId,
        /// The target's identity.
        target: TargetIdentity,
    },
    /// A writer opened the store with the frame's epoch; everything of older epochs is fenced from here on.
    Open {
        /// A unique tag of the writer process, so an ambiguous mirror put can be resolved by reading it back.
        writer_tag: u128,
    },
    /// A part was staged.
    Stage {
        /// The checkpoint.
        id: CheckpointId,
        /// Its attempt.
        attempt: u32,
        /// The part.
        part: u32,
        /// The part's source keys.
        #[serde(with = "crate::byte_serde::byte_strings")]
        keys: Vec<SourceKey>,
        /// The part's write results.
        results: Vec<WriteResult>,
    },
    /// A checkpoint was sealed with its part count.
    Seal {
        /// The checkpoint.
        id: CheckpointId,
        /// The part count.
        parts: u32,
    },
    /// A checkpoint began its next attempt.
    Restart {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// A staged checkpoint was aborted.
    Abort {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// Commit key `key` was bound to `ids`, before the target was called.
    BeginCommit {
        /// The key's number.
        key: u64,
        /// The checkpoints it covers, sorted.
        ids: Vec<CheckpointId>,
        /// The target version the commit was prepared against.
        target_version: Option<u64>,
        /// Whether this is the job's last commit.
        final_commit: bool,
    },
    /// Sealed checkpoints without write results were committed without a target commit.
    CommitEmpty {
        /// The checkpoints.
        ids: Vec<CheckpointId>,
    },
    /// The target provably holds key `key`.
    MarkCommitted {
        /// The key's number.
        key: u64,
    },
    /// The target's answer to key `key` is unknown.
    MarkUnknown {
        /// The key's number.
        key: u64,
        /// What the target said.
        reason: String,
    },
    /// A probe found key `key` not committed: it is re-committed under the same key.
    MarkNotCommitted {
        /// The key's number.
        key: u64,
    },
    /// The operator resolved key `key` by hand.
    Resolve {
        /// The key's number.
        key: u64,
        /// The verdict.
        resolution: Resolution,
        /// Why, in the operator's words.
        reason: String,
    },
    /// The operator aborted sealed checkpoints, un-processing their keys.
    ForceAbort {
        /// The checkpoints.
        ids: Vec<CheckpointId>,
        /// Why, in the operator's words.
        reason: String,
    },
    /// Commit key `key`, in flight and never marked committed, was un-bound: its checkpoints are Sealed again,
    /// its record is gone, and `key` is the next key to begin again (written by the operator, or by the committer
    /// when another writer's commit holds the key).
    Unbind {
        /// The key's number.
        key: u64,
        /// Why.
        reason: String,
    },
    /// The job ended: every checkpoint was committed or aborted and no key is in flight, so a rerun takes the
    /// fast path (written by `Committer::finish` when no final key was there to flag).
    Finish,
    /// The data-file collector deleted (or found gone, or found owned by a live checkpoint or the table) the
    /// files of these garbage-ledger entries, each `(seq, index)`: they leave the ledger.
    ForgetGarbage {
        /// The entries, sorted, each the sequence number of the record that dropped the result and its index.
        entries: Vec<(u64, u32)>,
    },
    /// Write results of an attempt that never entered the store and never will (the losing attempt of a
    /// checkpoint another attempt sealed first): they go to the garbage ledger.
    Discard {
        /// The checkpoint.
        id: CheckpointId,
        /// The losing attempt.
        attempt: u32,
        /// Its write results (at least one).
        results: Vec<WriteResult>,
    },
}

impl Record {
    /// The first byte of every `Stage` payload: postcard's varint of the variant's index (frozen with the rest of
    /// the encoding by `golden_encodings`), which lets a reader pass over other records undecoded.
    pub(crate) const STAGE_VARIANT_INDEX: u8 = 2;

    /// The first bytes of the operator's records (`Resolve`, `ForceAbort`, `Unbind`), frozen the same way: a reader
    /// looking for the reasons an operator recorded decodes only these.
    pub(crate) const OPERATOR_VARIANT_INDEXES: [u8; 3] = [11, 12, 13];

    /// Encodes the record as a frame payload.
    pub fn to_payload(&self) -> Result<Vec<u8>, Error> {
        postcard::to_allocvec(self).map_err(|e| Error::bug(format!("encoding a record: {e}")))
    }

    /// Decodes a frame payload; `place` names where it came from.
    pub fn from_payload(payload: &[u8], place: &str) -> Result<Self, Error> {
        let (record, rest): (Record, &[u8]) = postcard::take_from_bytes(payload)
            .map_err(|e| Error::corrupt(format!("{place}: undecodable record: {e}")))?;
        if !rest.is_empty() {
            return Err(Error::corrupt(format!("{place}: {} bytes after the record", rest.len())));
        }
        check_canonical(&record, payload.len(), &|| place.to_owned())?;
        record.check_read_back(place)?;
        Ok(record)
    }

    /// The checkpoints this record names (none for the records of commit keys, of the job, and of the opens).
    pub(crate) fn checkpoint_ids(&self) -> &[CheckpointId] {
        match self {
            Record::Stage { id, .. }
            | Record::Seal { id, .. }
            | Record::Restart { id }
            | Record::Abort { id }
            | Record::Discard { id, .. } => std::slice::from_ref(id),
            Record::BeginCommit { ids, .. } | Record::CommitEmpty { ids } | Record::ForceAbort { ids, .. } => ids,
            Record::Create { .. }
            | Record::Open { .. }
            | Record::MarkCommitted { .. }
            | Record::MarkUnknown { .. }
            | Record::MarkNotCommitted { .. }
            | Record::Resolve { .. }
            | Record::Unbind { .. }
            | Record::Finish
            | Record::ForgetGarbage { .. } => &[],
        }
    }

    /// The checks of a record just read back: everything the boundary checked must hold again.
    fn check_read_back(&self, place: &str) -> Result<(), Error> {
        let ids = self.checkpoint_ids();
        if let Record::ForgetGarbage { entries } = self
            && (entries.is_empty()
                || entries.len() > crate::limits::GARBAGE_FORGET_ENTRIES_MAX
                || !entries.is_sorted_by(|a, b| a < b))
        {
            return Err(Error::corrupt(format!(
                "{place}: ForgetGarbage holds {} entries, not 1 to {} sorted and distinct",
                entries.len(),
                crate::limits::GARBAGE_FORGET_ENTRIES_MAX
            )));
        }
        if let Some(bad) = ids.iter().find(|id| !id.is_valid()) {
            return Err(Error::corrupt(format!("{place}: record holds an invalid checkpoint id {bad:?}")));
        }
        Ok(())
    }
}

/// A table value: `[version u8][postcard][crc32 u32 LE]`, so a damaged value is an error naming its table and
/// key rather than a wrong answer.
pub(crate) fn encode_value<T: Serialize>(value: &T) -> Result<Vec<u8>, Error> {
    let mut out = vec![VALUE_VERSION];
    postcard::to_io(value, &mut out).map_err(|e| Error::bug(format!("encoding a table value: {e}")))?;
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Decodes a table value written by [`encode_value`]; `place` names its table and key.
pub(crate) fn decode_value<T: Serialize + for<'de> Deserialize<'de>>(
    bytes: &[u8],
    place: &dyn Fn() -> String,
) -> Result<T, Error> {
    if bytes.len() < 5 {
        return Err(Error::corrupt(format!("{}: value of {} bytes is truncated", place(), bytes.len())));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes(crc.try_into().map_err(|_| Error::bug("slice length"))?);
    if crc32fast::hash(body) != stored {
        return Err(Error::corrupt(format!("{}: value fails its CRC32", place())));
    }
    let version = codec::byte(body, 0)?;
    if version != VALUE_VERSION {
        return Err(Error::corrupt(format!("{}: value version {version} is unknown", place())));
    }
    let (value, rest) = postcard::take_from_bytes(codec::rest(body, 1)?)
        .map_err(|e| Error::corrupt(format!("{}: undecodable value: {e}", place())))?;
    if !rest.is_empty() {
        return Err(Error::corrupt(format!("{}: {} bytes after the value", place(), rest.len())));
    }
    check_canonical(&value, body.len() - 1, place)?;
    Ok(value)
}

/// Refuses a value that was not encoded the one way postcard encodes it. Postcard also accepts overlong
/// varints (`0x80 0x00` for 0), its only freedom, and those are always longer than the canonical encoding; so
/// comparing lengths is enough. Our writer never produces them: such bytes are damage, and accepting them would
/// give one value many encodings, breaking every byte comparison of frames and parts.
fn check_canonical<T: Serialize>(value: &T, len: usize, place: &dyn Fn() -> String) -> Result<(), Error> {
    let canonical = postcard::experimental::serialized_size(value)
        .map_err(|e| Error::bug(format!("{}: sizing a decoded value: {e}", place())))?;
    if canonical != len {
        return Err(Error::corrupt(format!(
            "{}: a non-canonical encoding ({len} bytes where the value takes {canonical})",
            place()
        )));
    }
    Ok(())
}

const VALUE_VERSION: u8 = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Format;

    fn id(s: &str) -> CheckpointId {
        CheckpointId::new(s).unwrap()
    }

    #[test]
    fn golden_encodings() {
        // Format stability: a change here breaks every store on disk and in mirrors. Append variants only.
        let cases: Vec<(Record, &str)> = vec![
            (Record::Create { job: JobId::new("j").unwrap(), target: TargetIdentity::new("t").unwrap() }, "00016a0174"),
            (Record::Open { writer_tag: 5 }, "0105"),
            (
                Record::Stage {
                    id: id("a"),
                    attempt: 1,
                    part: 2,
                    keys: vec![b"k".to_vec()],
                    results: vec![WriteResult::new(Format::Parquet, b"r".to_vec()).unwrap()],
                },
                "020161010201016b01010172",
            ),
            (Record::Seal { id: id("a"), parts: 3 }, "03016103"),
            (Record::Restart { id: id("a") }, "040161"),
            (Record::Abort { id: id("a") }, "050161"),
            (
                Record::BeginCommit { key: 4, ids: vec![id("a")], target_version: Some(9), final_commit: true },
                "06040101610109 01".replace(' ', "").leak(),
            ),
            (Record::CommitEmpty { ids: vec![id("a")] }, "07010161"),
            (Record::MarkCommitted { key: 4 }, "0804"),
            (Record::MarkUnknown { key: 4, reason: "t".into() }, "09040174"),
            (Record::MarkNotCommitted { key: 4 }, "0a04"),
            (Record::Resolve { key: 4, resolution: Resolution::NotCommitted, reason: "r".into() }, "0b04010172"),
            (Record::ForceAbort { ids: vec![id("a")], reason: "r".into() }, "0c0101610172"),
            (Record::Unbind { key: 4, reason: "r".into() }, "0d040172"),
            (Record::Finish, "0e"),
            (Record::ForgetGarbage { entries: vec![(3, 0), (3, 1)] }, "0f0203000301"),
            (
                Record::Discard {
                    id: id("a"),
                    attempt: 2,
                    results: vec![WriteResult::new(Format::Parquet, b"r".to_vec()).unwrap()],
                },
                "1001610201010172",
            ),
        ];
        for (record, hex) in cases {
            let bytes = record.to_payload().unwrap();
            let got: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, hex, "{record:?}");
            assert_eq!(Record::from_payload(&bytes, "golden").unwrap(), record);
            let stage = matches!(record, Record::Stage { .. });
            assert_eq!(bytes[0] == Record::STAGE_VARIANT_INDEX, stage, "the fresh parts' scan skips by it: {record:?}");
            let operator = matches!(record, Record::Resolve { .. } | Record::ForceAbort { .. } | Record::Unbind { .. });
            assert_eq!(Record::OPERATOR_VARIANT_INDEXES.contains(&bytes[0]), operator, "{record:?}");
        }
    }

    #[test]
    fn trailing_bytes_are_corruption() {
        let mut bytes = Record::Restart { id: id("a") }.to_payload().unwrap();
        bytes.push(0);
        assert_eq!(Record::from_payload(&bytes, "t").unwrap_err().kind(), crate::ErrorKind::Corrupt);
    }

    #[test]
    fn overlong_varints_are_corruption() {
        // Found by the decode_record fuzz target: writer tag 2^49 - 1 with a redundant zero group.
        let overlong = [1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0];
        let err = Record::from_payload(&overlong, "t").unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt);
        assert!(err.to_string().contains("non-canonical"), "{err}");
        let mut value = vec![VALUE_VERSION, 0x85, 0x00];
        value.extend_from_slice(&crc32fast::hash(&value).to_le_bytes());
        assert_eq!(decode_value::<u32>(&value, &|| "t".into()).unwrap_err().kind(), crate::ErrorKind::Corrupt);
    }

    #[test]
    fn values_detect_damage() {
        let bytes = encode_value(&(1u32, "x".to_string())).unwrap();
        let back: (u32, String) = decode_value(&bytes, &|| "t".into()).unwrap();
        assert_eq!(back, (1, "x".into()));
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x40;
            assert!(decode_value::<(u32, String)>(&damaged, &|| "t".into()).is_err());
        }
    }
}
