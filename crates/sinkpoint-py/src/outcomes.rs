//! The typed answers of a target written in Python: `CommitOutcome` to a commit, `ProbeOutcome` to a probe. Each is
//! a frozen value made by a named constructor (`CommitOutcome.committed()`, `ProbeOutcome.unknown(reason)`, ...)
//! and holds the core's outcome, so the bridge in `target` reads it without interpreting anything. The string tags
//! (`"committed"`, `("unknown", reason)`, ...) stay accepted beside them as the older form.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use pyo3::prelude::*;
use sinkpoint::{CheckpointId, CommitOutcome, ProbeOutcome};

use crate::errors::to_py;

/// A Python `repr` of a string, for the classes' own `repr`.
fn py_repr(py: Python<'_>, text: &str) -> PyResult<String> {
    Ok(text.into_pyobject(py)?.repr()?.to_string())
}

/// The answer of a Python target to a commit.
#[pyclass(name = "CommitOutcome", module = "sinkpoint", frozen, eq)]
#[derive(Clone, PartialEq)]
pub(crate) struct PyCommitOutcome(pub(crate) CommitOutcome);

#[pymethods]
impl PyCommitOutcome {
    /// The commit landed.
    #[staticmethod]
    fn committed() -> Self {
        Self(CommitOutcome::Committed)
    }

    /// The commit did not land and never will (a refused precondition, a validation error); `reason` says why.
    #[staticmethod]
    fn not_landed(reason: String) -> Self {
        Self(CommitOutcome::NotLanded { reason })
    }

    /// The commit may or may not have landed (a timeout, a lost response); only a probe can tell.
    #[staticmethod]
    fn unknown(reason: String) -> Self {
        Self(CommitOutcome::Unknown { reason })
    }

    /// `"committed"`, `"not_landed"` or `"unknown"`.
    #[getter]
    fn kind(&self) -> &'static str {
        match &self.0 {
            CommitOutcome::Committed => "committed",
            CommitOutcome::NotLanded { .. } => "not_landed",
            CommitOutcome::Unknown { .. } => "unknown",
        }
    }

    /// Why it did not land or is unknown; `None` for a commit that landed.
    #[getter]
    fn reason(&self) -> Option<&str> {
        match &self.0 {
            CommitOutcome::Committed => None,
            CommitOutcome::NotLanded { reason } | CommitOutcome::Unknown { reason } => Some(reason),
        }
    }

    fn __hash__(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        (self.kind(), self.reason()).hash(&mut hasher);
        hasher.finish()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(match self.reason() {
            None => format!("CommitOutcome.{}()", self.kind()),
            Some(reason) => format!("CommitOutcome.{}({})", self.kind(), py_repr(py, reason)?),
        })
    }
}

/// The answer of a Python target to a probe of one key.
#[pyclass(name = "ProbeOutcome", module = "sinkpoint", frozen, eq)]
#[derive(Clone, PartialEq)]
pub(crate) struct PyProbeOutcome(pub(crate) ProbeOutcome);

#[pymethods]
impl PyProbeOutcome {
    /// A commit under the key is in the table; `ids` are the checkpoints it recorded (in any order), or `None`
    /// for a target that keeps only a watermark. A malformed id raises `InvalidInputError`.
    #[staticmethod]
    #[pyo3(signature = (ids = None))]
    fn committed(ids: Option<Vec<String>>) -> PyResult<Self> {
        let ids = ids
            .map(|ids| ids.into_iter().map(CheckpointId::new).collect::<Result<Vec<_>, _>>())
            .transpose()
            .map_err(to_py)?;
        Ok(Self(ProbeOutcome::Committed { ids }))
    }

    /// No commit under the key landed, and none can land later.
    #[staticmethod]
    fn not_committed() -> Self {
        Self(ProbeOutcome::NotCommitted)
    }

    /// The target cannot tell (unreachable, or its history was expired past the key); `reason` says why.
    #[staticmethod]
    fn unknown(reason: String) -> Self {
        Self(ProbeOutcome::Unknown { reason })
    }

    /// `"committed"`, `"not_committed"` or `"unknown"`.
    #[getter]
    fn kind(&self) -> &'static str {
        match &self.0 {
            ProbeOutcome::Committed { .. } => "committed",
            ProbeOutcome::NotCommitted => "not_committed",
            ProbeOutcome::Unknown { .. } => "unknown",
        }
    }

    /// The checkpoints a landed commit recorded; `None` otherwise, or when the target keeps no ids.
    #[getter]
    fn ids(&self) -> Option<Vec<&str>> {
        match &self.0 {
            ProbeOutcome::Committed { ids: Some(ids) } => Some(ids.iter().map(CheckpointId::as_str).collect()),
            _ => None,
        }
    }

    /// Why the target cannot tell; `None` otherwise.
    #[getter]
    fn reason(&self) -> Option<&str> {
        match &self.0 {
            ProbeOutcome::Unknown { reason } => Some(reason),
            _ => None,
        }
    }

    fn __hash__(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        (self.kind(), self.ids(), self.reason()).hash(&mut hasher);
        hasher.finish()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(match &self.0 {
            ProbeOutcome::Committed { ids: None } => "ProbeOutcome.committed()".to_owned(),
            ProbeOutcome::Committed { ids: Some(ids) } => {
                let ids = ids.iter().map(|id| py_repr(py, id.as_str())).collect::<PyResult<Vec<_>>>()?;
                format!("ProbeOutcome.committed([{}])", ids.join(", "))
            }
            ProbeOutcome::NotCommitted => "ProbeOutcome.not_committed()".to_owned(),
            ProbeOutcome::Unknown { reason } => format!("ProbeOutcome.unknown({})", py_repr(py, reason)?),
        })
    }
}
