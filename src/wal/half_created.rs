//! Recovering from a crash inside redb's creation of a new file.
//!
//! redb initialises a new file in two flushes: the header without its magic number, then the magic number. A
//! crash between the two leaves a file redb refuses forever ("not a redb database"), although no transaction —
//! so no sinkpoint record — was ever committed to it. Such a file is recognised precisely: its first bytes,
//! where the magic number goes, are zero, the rest of the first page holds the header redb wrote (not all zero),
//! and everything past the first page is zero (no page was ever written). It is then emptied, and created afresh;
//! a file with anything else in it is left to redb to judge, except an image that is zero throughout: that is a
//! zeroed store (a disk or a volume wiped under it), not a creation that crashed, so it is `Corrupt`, never a
//! fresh start that would forget every processed key.
//!
//! This applies to storage backends only. A store on a path is created in a staging file and renamed into place
//! once redb finished it (`store::create_file_atomically`), so a half-created file never stands at the path, and
//! a file there that is not a redb database is refused, never emptied.

use std::io;

use redb::StorageBackend;

use crate::error::{Error, Result};

/// The bytes at the start of the file where redb writes its magic number last.
const MAGIC_BYTES: usize = 9;
/// No page is written before the magic number: every byte from here on is zero in a half-created file.
const FIRST_PAGE_BYTES: u64 = 4096;
/// The bytes read at a time while checking for zeros.
const CHUNK_BYTES: usize = 64 * 1024;

/// What the bytes behind a backend are, as far as a half-finished creation is concerned.
#[derive(Debug, PartialEq, Eq)]
enum Image {
    /// redb began to create it and never finished: safe to empty.
    HalfCreated,
    /// Zero throughout, of `len` bytes: a wiped store, never a fresh one.
    Zeroed,
    /// Anything else, for redb to judge.
    Other,
}

/// Classifies the `len` bytes behind `read`.
fn classify(len: u64, mut read: impl FnMut(u64, &mut [u8]) -> io::Result<()>) -> io::Result<Image> {
    if len < MAGIC_BYTES as u64 {
        return Ok(Image::Other);
    }
    let mut magic = [0u8; MAGIC_BYTES];
    read(0, &mut magic)?;
    if magic.iter().any(|b| *b != 0) {
        return Ok(Image::Other);
    }
    let header_len = usize::try_from(len.min(FIRST_PAGE_BYTES)).map_err(io::Error::other)? - MAGIC_BYTES;
    let mut header = vec![0u8; header_len];
    read(MAGIC_BYTES as u64, &mut header)?;
    let header_written = header.iter().any(|b| *b != 0);
    if !rest_is_zero(len, &mut read)? {
        return Ok(Image::Other);
    }
    Ok(if header_written { Image::HalfCreated } else { Image::Zeroed })
}

/// Whether every byte past the first page is zero.
fn rest_is_zero(len: u64, mut read: impl FnMut(u64, &mut [u8]) -> io::Result<()>) -> io::Result<bool> {
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let mut offset = FIRST_PAGE_BYTES;
    while offset < len {
        let n = usize::try_from((len - offset).min(CHUNK_BYTES as u64)).map_err(io::Error::other)?;
        read(offset, &mut chunk[..n])?;
        if chunk[..n].iter().any(|b| *b != 0) {
            return Ok(false);
        }
        offset += n as u64;
    }
    Ok(true)
}

fn refuse_or_reset(what: &str, create_if_missing: bool) -> Result<()> {
    if !create_if_missing {
        return Err(Error::wrong_store(format!("{what} holds a store whose creation never finished")));
    }
    tracing::warn!(what, "emptying a store file whose creation crashed before redb finished it");
    Ok(())
}

/// Empties `backend` if it is half-created, and refuses it if it is zeroed (see the module docs).
pub(crate) fn reset_backend(backend: &dyn StorageBackend, create_if_missing: bool) -> Result<()> {
    let len = backend.len()?;
    match classify(len, |offset, out| backend.read(offset, out))? {
        Image::HalfCreated => {
            refuse_or_reset("the storage backend", create_if_missing)?;
            backend.set_len(0)?;
            backend.sync_data()?;
        }
        Image::Zeroed => {
            return Err(Error::corrupt(format!(
                "the storage backend holds {len} bytes that are all zero: a store wiped under sinkpoint, not one \
                 whose creation crashed; restore it from the mirror or a backup, or empty the backend by hand if \
                 it never held a store"
            )));
        }
        Image::Other => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::CrashBackend;

    fn half_created() -> Vec<u8> {
        let mut bytes = vec![0u8; 3 * FIRST_PAGE_BYTES as usize];
        bytes[MAGIC_BYTES..64].fill(0xAB);
        bytes
    }

    #[test]
    fn a_half_created_backend_is_emptied() {
        let backend = CrashBackend::from_bytes(half_created());
        reset_backend(&backend, true).unwrap();
        assert!(backend.durable_bytes().is_empty());
    }

    #[test]
    fn a_half_created_backend_is_refused_when_it_must_exist() {
        let backend = CrashBackend::from_bytes(half_created());
        assert_eq!(reset_backend(&backend, false).unwrap_err().kind(), crate::ErrorKind::WrongStore);
        assert_eq!(backend.durable_bytes(), half_created());
    }

    #[test]
    fn anything_else_is_left_alone() {
        let mut with_page = half_created();
        with_page[FIRST_PAGE_BYTES as usize + 10] = 1;
        let mut with_magic = half_created();
        with_magic[..MAGIC_BYTES].copy_from_slice(b"redb\x1a\x0a\xa9\x0d\x0a");
        for bytes in [with_page, with_magic, b"a text file".to_vec(), vec![0u8; 4]] {
            let backend = CrashBackend::from_bytes(bytes.clone());
            reset_backend(&backend, true).unwrap();
            assert_eq!(backend.durable_bytes(), bytes);
        }
    }

    /// An image zero throughout is a wiped store, never emptied into a fresh one.
    #[test]
    fn an_all_zero_backend_is_corrupt_and_left_alone() {
        for len in [MAGIC_BYTES, 512, FIRST_PAGE_BYTES as usize, 3 * FIRST_PAGE_BYTES as usize + 7] {
            let backend = CrashBackend::from_bytes(vec![0u8; len]);
            let err = reset_backend(&backend, true).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Corrupt, "{len}: {err}");
            assert!(err.to_string().contains("all zero"), "{err}");
            assert_eq!(backend.durable_bytes(), vec![0u8; len], "{len}");
        }
    }
}
