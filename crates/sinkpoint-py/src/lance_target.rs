//! `LanceTarget`: the Rust Lance adapter ([`sinkpoint_lance::LanceTarget`]) compiled into the wheel. The
//! `Driver` drives it natively (no Python in the commit path): its commit goes through Lance's conditional-put
//! commit handler wrapped in the adapter's "only version V + 1" fence, so a racing writer (another job, a plain
//! pylance append) never has its manifest overwritten. Its other methods are for operators and maintenance.

use std::collections::HashMap;
use std::time::Duration;

use lance::dataset::cleanup::{CleanupPolicyBuilder, RemovalStats};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use sinkpoint::{CommitKey, JobId, ProbeOutcome, Target};

use crate::args::{options_arg, path_arg};
use crate::errors::{invalid, to_py};
use crate::runtime::block_on;
use crate::values::Reduced;

/// The age `cleanup_old_versions` removes versions from when given none: two weeks, pylance's default.
pub(crate) const CLEANUP_OLDER_THAN_S_DEFAULT: f64 = 14.0 * 86_400.0;
// `cleanup_old_versions`'s text signature spells this default.
const _: () = assert!(CLEANUP_OLDER_THAN_S_DEFAULT == 1_209_600.0);

/// A sinkpoint target over the Lance dataset at `uri` (which must exist, with its schema).
#[pyclass(name = "LanceTarget", module = "sinkpoint", frozen)]
pub(crate) struct PyLanceTarget {
    uri: String,
    storage_options: Option<HashMap<String, String>>,
    pub(crate) target: sinkpoint_lance::LanceTarget,
}

impl PyLanceTarget {
    /// The identity a store records for this target.
    pub(crate) fn identity_str(&self) -> String {
        format!("lance:{}", self.uri)
    }
}

/// What one `cleanup_old_versions` removed (Lance's `RemovalStats`).
#[pyclass(name = "CleanupStats", module = "sinkpoint", frozen, get_all)]
pub(crate) struct PyCleanupStats {
    /// Bytes deleted.
    bytes_removed: u64,
    /// Versions (manifests) removed.
    old_versions: u64,
    /// Data files deleted.
    data_files_removed: u64,
    /// Transaction files deleted.
    transaction_files_removed: u64,
    /// Index files deleted.
    index_files_removed: u64,
    /// Deletion files deleted.
    deletion_files_removed: u64,
    /// Files Lance could not delete (the next cleanup finds them again).
    failed_deletes: u64,
}

impl From<RemovalStats> for PyCleanupStats {
    fn from(s: RemovalStats) -> Self {
        Self {
            bytes_removed: s.bytes_removed,
            old_versions: s.old_versions,
            data_files_removed: s.data_files_removed,
            transaction_files_removed: s.transaction_files_removed,
            index_files_removed: s.index_files_removed,
            deletion_files_removed: s.deletion_files_removed,
            failed_deletes: s.failed_deletes,
        }
    }
}

#[pymethods]
impl PyCleanupStats {
    fn __repr__(&self) -> String {
        format!(
            "CleanupStats(old_versions={}, bytes_removed={}, data_files_removed={}, failed_deletes={})",
            self.old_versions, self.bytes_removed, self.data_files_removed, self.failed_deletes
        )
    }
}

/// A probe's answer as Python sees it: `"not_committed"`, `("committed", ids or None)`, `("unknown", reason)`.
pub(crate) fn probe_to_py(py: Python<'_>, outcome: ProbeOutcome) -> PyResult<Bound<'_, PyAny>> {
    Ok(match outcome {
        ProbeOutcome::NotCommitted => "not_committed".into_pyobject(py)?.into_any(),
        ProbeOutcome::Committed { ids } => {
            let ids: Option<Vec<String>> = ids.map(|ids| ids.iter().map(|id| id.as_str().to_owned()).collect());
            PyTuple::new(py, [("committed").into_pyobject(py)?.into_any(), ids.into_pyobject(py)?])?.into_any()
        }
        ProbeOutcome::Unknown { reason } => {
            PyTuple::new(py, [("unknown").into_pyobject(py)?.into_any(), reason.into_pyobject(py)?.into_any()])?
                .into_any()
        }
    })
}

#[pymethods]
impl PyLanceTarget {
    /// The target over the dataset at `uri`. `storage_options` are Lance's (pylance's) object-store options
    /// (for S3: `aws_endpoint`, `aws_region`, `allow_http`, credentials). Nothing is opened until first used.
    /// Raises InvalidInputError for a URI scheme whose commits Lance does not make conditional
    /// (`file+uring://`…): use a plain path, `file://` or `s3://`.
    #[new]
    #[pyo3(signature = (uri, storage_options = None))]
    fn new(uri: Bound<'_, PyAny>, storage_options: Option<Bound<'_, PyAny>>) -> PyResult<Self> {
        let uri = path_arg("uri", "the Lance dataset's path or URI", &uri)?;
        let storage_options = options_arg("storage_options", storage_options.as_ref())?;
        let target = sinkpoint_lance::LanceTarget::new(uri.as_str())
            .map_err(crate::errors::to_py)?
            .with_storage_options(storage_options.clone().unwrap_or_default());
        Ok(Self { uri, storage_options, target })
    }

    /// The dataset's URI.
    #[getter]
    fn uri(&self) -> &str {
        &self.uri
    }

    /// The storage options (a copy), or None.
    #[getter]
    fn storage_options(&self) -> Option<HashMap<String, String>> {
        self.storage_options.clone()
    }

    /// The identity a `Driver` records in its store for this target: `lance:<uri>`.
    #[getter]
    fn identity(&self) -> String {
        self.identity_str()
    }

    /// The dataset's latest version. Raises TargetError when it cannot be read.
    fn version(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        block_on(py, || self.target.version())?.map_err(to_py)
    }

    /// Whether key `key` of `job` landed in the versions after `prepared_version` (every version for None):
    /// `("committed", ids)`, `"not_committed"`, or `("unknown", reason)` when a version in that range is gone
    /// (cleaned up) or unreadable. Read-only; what the committer asks after a crash.
    #[pyo3(signature = (job, key, prepared_version = None))]
    fn probe<'py>(
        &self,
        py: Python<'py>,
        job: &str,
        key: u64,
        prepared_version: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = CommitKey { job: JobId::new(job).map_err(to_py)?, n: key };
        let outcome = block_on(py, || self.target.probe(&key, prepared_version))?;
        probe_to_py(py, outcome)
    }

    /// Lance's `cleanup_old_versions`: removes the versions older than `older_than_seconds` (two weeks by
    /// default), keeping every version after `retention_watermark` (`Driver.retention_watermark()`, the version
    /// the key in flight was prepared against: its probe reads the versions after it). `None`: nothing is in
    /// flight. Lance also deletes the data files no version references once they are 7 days old, staged ones
    /// included: commit a staged input within 7 days. Raises TargetError when the cleanup fails (retry it).
    // The text signature spells the default as a number (PyO3 shows a constant as `...`); the const assertion
    // beside the constant keeps the two equal.
    #[pyo3(signature = (older_than_seconds = CLEANUP_OLDER_THAN_S_DEFAULT, retention_watermark = None))]
    #[pyo3(text_signature = "($self, /, older_than_seconds=1209600.0, retention_watermark=None)")]
    fn cleanup_old_versions(
        &self,
        py: Python<'_>,
        older_than_seconds: f64,
        retention_watermark: Option<u64>,
    ) -> PyResult<PyCleanupStats> {
        let age = Duration::try_from_secs_f64(older_than_seconds)
            .ok()
            .and_then(|d| chrono::Duration::from_std(d).ok())
            .ok_or_else(|| invalid(format!("older_than_seconds {older_than_seconds}: not a duration")))?;
        // Lance measures a version's age against the wall clock, as its own cleanup does.
        let before = chrono::Utc::now() - age;
        // `delete_unverified` stays off: with it, Lance deletes the unreferenced files of inputs staged and not
        // yet committed, whatever their age, and their commit later names files that are gone.
        let policy = CleanupPolicyBuilder::default().before_timestamp(before).build();
        let stats = block_on(py, || self.target.cleanup_old_versions(policy, retention_watermark))?.map_err(|e| {
            to_py(sinkpoint::Error::target_with_source(format!("cleaning up old versions of {}", self.uri), e))
        })?;
        Ok(stats.into())
    }

    fn __repr__(&self) -> String {
        format!("LanceTarget({:?})", self.uri)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py, (String, Option<HashMap<String, String>>)> {
        let this = slf.get();
        Ok((slf.get_type().into_any(), (this.uri.clone(), this.storage_options.clone())))
    }
}
