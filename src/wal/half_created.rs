//! Recovering from a crash inside redb's creation of a new file.
//!
//! redb initialises a new file in two flushes: the header without its magic number, then the magic number. A
//! crash between the two leaves a file redb refuses forever ("not a redb database"), although no transaction —
//! so no sinkpoint record — was ever committed to it. Such a file is recognised precisely: its first bytes,
//! where the magic number goes, are zero, and so is everything past the first page (no page was ever written).
//! It is then emptied, and created afresh; a file with anything else in it is left to redb to judge.
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

/// Whether the `len` bytes behind `read` are a file redb began to create but never finished.
fn is_half_created(len: u64, mut read: impl FnMut(u64, &mut [u8]) -> io::Result<()>) -> io::Result<bool> {
    if len < MAGIC_BYTES as u64 {
        return Ok(false);
    }
    let mut magic = [0u8; MAGIC_BYTES];
    read(0, &mut magic)?;
    if magic.iter().any(|b| *b != 0) {
        return Ok(false);
    }
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

/// Empties `backend` if it is half-created (see the module docs).
pub(crate) fn reset_backend(backend: &dyn StorageBackend, create_if_missing: bool) -> Result<()> {
    if is_half_created(backend.len()?, |offset, out| backend.read(offset, out))? {
        refuse_or_reset("the storage backend", create_if_missing)?;
        backend.set_len(0)?;
        backend.sync_data()?;
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
}
