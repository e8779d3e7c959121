//! How a store is configured and opened: [`StoreSettings`] (plain data), [`StoreBuilder`] (the injected parts:
//! a path or a redb backend, a mirror, a clock, a writer tag) and [`StagingDurability`].
use std::path::PathBuf;
use std::sync::Arc;

use super::Store;
use super::open::{open_blocking, random_tag};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, InvalidInput, Result};
use crate::mirror::{MirrorConfig, MirrorSettings};
use crate::types::{JobId, TargetIdentity};
use crate::wal::tables::Identity;
use redb::StorageBackend;

/// Lets a boxed backend be handed to redb, which takes backends by value.
#[derive(Debug)]
pub(super) struct BoxedBackend(pub(super) Box<dyn StorageBackend>);

impl StorageBackend for BoxedBackend {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.0.write(offset, data)
    }
    fn close(&self) -> std::io::Result<()> {
        self.0.close()
    }
}

/// How durable a `stage` call is before it returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum StagingDurability {
    /// fsynced before `stage` returns (the default).
    #[default]
    Immediate,
    /// Returned after the in-memory commit, without an fsync: **lost on a crash** until a later durable call
    /// (any seal, restart, abort or commit-protocol call is durable and makes every earlier call durable too).
    /// Never applies to anything but `stage`.
    None,
}

/// The settings of a store: plain data, kept apart from the injected components of [`StoreBuilder`].
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// The job; recorded at create, checked at every open.
    pub job: JobId,
    /// The target's identity; recorded at create, checked at every open.
    pub target: TargetIdentity,
    /// The durability of `stage` calls.
    pub staging_durability: StagingDurability,
    /// Whether `open` may create a store that does not exist yet.
    pub create_if_missing: bool,
    /// The most bytes redb's page cache may hold ([`crate::limits::STORE_CACHE_BYTES_DEFAULT`] by default):
    /// the store's memory stays bounded however many keys it holds.
    pub cache_bytes: usize,
}

impl StoreSettings {
    /// Who the store must belong to, for both opens.
    pub(crate) fn identity(&self) -> Identity {
        Identity { job: self.job.clone(), target: self.target.clone(), create_if_missing: self.create_if_missing }
    }
}

pub(super) enum Location {
    Path(PathBuf),
    Backend(Box<dyn StorageBackend>),
}

/// Builds a [`Store`]: settings plus the injected components (the redb storage backend, the writer tag, the
/// mirror's object store and the clock).
pub struct StoreBuilder {
    pub(super) settings: StoreSettings,
    pub(super) location: Option<Location>,
    pub(super) writer_tag: Option<u128>,
    pub(super) mirror: Option<(Arc<dyn object_store::ObjectStore>, object_store::path::Path, MirrorSettings)>,
    pub(super) clock: Option<Arc<dyn Clock>>,
}

impl StoreBuilder {
    /// Stores the WAL in a redb file at `path` (created if missing and allowed).
    pub fn path(mut self, path: impl Into<PathBuf>) -> Self {
        self.location = Some(Location::Path(path.into()));
        self
    }

    /// Stores the WAL on a redb storage backend (a crash-image backend in tests, say).
    pub fn backend(mut self, backend: impl StorageBackend) -> Self {
        self.location = Some(Location::Backend(Box::new(backend)));
        self
    }

    /// Sets the durability of `stage` calls.
    pub fn staging_durability(mut self, durability: StagingDurability) -> Self {
        self.settings.staging_durability = durability;
        self
    }

    /// Sets the most bytes redb's page cache may hold (at least [`crate::limits::STORE_CACHE_BYTES_MIN`]).
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.settings.cache_bytes = bytes.max(crate::limits::STORE_CACHE_BYTES_MIN);
        self
    }

    /// Refuses to create a store that does not exist (a rerun that must find its state).
    pub fn must_exist(mut self) -> Self {
        self.settings.create_if_missing = false;
        self
    }

    /// Injects the writer's unique tag (default: random from the standard library's hasher seed).
    pub fn writer_tag(mut self, tag: u128) -> Self {
        self.writer_tag = Some(tag);
        self
    }

    /// Mirrors the WAL to `store` under `prefix` (see [`crate::mirror`]): the open claims the next epoch there,
    /// restores or reconciles the local file, and fences older writers; every committed group is then shipped as
    /// one object.
    pub fn mirror(
        mut self,
        store: Arc<dyn object_store::ObjectStore>,
        prefix: object_store::path::Path,
        settings: MirrorSettings,
    ) -> Self {
        self.mirror = Some((store, prefix, settings));
        self
    }

    /// Injects the clock the mirror times its deletes and lag bound with (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Opens (or creates) the store, bumps the epoch durably and starts the writer.
    pub async fn open(self) -> Result<Store> {
        let StoreBuilder { settings, location, writer_tag, mirror, clock } = self;
        // Settings are plain data a caller may deserialise: re-check the ids before a store records them.
        settings.job.check()?;
        settings.target.check()?;
        let clock = clock.unwrap_or_else(|| Arc::new(SystemClock));
        if let Some((_, _, mirror_settings)) = &mirror {
            mirror_settings.check()?;
        }
        let mirror = mirror.map(|(store, prefix, settings)| MirrorConfig { store, prefix, settings, clock });
        let location = location.ok_or_else(|| {
            Error::from(InvalidInput::Syntax {
                what: "store location",
                value: "none given: call path() or backend()".into(),
            })
        })?;
        let tag = writer_tag.unwrap_or_else(random_tag);
        let opened = tokio::task::spawn_blocking(move || open_blocking(&settings, location, tag, mirror))
            .await
            .map_err(|e| Error::bug(format!("open task: {e}")))??;
        Ok(opened)
    }
}

impl std::fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBuilder").field("settings", &self.settings).finish_non_exhaustive()
    }
}
