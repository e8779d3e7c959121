//! A crash-image redb storage backend.
//!
//! It keeps two images of the file: the *live* one every write goes to, and the *durable* one, replaced by the
//! live image at each `sync_data`. Every write, resize and sync counts as one I/O operation; when the count
//! reaches the crash point the backend dies: that operation and every later one fail, and the durable image
//! stays as it was, which is what a power cut leaves on disk. [`CrashBackend::crash_image`] hands that image
//! to a new backend for recovery. Dropping the `Database` is a clean shutdown and never stands in for a crash.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use redb::StorageBackend;

use crate::testkit::process::{Component, ProcessCrash};

#[derive(Debug, Default)]
struct Images {
    live: Vec<u8>,
    durable: Vec<u8>,
    ops: u64,
    crash_at: Option<u64>,
    dead: bool,
    /// The process this backend belongs to: its points are counted there, and its death is this backend's.
    process: Option<ProcessCrash>,
    /// Every durable image, with the operation count at its sync (only when recording).
    syncs: Option<Vec<(u64, Vec<u8>)>>,
}

impl Images {
    fn dead(&mut self) -> bool {
        if !self.dead && self.process.as_ref().is_some_and(ProcessCrash::is_dead) {
            self.dead = true;
        }
        self.dead
    }
}

/// A redb backend that keeps live and durable bytes apart and can die at its k-th I/O operation. Clones share
/// the same images, so a store closed and reopened on a clone sees what it left.
#[derive(Clone, Debug, Default)]
pub struct CrashBackend {
    images: Arc<Mutex<Images>>,
}

impl CrashBackend {
    /// A new, empty backend that never crashes.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Images> {
        // A poisoned lock means a test thread panicked while holding it; the images are still plain bytes.
        self.images.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the backend die at I/O operation `k` (counted from 1 since creation, across clones); `None` never.
    pub fn crash_at(&self, k: Option<u64>) {
        let mut images = self.lock();
        images.crash_at = k;
        if k.is_some_and(|k| k <= images.ops) {
            images.dead = true;
        }
    }

    /// Makes the backend part of `process`: each of its I/O operations is one of the process's points, and it
    /// dies when the process does (at one of its own operations or anyone else's).
    pub fn attach(&self, process: &ProcessCrash) {
        self.lock().process = Some(process.clone());
    }

    /// Keeps a copy of every durable image from now on, with the operation count at its sync (see
    /// [`CrashBackend::sync_history`]).
    pub fn record_syncs(&self) {
        self.lock().syncs.get_or_insert_with(Vec::new);
    }

    /// The durable images recorded since [`CrashBackend::record_syncs`], each with the count of operations
    /// made up to and including its sync.
    pub fn sync_history(&self) -> Vec<(u64, Vec<u8>)> {
        self.lock().syncs.clone().unwrap_or_default()
    }

    /// Kills the backend now, as if the power went.
    pub fn kill(&self) {
        self.lock().dead = true;
    }

    /// The I/O operations (writes, resizes, syncs) made so far. With a process attached, an operation the
    /// process died at is not made, so it is not counted.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Whether the backend has died (or the process it belongs to).
    pub fn is_dead(&self) -> bool {
        self.lock().dead()
    }

    /// A new backend holding only this one's durable image: what a reboot finds.
    pub fn crash_image(&self) -> CrashBackend {
        let durable = self.lock().durable.clone();
        CrashBackend { images: Arc::new(Mutex::new(Images { live: durable.clone(), durable, ..Images::default() })) }
    }

    /// The durable bytes (for corruption tests).
    pub fn durable_bytes(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    /// A backend whose live and durable images are `bytes` (for corruption tests).
    pub fn from_bytes(bytes: Vec<u8>) -> CrashBackend {
        CrashBackend {
            images: Arc::new(Mutex::new(Images { live: bytes.clone(), durable: bytes, ..Images::default() })),
        }
    }

    fn op(&self, what: &'static str) -> io::Result<MutexGuard<'_, Images>> {
        let mut images = self.lock();
        if images.dead() {
            return Err(io::Error::other("crash-image backend: the process has crashed"));
        }
        if let Some(process) = images.process.clone()
            && !process.tick(Component::Local, || format!("local {what} (operation {})", images.ops + 1))
        {
            images.dead = true;
            return Err(io::Error::other("crash-image backend: the process crashed here"));
        }
        images.ops += 1;
        if images.crash_at == Some(images.ops) {
            images.dead = true;
            return Err(io::Error::other(format!("crash-image backend: crashed at I/O operation {}", images.ops)));
        }
        Ok(images)
    }
}

impl StorageBackend for CrashBackend {
    fn len(&self) -> io::Result<u64> {
        let mut images = self.lock();
        if images.dead() {
            return Err(io::Error::other("crash-image backend: the process has crashed"));
        }
        Ok(images.live.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let mut images = self.lock();
        if images.dead() {
            return Err(io::Error::other("crash-image backend: the process has crashed"));
        }
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start.checked_add(out.len()).ok_or_else(|| io::Error::other("read range overflows"))?;
        let src = images.live.get(start..end).ok_or_else(|| {
            io::Error::new(io::ErrorKind::UnexpectedEof, format!("read {start}..{end} past {}", images.live.len()))
        })?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut images = self.op("resize")?;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        images.live.resize(len, 0);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut images = self.op("sync")?;
        images.durable = images.live.clone();
        if images.syncs.is_some() {
            let entry = (images.ops, images.durable.clone());
            images.syncs.get_or_insert_with(Vec::new).push(entry);
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut images = self.op("write")?;
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start.checked_add(data.len()).ok_or_else(|| io::Error::other("write range overflows"))?;
        if images.live.len() < end {
            images.live.resize(end, 0);
        }
        images.live[start..end].copy_from_slice(data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_synced_bytes_survive_a_crash() {
        let b = CrashBackend::new();
        b.write(0, b"durable").unwrap();
        b.sync_data().unwrap();
        b.write(0, b"volatil").unwrap();
        let mut out = [0u8; 7];
        b.read(0, &mut out).unwrap();
        assert_eq!(&out, b"volatil");
        let image = b.crash_image();
        image.read(0, &mut out).unwrap();
        assert_eq!(&out, b"durable");
    }

    #[test]
    fn dies_at_the_chosen_operation() {
        let b = CrashBackend::new();
        b.crash_at(Some(2));
        b.write(0, b"a").unwrap();
        assert!(b.sync_data().is_err());
        assert!(b.is_dead());
        assert!(b.write(0, b"b").is_err());
        assert!(b.crash_image().durable_bytes().is_empty());
    }
}
