//! Bounds-checked reads of fixed-layout bytes, for the decoders of frames, table values and objects: the decoders
//! check lengths before they read, and these make a read past what was checked an error naming the range (the
//! bytes are too short: damage), never a panic. `clippy::indexing_slicing` is denied in the decoders. Also the
//! envelope check every object in object storage passes (the mirror's and shared staging's), and the serde
//! helpers that write byte strings in one go.

use std::ops::Range;

use crate::error::Error;
use crate::limits::MIRROR_OBJECT_BYTES_MAX;

/// The bytes of the CRC32 (IEEE, little-endian) that ends every object's envelope ([`check_envelope`]).
pub(crate) const CRC_BYTES: usize = 4;

fn short(range: &Range<usize>, len: usize) -> Error {
    Error::corrupt(format!("truncated: bytes {}..{} of {len} wanted", range.start, range.end))
}

/// `bytes[range]`.
pub(crate) fn slice(bytes: &[u8], range: Range<usize>) -> Result<&[u8], Error> {
    bytes.get(range.clone()).ok_or_else(|| short(&range, bytes.len()))
}

/// `bytes[start..]`.
pub(crate) fn rest(bytes: &[u8], start: usize) -> Result<&[u8], Error> {
    bytes.get(start..).ok_or_else(|| short(&(start..bytes.len()), bytes.len()))
}

/// `bytes[at]`.
pub(crate) fn byte(bytes: &[u8], at: usize) -> Result<u8, Error> {
    bytes.get(at).copied().ok_or_else(|| short(&(at..at + 1), bytes.len()))
}

fn array<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], Error> {
    let range = at..at + N;
    slice(bytes, range.clone())?.try_into().map_err(|_| short(&range, bytes.len()))
}

/// The little-endian `u32` at `at`.
pub(crate) fn le_u32(bytes: &[u8], at: usize) -> Result<u32, Error> {
    array(bytes, at).map(u32::from_le_bytes)
}

/// The little-endian `u64` at `at`.
pub(crate) fn le_u64(bytes: &[u8], at: usize) -> Result<u64, Error> {
    array(bytes, at).map(u64::from_le_bytes)
}

/// The little-endian `u128` at `at`.
pub(crate) fn le_u128(bytes: &[u8], at: usize) -> Result<u128, Error> {
    array(bytes, at).map(u128::from_le_bytes)
}

/// Overwrites `out[at..at + src.len()]` with `src` (an encoder filling in a field it reserved).
pub(crate) fn write_at(out: &mut [u8], at: usize, src: &[u8]) -> Result<(), Error> {
    let len = out.len();
    let range = at..at + src.len();
    out.get_mut(range.clone()).ok_or_else(|| short(&range, len))?.copy_from_slice(src);
    Ok(())
}

/// Checks the envelope every object in object storage shares (the mirror's segments, snapshots and manifests,
/// shared staging's objects): the size (at most [`MIRROR_OBJECT_BYTES_MAX`]), the magic, the version, the
/// trailing CRC32 over every byte before it. Returns the bytes before the CRC.
pub(crate) fn check_envelope<'a>(
    bytes: &'a [u8],
    magic: &[u8; 8],
    versions: &[u8],
    header: usize,
    place: &str,
) -> Result<&'a [u8], Error> {
    if bytes.len() as u64 > MIRROR_OBJECT_BYTES_MAX {
        return Err(Error::corrupt(format!("{place}: {} bytes is over the object limit", bytes.len())));
    }
    if bytes.len() < header + CRC_BYTES {
        return Err(Error::corrupt(format!(
            "{place}: truncated ({} bytes, the header alone is {header})",
            bytes.len()
        )));
    }
    let found = slice(bytes, 0..8)?;
    if found != magic.as_slice() {
        return Err(Error::corrupt(format!("{place}: wrong magic {found:02x?}")));
    }
    let version = byte(bytes, 8)?;
    if !versions.contains(&version) {
        return Err(Error::corrupt(format!("{place}: format version {version} is not one of {versions:?}")));
    }
    let (body, crc) = bytes.split_at(bytes.len() - CRC_BYTES);
    let stored = le_u32(crc, 0)?;
    let actual = crc32fast::hash(body);
    if stored != actual {
        return Err(Error::corrupt(format!(
            "{place}: fails its CRC32 (stored {stored:#010x}, computed {actual:#010x}): truncated or damaged"
        )));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn reads_past_the_end_are_corrupt_not_panics() {
        let bytes = [1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(le_u32(&bytes, 0).unwrap(), 1);
        assert_eq!(le_u64(&bytes, 4).unwrap(), 2);
        assert_eq!(le_u64(&bytes, 5).unwrap_err().kind(), ErrorKind::Corrupt);
        assert_eq!(le_u128(&bytes, 0).unwrap_err().kind(), ErrorKind::Corrupt);
        assert_eq!(byte(&bytes, 12).unwrap_err().kind(), ErrorKind::Corrupt);
        assert_eq!(rest(&bytes, 12).unwrap(), &[] as &[u8]);
        assert_eq!(rest(&bytes, 13).unwrap_err().kind(), ErrorKind::Corrupt);
        let mut out = [0u8; 4];
        write_at(&mut out, 2, &[7, 8]).unwrap();
        assert_eq!(out, [0, 0, 7, 8]);
        assert_eq!(write_at(&mut out, 3, &[7, 8]).unwrap_err().kind(), ErrorKind::Corrupt);
    }
}
