//! How a store is opened: [`StoreBuilder`] gathers the settings (plain data, [`super::StoreSettings`]) and the
//! injected parts (a path or a redb backend, a mirror, a clock, a writer tag) into one plan for `open`.
use std::path::PathBuf;
use std::sync::Arc;

use super::Store;
use super::open::{Location, OpenPlan, open_blocking, random_tag};
use super::{StagingDurability, StoreSettings};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, InvalidInput, Result};
use crate::mirror::{MirrorConfig, MirrorSettings};
use redb::StorageBackend;

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
        let plan = OpenPlan { settings, location, writer_tag: tag, mirror };
        let opened = tokio::task::spawn_blocking(move || open_blocking(plan))
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
