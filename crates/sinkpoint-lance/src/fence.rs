//! The key fence: a commit handler that accepts only one manifest version.

use std::fmt;
use std::sync::{Arc, Mutex};

use lance_io::object_store::ObjectStore;
use lance_table::format::{IndexMetadata, Manifest, Transaction};
use lance_table::io::commit::{CommitError, CommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter};
use object_store::path::Path;

/// How far one fenced commit attempt got: this, not Lance's error text, decides NotLanded vs Unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reached {
    /// The handler was never asked to write a manifest (Lance failed before publishing).
    NotCalled,
    /// Lance rebased the commit past V + 1 (a foreign commit landed first); nothing was written.
    Refused,
    /// The real handler found V + 1 taken; nothing was written.
    Conflict,
    /// The real handler published the manifest: the commit landed.
    Published,
    /// The real handler failed some other way: the manifest may or may not be there.
    Failed,
}

/// Wraps the dataset's real commit handler and lets through only manifest version `expected`.
///
/// Lance 14.0.2 rebases an Append onto the latest version before its first attempt, so a plain commit from
/// read version V can land at V + 2 after a foreign commit, and a re-sent commit lands twice. Refusing every
/// version but V + 1 makes the commit conditional on the table being exactly what the key check read.
/// Only for object-store handlers (local, S3 conditional put): their other trait methods are the defaults.
pub struct NextVersionOnly {
    inner: Arc<dyn CommitHandler>,
    expected: u64,
    /// Set into the manifest's table metadata before it is written: the job's mark lands with the rows.
    metadata: Option<(String, String)>,
    reached: Mutex<Reached>,
}

impl NextVersionOnly {
    /// A fence letting through only `expected` (V + 1), forwarding it to `inner`.
    pub fn new(inner: Arc<dyn CommitHandler>, expected: u64) -> Self {
        Self { inner, expected, metadata: None, reached: Mutex::new(Reached::NotCalled) }
    }

    /// Also sets `key` to `value` in the table metadata of the manifest it lets through, in the same put.
    #[must_use]
    pub fn setting_metadata(mut self, key: String, value: String) -> Self {
        self.metadata = Some((key, value));
        self
    }

    /// How far the attempt got.
    pub fn reached(&self) -> Reached {
        // A poisoned lock means a panic mid-commit: nothing proves the manifest is absent.
        self.reached.lock().map(|r| *r).unwrap_or(Reached::Failed)
    }

    fn set(&self, reached: Reached) {
        if let Ok(mut r) = self.reached.lock() {
            *r = reached;
        }
    }
}

impl fmt::Debug for NextVersionOnly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NextVersionOnly").field("expected", &self.expected).finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl CommitHandler for NextVersionOnly {
    fn is_version_not_found_definitive(&self) -> bool {
        self.inner.is_version_not_found_definitive()
    }

    fn propagate_commit_error_after_success(&self) -> bool {
        self.inner.propagate_commit_error_after_success()
    }

    async fn commit(
        &self,
        manifest: &mut Manifest,
        indices: Option<Vec<IndexMetadata>>,
        base_path: &Path,
        object_store: &ObjectStore,
        manifest_writer: ManifestWriter,
        naming_scheme: ManifestNamingScheme,
        transaction: Option<Transaction>,
    ) -> std::result::Result<ManifestLocation, CommitError> {
        if manifest.version != self.expected {
            self.set(Reached::Refused);
            return Err(CommitError::CommitConflict);
        }
        if let Some((key, value)) = &self.metadata {
            manifest.table_metadata.insert(key.clone(), value.clone());
        }
        let result = self
            .inner
            .commit(manifest, indices, base_path, object_store, manifest_writer, naming_scheme, transaction)
            .await;
        self.set(match &result {
            Ok(_) => Reached::Published,
            Err(CommitError::CommitConflict) => Reached::Conflict,
            Err(CommitError::OtherError(_)) => Reached::Failed,
        });
        result
    }
}
