//! Plain values crossing the boundary: write results, reports, checkpoint info, and the argument
//! conversions (keys as bytes or str, results as `WriteResult` or a pylance `FragmentMetadata`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use sinkpoint::commit::{Blocked, CommitReport, RecoveryReport};
use sinkpoint::shared::{AdoptReport, SealedBy};
use sinkpoint::{CheckpointId, CheckpointInfo, CheckpointState, Format, SourceKey, StateFilter, WriteResult};

use crate::errors::{invalid, to_py};

/// What `__reduce__` returns: the class and the arguments that rebuild the object (its configuration).
pub(crate) type Reduced<'py, A> = PyResult<(Bound<'py, PyAny>, A)>;

/// The format tag of a pylance `FragmentMetadata` staged as its JSON (`to_json()`), as the Lance adapter
/// reads it.
pub(crate) const LANCE_FRAGMENT_JSON: &str = sinkpoint_lance::FRAGMENT_JSON_FORMAT;

/// The tag a format is known by in Python.
pub(crate) fn format_name(format: &Format) -> String {
    match format {
        Format::Lance => "lance".into(),
        Format::Parquet => "parquet".into(),
        Format::Iceberg => "iceberg".into(),
        Format::Delta => "delta".into(),
        Format::ArrowIpc => "arrow-ipc".into(),
        Format::Other(name) => name.clone(),
        // Format is non_exhaustive; a new variant keeps its debug name until it is given one here.
        other => format!("{other:?}").to_lowercase(),
    }
}

fn parse_format(name: &str) -> Format {
    match name {
        "lance" => Format::Lance,
        "parquet" => Format::Parquet,
        "iceberg" => Format::Iceberg,
        "delta" => Format::Delta,
        "arrow-ipc" => Format::ArrowIpc,
        other => Format::Other(other.to_owned()),
    }
}

/// One write result: opaque bytes and a format tag.
#[pyclass(name = "WriteResult", module = "sinkpoint", frozen, eq)]
#[derive(Clone, PartialEq)]
pub(crate) struct PyWriteResult {
    pub(crate) inner: WriteResult,
}

impl From<WriteResult> for PyWriteResult {
    fn from(inner: WriteResult) -> Self {
        Self { inner }
    }
}

#[pymethods]
impl PyWriteResult {
    /// A write result of `format` ("lance", "parquet", "iceberg", "delta", "arrow-ipc", or any other name of
    /// 1 to 64 bytes) holding `data` (at most 1 MiB). Raises InvalidInput otherwise.
    #[new]
    fn new(format: &str, data: &[u8]) -> PyResult<Self> {
        WriteResult::new(parse_format(format), data.to_vec()).map(Self::from).map_err(to_py)
    }

    /// A pylance `FragmentMetadata` (anything with `to_json()`) as a `lance-fragment-json` result.
    #[staticmethod]
    fn from_lance_fragment(fragment: &Bound<'_, PyAny>) -> PyResult<Self> {
        fragment_result(fragment)
    }

    /// The format tag.
    #[getter]
    fn format(&self) -> String {
        format_name(self.inner.format())
    }

    /// The bytes.
    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.bytes())
    }

    fn __repr__(&self) -> String {
        format!("WriteResult({:?}, <{} bytes>)", self.format(), self.inner.bytes().len())
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py, (String, Bound<'py, PyBytes>)> {
        let this = slf.get();
        Ok((slf.get_type().into_any(), (this.format(), this.data(slf.py()))))
    }
}

fn fragment_result(fragment: &Bound<'_, PyAny>) -> PyResult<PyWriteResult> {
    let py = fragment.py();
    if !fragment.hasattr("to_json")? {
        let type_name = fragment.get_type().name()?;
        return Err(invalid(format!(
            "a write result must be a sinkpoint.WriteResult or a pylance FragmentMetadata, not {type_name}"
        )));
    }
    let json = py.import("json")?.call_method1("dumps", (fragment.call_method0("to_json")?,))?;
    let json: String = json.extract()?;
    WriteResult::new(Format::Other(LANCE_FRAGMENT_JSON.into()), json.into_bytes())
        .map(PyWriteResult::from)
        .map_err(to_py)
}

/// A result argument: a `WriteResult`, or a pylance fragment.
pub(crate) fn result_arg(value: &Bound<'_, PyAny>) -> PyResult<WriteResult> {
    match value.cast::<PyWriteResult>() {
        Ok(result) => Ok(result.get().inner.clone()),
        Err(_) => Ok(fragment_result(value)?.inner),
    }
}

/// A source key argument: bytes, or a str as its UTF-8 bytes.
pub(crate) fn key_arg(value: &Bound<'_, PyAny>) -> PyResult<SourceKey> {
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(s.extract::<String>()?.into_bytes());
    }
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    let type_name = value.get_type().name()?;
    Err(invalid(format!("a source key must be bytes or str, not {type_name}")))
}

/// A checkpoint id argument, checked by the core.
pub(crate) fn id_arg(id: &str) -> PyResult<CheckpointId> {
    CheckpointId::new(id).map_err(to_py)
}

pub(crate) fn results_to_py(results: Vec<WriteResult>) -> Vec<PyWriteResult> {
    results.into_iter().map(PyWriteResult::from).collect()
}

fn ids_to_py(ids: &[CheckpointId]) -> Vec<String> {
    ids.iter().map(|id| id.as_str().to_owned()).collect()
}

/// What `Driver.recover` found and did.
#[pyclass(name = "RecoveryReport", module = "sinkpoint", frozen, get_all)]
pub(crate) struct PyRecoveryReport {
    /// Checkpoints Staged by an older epoch (restart or abort them; seal complete ones).
    orphans: Vec<String>,
    /// F1: a key found landed and only marked committed.
    marked_landed: Option<u64>,
    /// F2: a key found not landed and re-committed under the same key.
    recommitted: Option<u64>,
    /// Keys begun for checkpoints that were Sealed at the crash.
    committed_keys: Vec<u64>,
    /// None, ("unknown", key, reason) or ("mismatch", key, recorded_ids, landed_ids).
    blocked: Option<Py<PyAny>>,
    /// Whether the job's final commit has landed (a rerun can skip everything).
    finished: bool,
}

impl PyRecoveryReport {
    pub(crate) fn new(py: Python<'_>, r: RecoveryReport) -> PyResult<Self> {
        let blocked = match r.blocked {
            None => None,
            Some(Blocked::Unknown { key, reason }) => {
                Some(("unknown", key, reason).into_pyobject(py)?.into_any().unbind())
            }
            Some(Blocked::Mismatch { key, recorded, landed }) => {
                Some(("mismatch", key, ids_to_py(&recorded), ids_to_py(&landed)).into_pyobject(py)?.into_any().unbind())
            }
        };
        Ok(Self {
            orphans: ids_to_py(&r.orphans),
            marked_landed: r.marked_landed,
            recommitted: r.recommitted,
            committed_keys: r.committed_keys,
            blocked,
            finished: r.finished,
        })
    }
}

#[pymethods]
impl PyRecoveryReport {
    fn __repr__(&self, py: Python<'_>) -> String {
        let blocked = self.blocked.as_ref().map_or_else(|| "None".to_owned(), |b| b.bind(py).to_string());
        format!(
            "RecoveryReport(orphans={:?}, marked_landed={:?}, recommitted={:?}, committed_keys={:?}, blocked={blocked}, finished={})",
            self.orphans,
            self.marked_landed,
            self.recommitted,
            self.committed_keys,
            if self.finished { "True" } else { "False" }
        )
    }
}

/// What `Driver.commit_pending` / `Driver.finish` did.
#[pyclass(name = "CommitReport", module = "sinkpoint", frozen, get_all)]
#[derive(Clone, Debug)]
pub(crate) struct PyCommitReport {
    /// The keys committed.
    committed_keys: Vec<u64>,
    /// Checkpoints without results marked committed without a target commit.
    committed_empty: usize,
}

impl From<CommitReport> for PyCommitReport {
    fn from(r: CommitReport) -> Self {
        Self { committed_keys: r.committed_keys, committed_empty: r.committed_empty }
    }
}

#[pymethods]
impl PyCommitReport {
    fn __repr__(&self) -> String {
        format!("CommitReport(committed_keys={:?}, committed_empty={})", self.committed_keys, self.committed_empty)
    }
}

/// What one `Driver.adopt` round did.
#[pyclass(name = "AdoptReport", module = "sinkpoint", frozen, get_all)]
#[derive(Clone)]
pub(crate) struct PyAdoptReport {
    /// Checkpoints sealed by workers, now Sealed in the driver's store.
    adopted: Vec<String>,
    /// Sealed checkpoints the store already held.
    already_adopted: usize,
    /// Checkpoints with staged parts and no seal yet.
    unsealed: usize,
    /// Write results of attempts that lost their seal, and of seals whose claim the round released (their
    /// checkpoint was force-aborted after adoption): delete their data files.
    cleanup: Vec<PyWriteResult>,
    /// (id, reason) of sealed checkpoints the store refused.
    refused: Vec<(String, String)>,
    /// Checkpoints whose claim the round released: the store no longer holds their seal (an operator
    /// force-aborted or restarted them), so workers see their inputs unprocessed again and the next seal of each
    /// is adopted as its next attempt. Their released seals' results are in `cleanup`.
    released: Vec<String>,
    /// (id, reason) of seals the round could not settle and left as they were, nothing written (the reason says
    /// what to do); the next round tries them again.
    held_back: Vec<(String, String)>,
    /// Object-store requests the round made.
    requests: u64,
}

impl From<AdoptReport> for PyAdoptReport {
    fn from(r: AdoptReport) -> Self {
        Self {
            adopted: ids_to_py(&r.adopted),
            already_adopted: r.already_adopted,
            unsealed: r.unsealed,
            cleanup: results_to_py(r.cleanup),
            refused: r.refused.into_iter().map(|x| (x.id.as_str().to_owned(), x.reason)).collect(),
            released: ids_to_py(&r.released),
            held_back: r.held_back.into_iter().map(|x| (x.id.as_str().to_owned(), x.reason)).collect(),
            requests: r.requests,
        }
    }
}

#[pymethods]
impl PyAdoptReport {
    fn __repr__(&self) -> String {
        format!(
            "AdoptReport(adopted={} checkpoints, already_adopted={}, unsealed={}, cleanup={} results, refused={:?}, \
             released={:?}, held_back={:?}, requests={})",
            self.adopted.len(),
            self.already_adopted,
            self.unsealed,
            self.cleanup.len(),
            self.refused,
            self.released,
            self.held_back,
            self.requests
        )
    }
}

/// Who sealed a checkpoint in shared staging.
#[pyclass(name = "SealedBy", module = "sinkpoint", frozen, get_all)]
#[derive(Clone)]
pub(crate) struct PySealedBy {
    /// The worker's name.
    worker: String,
    /// Its handle's session.
    session: u128,
    /// The attempt.
    attempt: u32,
}

impl From<SealedBy> for PySealedBy {
    fn from(s: SealedBy) -> Self {
        Self { worker: s.worker, session: s.session, attempt: s.attempt }
    }
}

#[pymethods]
impl PySealedBy {
    fn __repr__(&self) -> String {
        format!("SealedBy(worker={:?}, session={:#034x}, attempt={})", self.worker, self.session, self.attempt)
    }
}

/// One checkpoint in the driver's store.
#[pyclass(name = "CheckpointInfo", module = "sinkpoint", frozen, get_all)]
#[derive(Clone)]
pub(crate) struct PyCheckpointInfo {
    /// The id.
    id: String,
    /// "staged", "sealed", "committing", "commit_unknown", "committed" or "aborted".
    state: String,
    /// The commit key, for committing, commit_unknown and committed checkpoints (None: committed without one).
    key: Option<u64>,
    /// The current attempt.
    attempt: u32,
    /// The epoch that began it.
    epoch: u64,
    /// Its write result count.
    results: u32,
}

/// The snake_case name of a state (the library's name, `-` written `_`: `commit_unknown`), as Python reads it.
pub(crate) fn python_state_name(filter: StateFilter) -> String {
    filter.name().replace('-', "_")
}

/// The snake_case name of a state and its key.
pub(crate) fn state_name(state: &CheckpointState) -> (String, Option<u64>) {
    let key = match *state {
        CheckpointState::Committing { key } | CheckpointState::CommitUnknown { key } => Some(key),
        CheckpointState::Committed { key } => key,
        CheckpointState::Staged | CheckpointState::Sealed | CheckpointState::Aborted => None,
    };
    (python_state_name(StateFilter::from(*state)), key)
}

impl From<CheckpointInfo> for PyCheckpointInfo {
    fn from(c: CheckpointInfo) -> Self {
        let (state, key) = state_name(&c.state);
        Self { id: c.id.as_str().to_owned(), state, key, attempt: c.attempt.get(), epoch: c.epoch, results: c.results }
    }
}

#[pymethods]
impl PyCheckpointInfo {
    fn __repr__(&self) -> String {
        format!(
            "CheckpointInfo(id={:?}, state={:?}, key={:?}, attempt={}, epoch={})",
            self.id, self.state, self.key, self.attempt, self.epoch
        )
    }
}
