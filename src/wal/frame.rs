//! The frame: the versioned, length-prefixed, CRC32-checked envelope of every WAL record. The same bytes are
//! stored in the local log table and shipped to the mirror.
//!
//! All integers are little-endian.
//!
//! | offset | size | field                                                  |
//! |-------:|-----:|--------------------------------------------------------|
//! | 0      | 4    | payload length `N` (u32)                               |
//! | 4      | 1    | frame version ([`FRAME_VERSION`])                      |
//! | 5      | 3    | reserved, zero                                         |
//! | 8      | 8    | sequence number (u64)                                  |
//! | 16     | 8    | epoch of the writer (u64)                              |
//! | 24     | N    | payload: the postcard encoding of a [`super::record::Record`]  |
//! | 24 + N | 4    | CRC32 (IEEE) of bytes `0 .. 24 + N`                    |

#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use crate::codec;
use crate::error::Error;
use crate::limits::FRAME_PAYLOAD_BYTES_MAX;

/// The only frame version written; readers refuse any other.
pub const FRAME_VERSION: u8 = 1;
/// The bytes before the payload.
pub const FRAME_HEADER_BYTES: usize = 24;
/// The bytes after the payload.
pub const FRAME_TRAILER_BYTES: usize = 4;

/// A decoded frame header with a borrowed payload.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The record's sequence number.
    pub seq: u64,
    /// The writer's epoch.
    pub epoch: u64,
    /// The postcard payload.
    pub payload: &'a [u8],
}

/// Encodes one frame.
pub fn encode(seq: u64, epoch: u64, payload: &[u8]) -> Result<Vec<u8>, Error> {
    if payload.len() > FRAME_PAYLOAD_BYTES_MAX {
        return Err(Error::count("frame payload bytes", payload.len(), FRAME_PAYLOAD_BYTES_MAX));
    }
    let len = u32::try_from(payload.len()).map_err(|_| Error::bug("frame payload length over u32"))?;
    let mut out = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len() + FRAME_TRAILER_BYTES);
    out.extend_from_slice(&len.to_le_bytes());
    out.push(FRAME_VERSION);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(decode_prefix(&out, "encode check").map(|(f, n)| (f.seq, n)).ok(), Some((seq, out.len())));
    Ok(out)
}

/// Decodes the frame at the start of `bytes`, returning it and the bytes it took. `place` names where the bytes
/// came from, for the error message.
pub fn decode_prefix<'a>(bytes: &'a [u8], place: &str) -> Result<(Frame<'a>, usize), Error> {
    if bytes.len() < FRAME_HEADER_BYTES + FRAME_TRAILER_BYTES {
        return Err(Error::corrupt(format!("{place}: truncated frame ({} bytes)", bytes.len())));
    }
    let seq = codec::le_u64(bytes, 8)?;
    let version = codec::byte(bytes, 4)?;
    if version != FRAME_VERSION {
        return Err(Error::corrupt(format!(
            "{place}: frame of seq {seq} has version {version}, expected {FRAME_VERSION}"
        )));
    }
    if codec::slice(bytes, 5..8)? != [0, 0, 0] {
        return Err(Error::corrupt(format!("{place}: frame of seq {seq} has non-zero reserved bytes")));
    }
    let len = codec::le_u32(bytes, 0)? as usize;
    if len > FRAME_PAYLOAD_BYTES_MAX {
        return Err(Error::corrupt(format!("{place}: frame of seq {seq} claims {len} payload bytes")));
    }
    let total = FRAME_HEADER_BYTES + len + FRAME_TRAILER_BYTES;
    if bytes.len() < total {
        return Err(Error::corrupt(format!(
            "{place}: frame of seq {seq} is truncated ({} of {total} bytes)",
            bytes.len()
        )));
    }
    let body = codec::slice(bytes, 0..FRAME_HEADER_BYTES + len)?;
    let stored = codec::le_u32(bytes, FRAME_HEADER_BYTES + len)?;
    let actual = crc32fast::hash(body);
    if stored != actual {
        return Err(Error::corrupt(format!(
            "{place}: frame of seq {seq} fails its CRC32 (stored {stored:#010x}, computed {actual:#010x})"
        )));
    }
    let epoch = codec::le_u64(bytes, 16)?;
    Ok((Frame { seq, epoch, payload: codec::slice(bytes, FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len)? }, total))
}

/// Decodes exactly one frame: trailing bytes are corruption.
pub fn decode_exact<'a>(bytes: &'a [u8], place: &str) -> Result<Frame<'a>, Error> {
    let (frame, used) = decode_prefix(bytes, place)?;
    if used != bytes.len() {
        return Err(Error::corrupt(format!(
            "{place}: frame of seq {} has {} trailing bytes",
            frame.seq,
            bytes.len() - used
        )));
    }
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let bytes = encode(7, 3, b"hello").unwrap();
        assert_eq!(bytes.len(), FRAME_HEADER_BYTES + 5 + FRAME_TRAILER_BYTES);
        let frame = decode_exact(&bytes, "test").unwrap();
        assert_eq!(frame, Frame { seq: 7, epoch: 3, payload: b"hello" });
    }

    #[test]
    fn golden_bytes_are_stable() {
        // Format stability: these bytes are frame version 1 forever.
        let bytes = encode(1, 2, &[0xAB]).unwrap();
        let expected: [u8; 29] =
            [1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0xAB, 0, 0, 0, 0];
        let crc = crc32fast::hash(&expected[..25]).to_le_bytes();
        assert_eq!(&bytes[..25], &expected[..25]);
        assert_eq!(&bytes[25..], &crc);
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let bytes = encode(9, 1, b"payload of a record").unwrap();
        for i in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[i / 8] ^= 1 << (i % 8);
            assert!(decode_exact(&damaged, "test").is_err(), "bit {i} flip went unnoticed");
        }
    }

    #[test]
    fn every_truncation_is_detected() {
        let bytes = encode(9, 1, b"payload").unwrap();
        for len in 0..bytes.len() {
            let err = decode_exact(&bytes[..len], "log").unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Corrupt);
        }
    }

    #[test]
    fn the_error_names_the_sequence_number() {
        let mut bytes = encode(4242, 1, b"x").unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xFF;
        let err = decode_exact(&bytes, "log").unwrap_err();
        assert!(err.to_string().contains("seq 4242"), "{err}");
    }
}
