//! `SharedStaging` and `Worker`: the worker side of a job whose tasks run on many machines. Both are plain
//! configuration until first used, so they pickle as their configuration and reopen in the process that
//! unpickles them.

use std::collections::HashMap;
use std::sync::OnceLock;

use pyo3::prelude::*;
use sinkpoint::shared::{KeyExclusivity, SharedStaging, Worker};
use sinkpoint::{Attempt, JobId, Part, StageOutcome, StagePart};

use crate::args::{options_arg, path_arg};
use crate::errors::to_py;
use crate::runtime::block_on;
use crate::values::{PySealedBy, PyWriteResult, Reduced, id_arg, key_arg, result_arg, results_to_py};

/// A SharedStaging's constructor arguments, in order: what it pickles as.
type StagingArgs = (String, String, HashMap<String, String>, Option<u64>, &'static str);

/// The object store every worker and the driver of a job see (URL + job id). `file:///abs/dir`,
/// `s3://bucket/prefix` (with `storage_options`), or `memory://name` (one process, tests).
#[pyclass(name = "SharedStaging", module = "sinkpoint", frozen)]
pub(crate) struct PySharedStaging {
    url: String,
    job: String,
    storage_options: HashMap<String, String>,
    request_timeout_ms: Option<u64>,
    key_exclusivity: KeyExclusivity,
    opened: OnceLock<SharedStaging>,
}

/// `key_exclusivity`'s Python names, in the core's order.
const KEY_EXCLUSIVITY_NAMES: [(&str, KeyExclusivity); 2] =
    [("seal", KeyExclusivity::AtSeal), ("adoption", KeyExclusivity::AtAdoption)];

fn key_exclusivity_arg(name: &str) -> PyResult<KeyExclusivity> {
    KEY_EXCLUSIVITY_NAMES.iter().find(|(n, _)| *n == name).map(|(_, k)| *k).ok_or_else(|| {
        to_py(sinkpoint::Error::invalid_input(format!(
            "key_exclusivity is {name:?}; it is \"seal\" (workers claim each key: the default) or \"adoption\" \
             (the committer's store decides: a task's seal is one request)"
        )))
    })
}

fn key_exclusivity_name(keys: KeyExclusivity) -> &'static str {
    KEY_EXCLUSIVITY_NAMES.iter().find(|(_, k)| *k == keys).map_or("seal", |(n, _)| n)
}

impl PySharedStaging {
    /// The core handle, opened on first use.
    pub(crate) fn get(&self) -> PyResult<SharedStaging> {
        if let Some(s) = self.opened.get() {
            return Ok(s.clone());
        }
        let (store, prefix) = crate::objects::open(&self.url, &self.storage_options)?;
        let job = JobId::new(self.job.as_str()).map_err(to_py)?;
        let mut shared =
            SharedStaging::new(store, prefix.as_ref(), job).map_err(to_py)?.with_key_exclusivity(self.key_exclusivity);
        if let Some(ms) = self.request_timeout_ms {
            shared = shared.with_request_timeout_ms(ms);
        }
        Ok(self.opened.get_or_init(|| shared).clone())
    }
}

#[pymethods]
impl PySharedStaging {
    /// Shared staging for `job` at `url`. Checks the job id and the URL now (a local directory is created, and
    /// refused when this process may not write it); connects on first use.
    #[new]
    #[pyo3(signature = (url, job, storage_options = None, request_timeout_ms = None, key_exclusivity = "seal"))]
    fn new(
        url: Bound<'_, PyAny>,
        job: String,
        storage_options: Option<Bound<'_, PyAny>>,
        request_timeout_ms: Option<u64>,
        key_exclusivity: &str,
    ) -> PyResult<Self> {
        let url = path_arg("url", "the shared staging's object store URL, or a local directory", &url)?;
        let storage_options = options_arg("storage_options", storage_options.as_ref())?;
        JobId::new(job.as_str()).map_err(to_py)?;
        let this = Self {
            url,
            job,
            storage_options: storage_options.unwrap_or_default(),
            request_timeout_ms,
            key_exclusivity: key_exclusivity_arg(key_exclusivity)?,
            opened: OnceLock::new(),
        };
        // Parse (and for a local directory, create) now, so a bad URL fails where it was written.
        this.get()?;
        Ok(this)
    }

    /// The object store URL.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    /// The job id.
    #[getter]
    fn job(&self) -> &str {
        &self.job
    }

    /// Where the job decides that each source key belongs to one checkpoint: `"seal"` or `"adoption"`.
    #[getter]
    fn key_exclusivity(&self) -> &'static str {
        key_exclusivity_name(self.key_exclusivity)
    }

    /// A worker handle named `name` (recorded in what it writes, for messages).
    fn worker(slf: Bound<'_, Self>, name: String) -> PyResult<PyWorker> {
        PyWorker::new(slf.unbind(), name)
    }

    fn __repr__(&self) -> String {
        format!("SharedStaging({:?}, job={:?})", self.url, self.job)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py, StagingArgs> {
        let this = slf.get();
        let args = (
            this.url.clone(),
            this.job.clone(),
            this.storage_options.clone(),
            this.request_timeout_ms,
            key_exclusivity_name(this.key_exclusivity),
        );
        Ok((slf.get_type().into_any(), args))
    }
}

/// A worker's handle on shared staging. Each handle, and each unpickled copy, is its own session: stage and
/// seal a checkpoint through one handle, or use `stage_and_seal`. Every call returns once its object is in
/// the store.
#[pyclass(name = "Worker", module = "sinkpoint", frozen)]
pub(crate) struct PyWorker {
    staging: Py<PySharedStaging>,
    name: String,
    opened: OnceLock<Worker>,
}

impl PyWorker {
    fn get(&self) -> PyResult<&Worker> {
        if let Some(w) = self.opened.get() {
            return Ok(w);
        }
        let worker = Worker::new(self.staging.get().get()?, &self.name).map_err(to_py)?;
        Ok(self.opened.get_or_init(|| worker))
    }
}

#[pymethods]
impl PyWorker {
    /// A worker handle on `staging`, named `name`.
    #[new]
    fn new(staging: Py<PySharedStaging>, name: String) -> PyResult<Self> {
        let this = Self { staging, name, opened: OnceLock::new() };
        this.get()?;
        Ok(this)
    }

    /// The worker's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// This handle's session (random, unique per handle).
    #[getter]
    fn session(&self) -> PyResult<u128> {
        Ok(self.get()?.session())
    }

    /// Whether `key` (bytes or str) is processed: a seal that holds it was adopted or is waiting to be. One
    /// read (two for a multi-key checkpoint).
    fn is_processed(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_arg(key)?;
        let worker = self.get()?;
        block_on(py, || worker.is_processed(&key))?.map_err(to_py)
    }

    /// Who sealed checkpoint `id`, or None.
    fn sealed_by(&self, py: Python<'_>, id: &str) -> PyResult<Option<PySealedBy>> {
        let id = id_arg(id)?;
        let worker = self.get()?;
        Ok(block_on(py, || worker.sealed_by(&id))?.map_err(to_py)?.map(PySealedBy::from))
    }

    /// Stages part `part` of attempt `attempt` of checkpoint `id`: the source keys it covers and its write
    /// results (`WriteResult`s or pylance fragments). Returns "staged", or "already_staged" for a retry of
    /// the same part with the same bytes.
    // The text signature spells the empty defaults as Python reads them (PyO3 shows an expression as `...`).
    #[pyo3(signature = (id, *, attempt = 0, part = 0, keys = Vec::new(), results = Vec::new()))]
    #[pyo3(text_signature = "($self, /, id, *, attempt=0, part=0, keys=(), results=())")]
    fn stage(
        &self,
        py: Python<'_>,
        id: &str,
        attempt: u32,
        part: u32,
        keys: Vec<Bound<'_, PyAny>>,
        results: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<&'static str> {
        let id = id_arg(id)?;
        let keys = keys.iter().map(key_arg).collect::<PyResult<Vec<_>>>()?;
        let results = results.iter().map(result_arg).collect::<PyResult<Vec<_>>>()?;
        let part = StagePart::new(Attempt::new(attempt), Part::new(part)).keys(keys).results(results);
        let worker = self.get()?;
        match block_on(py, || worker.stage(&id, part))?.map_err(to_py)? {
            StageOutcome::Staged => Ok("staged"),
            StageOutcome::AlreadyStaged => Ok("already_staged"),
        }
    }

    /// Seals checkpoint `id` with `parts` parts, all staged through this handle. Raises SealLostError if another
    /// attempt sealed it first (its `results` are this attempt's, to delete).
    fn seal(&self, py: Python<'_>, id: &str, parts: u32) -> PyResult<()> {
        let id = id_arg(id)?;
        let worker = self.get()?;
        block_on(py, || worker.seal(&id, parts))?.map_err(to_py)
    }

    /// Stages one part holding `keys` and `results` and seals checkpoint `id` with it. For
    /// `checkpoint_id_for_key(key)` ids this is one conditional put.
    fn stage_and_seal(
        &self,
        py: Python<'_>,
        id: &str,
        keys: Vec<Bound<'_, PyAny>>,
        results: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let id = id_arg(id)?;
        let keys = keys.iter().map(key_arg).collect::<PyResult<Vec<_>>>()?;
        let results = results.iter().map(result_arg).collect::<PyResult<Vec<_>>>()?;
        let worker = self.get()?;
        block_on(py, || worker.stage_and_seal(&id, keys, results))?.map_err(to_py)
    }

    /// Drops this handle's current attempt of `id` (begins the next); returns its write results to delete.
    fn restart(&self, py: Python<'_>, id: &str) -> PyResult<Vec<PyWriteResult>> {
        let id = id_arg(id)?;
        let worker = self.get()?;
        Ok(results_to_py(block_on(py, || worker.restart(&id))?.map_err(to_py)?))
    }

    /// Abandons `id` in this handle; returns its write results to delete.
    fn abort(&self, py: Python<'_>, id: &str) -> PyResult<Vec<PyWriteResult>> {
        let id = id_arg(id)?;
        let worker = self.get()?;
        Ok(results_to_py(block_on(py, || worker.abort(&id))?.map_err(to_py)?))
    }

    fn __repr__(&self) -> String {
        format!("Worker({:?})", self.name)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py, (Py<PySharedStaging>, String)> {
        let this = slf.get();
        Ok((slf.get_type().into_any(), (this.staging.clone_ref(slf.py()), this.name.clone())))
    }
}
