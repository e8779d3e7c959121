//! Targets the committer drives from Python: the reference [`DirTable`], and any Python object meeting the
//! `Target` protocol (`version`, `commit`, `probe`), called with the GIL re-attached. A Python target answers with
//! a `CommitOutcome` or `ProbeOutcome` (`outcomes`), or with the older string tags. (`sinkpoint.LanceTarget`
//! is compiled in and driven natively, as `DirTable` is: `lance_target`.) A Python target must keep the four
//! guarantees of the Rust trait; this bridge keeps one more: whatever it cannot read as a clear answer is
//! Unknown, never NotLanded.

use async_trait::async_trait;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use sinkpoint::{CheckpointId, CommitKey, CommitOutcome, DirTable, ProbeOutcome, Target, TargetCommit};

use crate::errors::to_py;
use crate::outcomes::{PyCommitOutcome, PyProbeOutcome};
use crate::runtime::block_on;
use crate::values::{PyWriteResult, Reduced, results_to_py};

/// One commit offered to a Python target.
#[pyclass(name = "TargetCommit", module = "sinkpoint", frozen, get_all)]
pub(crate) struct PyTargetCommit {
    /// The job id.
    job: String,
    /// The commit key's number n: at most one commit per (job, n) may ever land.
    key: u64,
    /// The checkpoints it covers, sorted; record them with the commit.
    ids: Vec<String>,
    /// The writer's epoch; record it with the commit.
    epoch: u64,
    /// The write results to publish, in checkpoint then part order.
    results: Vec<PyWriteResult>,
    /// Whether this is the job's last commit.
    #[pyo3(name = "final")]
    final_commit: bool,
    /// The target version read before the intent was recorded (None if the target has no versions).
    prepared_version: Option<u64>,
}

#[pymethods]
impl PyTargetCommit {
    fn __repr__(&self) -> String {
        format!(
            "TargetCommit(job={:?}, key={}, ids={} checkpoints, epoch={}, results={}, final={}, prepared_version={:?})",
            self.job,
            self.key,
            self.ids.len(),
            self.epoch,
            self.results.len(),
            self.final_commit,
            self.prepared_version
        )
    }
}

/// A Python object driven as a [`Target`].
pub(crate) struct PyTarget {
    object: Py<PyAny>,
}

impl PyTarget {
    pub(crate) fn new(object: Py<PyAny>) -> Self {
        Self { object }
    }
}

/// `"name"` or `("name", value)` as returned by a Python target (the older form of its answers).
fn tagged<'py>(answer: &Bound<'py, PyAny>) -> PyResult<(String, Option<Bound<'py, PyAny>>)> {
    if let Ok(name) = answer.extract::<String>() {
        return Ok((name, None));
    }
    let tuple = answer.cast::<PyTuple>()?;
    if tuple.len() != 2 {
        return Err(pyo3::exceptions::PyValueError::new_err("a tagged answer is a pair (tag, value)"));
    }
    Ok((tuple.get_item(0)?.extract()?, Some(tuple.get_item(1)?)))
}

/// What a commit may answer, for the message about an answer that is none of them.
const COMMIT_FORMS: &str = "expected a sinkpoint.CommitOutcome (CommitOutcome.committed(), \
    CommitOutcome.not_landed(reason), CommitOutcome.unknown(reason)) or, in the older form, \
    \"committed\", (\"not_landed\", reason) or (\"unknown\", reason)";

/// What a probe may answer, for the message about an answer that is none of them.
const PROBE_FORMS: &str = "expected a sinkpoint.ProbeOutcome (ProbeOutcome.not_committed(), \
    ProbeOutcome.committed(ids or None), ProbeOutcome.unknown(reason)) or, in the older form, \
    \"not_committed\", (\"committed\", ids or None) or (\"unknown\", reason)";

/// `repr(answer)`, or its `str` when its `repr` fails.
fn shown(answer: &Bound<'_, PyAny>) -> String {
    answer.repr().map_or_else(|_| answer.to_string(), |r| r.to_string())
}

/// The outcome a commit answered, or, for an answer that is none of the forms, what is wrong with it (the caller
/// takes it as Unknown: the core's error then carries this reason).
fn commit_outcome(answer: PyResult<Bound<'_, PyAny>>) -> Result<CommitOutcome, String> {
    let answer = match answer {
        Ok(a) => a,
        Err(e) => return Ok(CommitOutcome::Unknown { reason: format!("the Python target raised: {e}") }),
    };
    if let Ok(outcome) = answer.cast::<PyCommitOutcome>() {
        return Ok(outcome.get().0.clone());
    }
    let reason = |value: Option<Bound<'_, PyAny>>| value.map_or_else(String::new, |v| v.to_string());
    match tagged(&answer) {
        Ok((tag, None)) if tag == "committed" => Ok(CommitOutcome::Committed),
        Ok((tag, value)) if tag == "not_landed" => Ok(CommitOutcome::NotLanded { reason: reason(value) }),
        Ok((tag, value)) if tag == "unknown" => Ok(CommitOutcome::Unknown { reason: reason(value) }),
        _ => Err(format!("the Python target answered {} to a commit: {COMMIT_FORMS}", shown(&answer))),
    }
}

/// The outcome a probe answered, or, for an answer that is none of the forms, what is wrong with it.
fn probe_outcome(answer: PyResult<Bound<'_, PyAny>>) -> Result<ProbeOutcome, String> {
    let answer = match answer {
        Ok(a) => a,
        Err(e) => return Ok(ProbeOutcome::Unknown { reason: format!("the Python target raised: {e}") }),
    };
    if let Ok(outcome) = answer.cast::<PyProbeOutcome>() {
        return Ok(outcome.get().0.clone());
    }
    let bad = |answer: &Bound<'_, PyAny>| {
        Err(format!("the Python target answered {} to a probe: {PROBE_FORMS}", shown(answer)))
    };
    match tagged(&answer) {
        Ok((tag, None)) if tag == "not_committed" => Ok(ProbeOutcome::NotCommitted),
        Ok((tag, Some(value))) if tag == "committed" => {
            if value.is_none() {
                return Ok(ProbeOutcome::Committed { ids: None });
            }
            let Ok(raw) = value.extract::<Vec<String>>() else { return bad(&answer) };
            match raw.into_iter().map(CheckpointId::new).collect::<Result<Vec<_>, _>>() {
                Ok(ids) => Ok(ProbeOutcome::Committed { ids: Some(ids) }),
                Err(e) => Err(format!("the Python target's probe named a bad id: {e}")),
            }
        }
        Ok((tag, Some(value))) if tag == "unknown" => Ok(ProbeOutcome::Unknown { reason: value.to_string() }),
        _ => bad(&answer),
    }
}

#[async_trait]
impl Target for PyTarget {
    async fn version(&self) -> sinkpoint::Result<Option<u64>> {
        Python::attach(|py| {
            self.object
                .bind(py)
                .call_method0("version")
                .and_then(|v| v.extract::<Option<u64>>())
                .map_err(|e| sinkpoint::Error::target(format!("the Python target's version() failed: {e}")))
        })
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        let offered = PyTargetCommit {
            job: commit.key.job.as_str().to_owned(),
            key: commit.key.n,
            ids: commit.ids.iter().map(|id| id.as_str().to_owned()).collect(),
            epoch: commit.epoch,
            results: results_to_py(commit.results.to_vec()),
            final_commit: commit.final_commit,
            prepared_version: commit.prepared_version,
        };
        Python::attach(|py| commit_outcome(self.object.bind(py).call_method1("commit", (offered,))))
            .unwrap_or_else(|reason| CommitOutcome::Unknown { reason })
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        Python::attach(|py| {
            probe_outcome(self.object.bind(py).call_method1("probe", (key.job.as_str(), key.n, prepared_version)))
        })
        .unwrap_or_else(|reason| ProbeOutcome::Unknown { reason })
    }
}

/// The reference directory table on a local directory: data files, one commit object per key.
#[pyclass(name = "DirTable", module = "sinkpoint", frozen)]
pub(crate) struct PyDirTable {
    path: String,
    pub(crate) table: DirTable,
}

impl PyDirTable {
    pub(crate) fn path_str(&self) -> &str {
        &self.path
    }
}

#[pymethods]
impl PyDirTable {
    /// The directory table at `path` (a `str` or `os.PathLike`; created if missing).
    #[new]
    fn new(path: Bound<'_, PyAny>) -> PyResult<Self> {
        let path = crate::args::path_arg("path", "the table's directory", &path)?;
        let table = DirTable::local(&path).map_err(to_py)?;
        Ok(Self { path, table })
    }

    /// The directory.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// Writes a data file (invisible until a commit references it) and returns its write result. A data file is
    /// written once: a name that exists is refused (`InvalidInputError`).
    fn write_data_file(&self, py: Python<'_>, name: &str, data: Vec<u8>) -> PyResult<PyWriteResult> {
        Ok(block_on(py, || self.table.write_data_file(name, data))?.map_err(to_py)?.into())
    }

    /// Every line of every data file of every landed commit, in commit order (a file committed twice is
    /// read twice, as a duplicate would be in a real table).
    fn rows(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        block_on(py, || self.table.rows())?.map_err(to_py)
    }

    fn __repr__(&self) -> String {
        format!("DirTable({:?})", self.path)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py, (String,)> {
        Ok((slf.get_type().into_any(), (slf.get().path.clone(),)))
    }
}
