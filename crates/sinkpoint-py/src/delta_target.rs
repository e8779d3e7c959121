//! `DeltaTarget`: the Rust Delta adapter ([`sinkpoint_delta::DeltaTarget`]) compiled into the wheel. The `Driver`
//! drives it natively, as it drives `LanceTarget`: key n lands as one append carrying the Delta action
//! `txn { appId: "sinkpoint.job.<job>", version: n }`, built on a snapshot whose txn for the job is n − 1 and
//! written only as the next version, so a retry after a lost acknowledgement, a racing writer or a zombie driver
//! never lands a key twice (`docs/protocols/delta.md`). Its other methods are for operators and tests.
//!
//! Why the wheel commits through the Rust adapter and not the Python `deltalake` package:
//! `docs/decisions/0044-one-sink-two-tables.md`.

use std::collections::HashMap;

use pyo3::prelude::*;
use sinkpoint::{CommitKey, JobId, Target};

use crate::args::{options_arg, path_arg};
use crate::errors::{invalid, to_py};
use crate::lance_target::probe_to_py;
use crate::runtime::block_on;
use crate::values::Reduced;

/// A sinkpoint target over the Delta table at `uri` (which must exist, with its schema).
#[pyclass(name = "DeltaTarget", module = "sinkpoint", frozen)]
pub(crate) struct PyDeltaTarget {
    uri: String,
    storage_options: Option<HashMap<String, String>>,
    pub(crate) target: sinkpoint_delta::DeltaTarget,
}

impl PyDeltaTarget {
    /// The identity a store records for this target.
    pub(crate) fn identity_str(&self) -> String {
        format!("delta:{}", self.uri)
    }
}

/// Whether `uri` names storage the wheel's delta-rs reaches: a local path or a `file://` URL. The wheel links
/// deltalake with its default features only (the build the workspace's tests already make), which register no
/// cloud storage; refusing here says so before a job writes anything, where the commit would only fail later.
fn is_local(uri: &str) -> bool {
    !uri.contains("://") || uri.starts_with("file://")
}

#[pymethods]
impl PyDeltaTarget {
    /// The target over the Delta table at `uri`: a local path or a `file://` URL (the wheel's delta-rs has no
    /// cloud storage compiled in). `storage_options` are delta-rs's storage options, as the Python `deltalake`
    /// package takes them. Nothing is opened until first used. Raises InvalidInputError for any other URI.
    #[new]
    #[pyo3(signature = (uri, storage_options = None))]
    fn new(uri: Bound<'_, PyAny>, storage_options: Option<Bound<'_, PyAny>>) -> PyResult<Self> {
        let uri = path_arg("uri", "the Delta table's path or file:// URL", &uri)?;
        if !is_local(&uri) {
            return Err(invalid(format!(
                "DeltaTarget({uri:?}): this wheel's delta-rs reaches local tables only (a path or file:// URL); \
                 its commit fence also needs a log store that commits with a put-if-absent"
            )));
        }
        let storage_options = options_arg("storage_options", storage_options.as_ref())?;
        let target = sinkpoint_delta::DeltaTarget::new(uri.as_str())
            .with_storage_options(storage_options.clone().unwrap_or_default());
        Ok(Self { uri, storage_options, target })
    }

    /// The table's URI.
    #[getter]
    fn uri(&self) -> &str {
        &self.uri
    }

    /// The storage options (a copy), or None.
    #[getter]
    fn storage_options(&self) -> Option<HashMap<String, String>> {
        self.storage_options.clone()
    }

    /// The identity a `Driver` records in its store for this target: `delta:<uri>`.
    #[getter]
    fn identity(&self) -> String {
        self.identity_str()
    }

    /// The table's latest version. Raises TargetError when it cannot be read (no table at the URI included).
    fn version(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        block_on(py, || self.target.version())?.map_err(to_py)
    }

    /// Whether key `key` of `job` landed: `("committed", ids or None)`, `"not_committed"`, or
    /// `("unknown", reason)`. Exact whatever the table's history: it reads the job's txn in the latest snapshot;
    /// the ids come from the key's own commit file when it is among the few after `prepared_version`. Read-only;
    /// what the committer asks after a crash.
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

    fn __repr__(&self) -> String {
        format!("DeltaTarget({:?})", self.uri)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py, (String, Option<HashMap<String, String>>)> {
        let this = slf.get();
        Ok((slf.get_type().into_any(), (this.uri.clone(), this.storage_options.clone())))
    }
}
