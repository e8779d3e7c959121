//! [`DeltaDataFiles`]: what the orphan data-file collector ([`sinkpoint::gc::collect_data_files`]) asks a Delta
//! table.
//!
//! Files are named as the table's log names them: their path relative to the table's root, percent-decoded
//! (`part-00000-<uuid>-c000.snappy.parquet`, `year=2026/part-….parquet`). Only files inside the table's own
//! directory are ever candidates: a write result naming anything else is refused.

use std::collections::BTreeSet;

use async_trait::async_trait;
use deltalake::logstore::object_store::{ObjectStore, ObjectStoreExt as _};
use deltalake::{DeltaTable, DeltaTableError, ObjectStoreError};
use futures::TryStreamExt as _;
use sinkpoint::gc::{DataFiles, FileStat};
use sinkpoint::{Error, Format, Result, WriteResult};

use crate::DeltaTarget;
use crate::results::{decode_add, is_relative_inside};
use crate::target::file_path;

/// The data files of a Delta table, for [`sinkpoint::gc::collect_data_files`]: the collector of the data files
/// of dropped attempts (restarted, aborted, force-aborted, discarded) that no commit will ever reference. Build it
/// from the job's target ([`DeltaTarget::data_files`]).
///
/// - [`DataFiles::files_of`] names the data file of an `Add` staged as [`Format::Delta`].
/// - [`DataFiles::referenced`] is every file the latest snapshot adds, and every file it keeps a tombstone of
///   (a `remove` younger than `delta.deletedFileRetentionDuration`): the files the versions a reader may still
///   time-travel to reference, as far as Delta's own VACUUM protects them. Nothing for a table that does not
///   exist.
/// - [`DataFiles::stat`] and [`DataFiles::delete`] go through delta-rs's object store for the table.
#[derive(Debug)]
pub struct DeltaDataFiles {
    target: DeltaTarget,
}

impl DeltaDataFiles {
    /// The data files of the table `target` commits into.
    pub fn new(target: DeltaTarget) -> Self {
        Self { target }
    }

    /// The table at its latest version, or `None` when there is no Delta table at the URI.
    async fn open(&self) -> Result<Option<DeltaTable>> {
        match self.target.open().await {
            Ok(table) => Ok(Some(table)),
            Err(DeltaTableError::NotATable(_)) => Ok(None),
            Err(e) => Err(self.failed("opening", e)),
        }
    }

    /// The object store of the table, and `file` in it; refused for a name [`DataFiles::files_of`] never gives.
    fn locate(&self, file: &str) -> Result<(std::sync::Arc<dyn ObjectStore>, deltalake::Path)> {
        if !is_relative_inside(file) {
            return Err(Error::invalid_input(format!(
                "{file:?} is not a data file inside a Delta table's directory: pass a name DeltaDataFiles::files_of \
                 gave"
            )));
        }
        let store = self.target.object_store().map_err(|e| self.failed("opening the object store of", e))?;
        Ok((store, file_path(file)))
    }

    /// A delta-rs failure while doing `what` to the table, as a target error (retry later; check the URI and the
    /// storage options).
    fn failed(&self, what: &str, e: DeltaTableError) -> Error {
        Error::target_with_source(format!("{what} the Delta table at {}", self.target.uri()), e)
    }
}

#[async_trait]
impl DataFiles for DeltaDataFiles {
    fn files_of(&self, result: &WriteResult) -> Result<Vec<String>> {
        let add = decode_add(result).map_err(|reason| match result.format() {
            Format::Delta => Error::corrupt(format!(
                "a Delta write result does not decode ({reason}): the store holds damaged bytes; report it"
            )),
            _ => Error::invalid_input(format!(
                "{reason}: DeltaDataFiles names the files of Delta Adds only; collect this job's files with the \
                 DataFiles of the table that wrote them"
            )),
        })?;
        Ok(vec![add.path])
    }

    async fn referenced(&self) -> Result<BTreeSet<String>> {
        let Some(table) = self.open().await? else { return Ok(BTreeSet::new()) };
        let snapshot = table.snapshot().map_err(|e| self.failed("reading the snapshot of", e))?;
        let log_store = table.log_store();
        let mut out = BTreeSet::new();
        let mut files = snapshot.snapshot().file_views(log_store.as_ref(), None);
        while let Some(file) = files.try_next().await.map_err(|e| self.failed("listing the files of", e))? {
            out.insert(file.path().into_owned());
        }
        let mut tombstones = snapshot.all_tombstones(log_store.as_ref());
        while let Some(file) = tombstones.try_next().await.map_err(|e| self.failed("listing the tombstones of", e))? {
            out.insert(file.path().into_owned());
        }
        Ok(out)
    }

    async fn stat(&self, file: &str) -> Result<Option<FileStat>> {
        let (store, path) = self.locate(file)?;
        match store.head(&path).await {
            Ok(meta) => Ok(Some(FileStat {
                bytes: meta.size,
                modified_ms: u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0),
            })),
            Err(ObjectStoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::target_with_source(
                format!("reading the size and age of {file} in {}", self.target.uri()),
                e,
            )),
        }
    }

    async fn delete(&self, file: &str) -> Result<()> {
        let (store, path) = self.locate(file)?;
        match store.delete(&path).await {
            Ok(()) | Err(ObjectStoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::target_with_source(format!("deleting {file} from {}", self.target.uri()), e)),
        }
    }
}
