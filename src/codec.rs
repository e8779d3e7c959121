//! Bounds-checked reads of fixed-layout bytes, for the decoders of frames, table values and mirror objects:
//! the decoders check lengths before they read, and these make a read past what was checked an error naming the
//! range (the bytes are too short: damage), never a panic. `clippy::indexing_slicing` is denied in the decoders.

use std::ops::Range;

use crate::error::Error;

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
