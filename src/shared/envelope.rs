//! The bytes of every shared object: magic, format version, body length, a postcard body, CRC32.

use serde::{Deserialize, Serialize};

use crate::codec::{self, CRC_BYTES, check_envelope};
use crate::error::{Error, Result};
use crate::types::{CheckpointId, SourceKey, WriteResult};

const MAGIC: [u8; 8] = *b"SPSHARED";
/// The version of the shared objects' format that workers write (staged parts, seals, key claims); a reader
/// refuses any version but this and [`SHARED_FORMAT_VERSION_RELEASED`].
pub(crate) const SHARED_FORMAT_VERSION: u8 = 1;
/// The version of a released claim (`Body::Released`, written by the committer): a reader that predates it
/// refuses the object by its version instead of misreading it.
pub(crate) const SHARED_FORMAT_VERSION_RELEASED: u8 = 2;
const HEADER_BYTES: usize = 8 + 1 + 4;

/// What a worker put: one staged part, a seal, or a key claim.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) enum Body {
    /// `inbox/<h>/…`: one part staged by one session.
    Staged(Staged),
    /// `claims/<h>` of a checkpoint: the winning attempt, whole.
    Seal(Seal),
    /// `claims/<h>` of a key: which checkpoint owns it.
    KeyClaim(KeyClaim),
    /// `claims/<h>` (or `claims/<h>.<g>`) of a checkpoint whose seal the committer's store no longer holds
    /// (force-aborted after adoption): void; the checkpoint's claim continues at generation `next`.
    Released(Released),
}

/// Who wrote an object: a worker's name and the random session of one [`super::Worker`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct Author {
    pub worker: String,
    pub session: u128,
}

/// One staged part.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct Staged {
    pub id: CheckpointId,
    pub author: Author,
    pub attempt: u32,
    pub part: u32,
    #[serde(with = "crate::byte_serde::byte_strings")]
    pub keys: Vec<SourceKey>,
    pub results: Vec<WriteResult>,
}

/// A sealed checkpoint: every part of the winning attempt, in part order.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct Seal {
    pub id: CheckpointId,
    pub author: Author,
    pub attempt: u32,
    #[serde(with = "crate::byte_serde::byte_strings")]
    pub keys: Vec<SourceKey>,
    pub results: Vec<WriteResult>,
}

/// A source key's owner.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct KeyClaim {
    pub id: CheckpointId,
    pub author: Author,
}

/// A released claim: the seal it held is void (its input is unprocessed), and the checkpoint's next seal is
/// created at generation `next` of its claim (`claims/<h>.<next>`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct Released {
    pub id: CheckpointId,
    pub next: u32,
}

/// Encodes `body` in its envelope.
pub(crate) fn encode(body: &Body) -> Result<Vec<u8>> {
    let payload = postcard::to_stdvec(body).map_err(|e| Error::bug(format!("encoding a shared object: {e}")))?;
    let len = u32::try_from(payload.len()).map_err(|_| Error::bug("a shared object over 4 GiB"))?;
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len() + CRC_BYTES);
    out.extend_from_slice(&MAGIC);
    out.push(match body {
        Body::Released(_) => SHARED_FORMAT_VERSION_RELEASED,
        _ => SHARED_FORMAT_VERSION,
    });
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Decodes and checks one object; any damage is `Corrupt`, naming `place`. The envelope (size, magic, version,
/// CRC) is checked as the mirror's objects are.
pub(crate) fn decode(bytes: &[u8], place: &str) -> Result<Body> {
    let body =
        check_envelope(bytes, &MAGIC, &[SHARED_FORMAT_VERSION, SHARED_FORMAT_VERSION_RELEASED], HEADER_BYTES, place)?;
    let declared = codec::le_u32(body, 9)? as usize;
    let payload = codec::rest(body, HEADER_BYTES)?;
    if payload.len() != declared {
        return Err(Error::corrupt(format!("{place}: declares {declared} body bytes, holds {}", payload.len())));
    }
    postcard::from_bytes(payload).map_err(|e| Error::corrupt(format!("{place}: undecodable body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> Body {
        let id = CheckpointId::new("cp-1").unwrap_or_else(|e| panic!("{e}"));
        Body::KeyClaim(KeyClaim { id, author: Author { worker: "w".into(), session: 7 } })
    }

    #[test]
    fn an_object_round_trips() {
        let bytes = encode(&claim()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(decode(&bytes, "t").unwrap_or_else(|e| panic!("{e}")), claim());
        let id = CheckpointId::new("cp-1").unwrap_or_else(|e| panic!("{e}"));
        let released = Body::Released(Released { id, next: 3 });
        let bytes = encode(&released).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bytes[8], SHARED_FORMAT_VERSION_RELEASED, "a reader that predates it refuses it by version");
        assert_eq!(decode(&bytes, "t").unwrap_or_else(|e| panic!("{e}")), released);
    }

    #[test]
    fn every_flipped_bit_or_truncation_is_corrupt() {
        let bytes = encode(&claim()).unwrap_or_else(|e| panic!("{e}"));
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            let err = decode(&bad, "t").err().unwrap_or_else(|| panic!("flip at {at} decoded"));
            assert_eq!(err.kind(), crate::ErrorKind::Corrupt, "flip at {at}: {err}");
            let err = decode(&bytes[..at], "t").err().unwrap_or_else(|| panic!("cut at {at} decoded"));
            assert_eq!(err.kind(), crate::ErrorKind::Corrupt, "cut at {at}: {err}");
        }
    }
}
