//! The orphan data-file collector from Python: `Driver.garbage` (the store's garbage ledger) and
//! `Driver.collect_data_files`, which runs the core's [`collect_data_files`] over a Python object that knows the
//! table's data files (`sinkpoint.lance.LanceDataFiles` is one). The object is adapted to the core's
//! [`DataFiles`] trait as a Python target is to `Target` (`target`): each call re-attaches the GIL, which the
//! collector as a whole runs without.
//!
//! A Python exception from the object becomes a sinkpoint error naming the method and the exception:
//! `TransientIOError` (transient: retry the collection), or `InvalidInputError` when it says the input is bad
//! (`ValueError`, `TypeError`, `LookupError`, `AttributeError`, `NotImplementedError`, or an answer of the wrong
//! shape). The original exception is the raised error's `__cause__`.

use std::collections::BTreeSet;
use std::sync::Mutex;

use async_trait::async_trait;
use pyo3::exceptions::{PyAttributeError, PyLookupError, PyNotImplementedError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use sinkpoint::gc::{CollectReport, DataFiles, FileStat, GarbageEntry, OrphanFile, Verdict};
use sinkpoint::limits::DATA_FILE_GRACE_MS_DEFAULT;
use sinkpoint::{Error, WriteResult};

use crate::errors::invalid;
use crate::values::{PyWriteResult, format_name};

/// The default grace period of `collect_data_files`, in seconds: the core's (a day).
pub(crate) const DATA_FILE_GRACE_S_DEFAULT: f64 = DATA_FILE_GRACE_MS_DEFAULT as f64 / 1000.0;

/// The most characters of a bad answer an error message shows.
const ANSWER_SHOWN_CHARS_MAX: usize = 200;

/// What a data files object must have.
const METHODS: [&str; 4] = ["files_of", "referenced", "stat", "delete"];

/// `grace_s` seconds as the core's milliseconds; InvalidInputError for a negative or non-finite value.
pub(crate) fn grace_ms(grace_s: f64) -> PyResult<u64> {
    if !grace_s.is_finite() || grace_s < 0.0 {
        return Err(invalid(format!("grace_s must be a finite number of seconds >= 0, not {grace_s}")));
    }
    let ms = (grace_s * 1000.0).round();
    // `as` saturates; the comparison only makes that explicit.
    Ok(if ms >= u64::MAX as f64 { u64::MAX } else { ms as u64 })
}

/// The verdict names, in the core's order (what `CollectReport.tally` accepts).
const VERDICTS: [&str; 6] = {
    let mut names = [""; 6];
    let mut i = 0;
    while i < names.len() {
        names[i] = Verdict::ALL[i].name();
        i += 1;
    }
    names
};

/// A Python object driven as the core's [`DataFiles`].
pub(crate) struct PyDataFiles {
    object: Py<PyAny>,
    /// The first exception the object raised, with the message of the sinkpoint error it became: the cause of
    /// the error raised at the end when that error is this one.
    raised: Mutex<Option<(String, PyErr)>>,
}

impl PyDataFiles {
    /// The adapter over `object`; InvalidInputError when it lacks one of the four methods.
    pub(crate) fn new(object: &Bound<'_, PyAny>) -> PyResult<Self> {
        for method in METHODS {
            if !object.hasattr(method)? {
                let type_name = object.get_type().name()?;
                return Err(invalid(format!(
                    "the data files object {type_name} has no {method}(): it needs files_of(format, data), \
                     referenced(), stat(file) and delete(file) (sinkpoint.lance.LanceDataFiles is one)"
                )));
            }
        }
        Ok(Self { object: object.clone().unbind(), raised: Mutex::new(None) })
    }

    /// The error for an exception `err` that `call` (the method and its argument, for the message) raised.
    fn raised(&self, py: Python<'_>, call: &str, err: PyErr) -> Error {
        let bad_input = [
            err.is_instance_of::<PyValueError>(py),
            err.is_instance_of::<PyTypeError>(py),
            err.is_instance_of::<PyLookupError>(py),
            err.is_instance_of::<PyAttributeError>(py),
            err.is_instance_of::<PyNotImplementedError>(py),
        ]
        .contains(&true);
        let error = if bad_input {
            Error::invalid_input(format!(
                "the data files object's {call} raised {err}: a write result or file this table cannot have \
                 written, or an object that does not fit this table (fix it; retrying fails the same way)"
            ))
        } else {
            Error::from(std::io::Error::other(format!(
                "the data files object's {call} raised {err} (retry the collection: what was deleted before \
                 stays deleted and its ledger entries are forgotten)"
            )))
        };
        let mut slot = self.raised.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some((error.to_string(), err));
        }
        error
    }

    /// The error for an answer of the wrong shape.
    fn bad_answer(call: &str, answer: &Bound<'_, PyAny>, expected: &str) -> Error {
        let type_name = answer.get_type().name().map_or_else(|_| "?".to_owned(), |n| n.to_string());
        let mut shown = answer.to_string();
        if shown.chars().count() > ANSWER_SHOWN_CHARS_MAX {
            shown = shown.chars().take(ANSWER_SHOWN_CHARS_MAX).chain("...".chars()).collect();
        }
        Error::invalid_input(format!(
            "the data files object's {call} answered a {type_name} ({shown}): expected {expected}"
        ))
    }

    /// `error` as the Python exception to raise, with the object's own exception as its `__cause__` when that
    /// is what it came from.
    pub(crate) fn to_py(&self, py: Python<'_>, error: Error) -> PyErr {
        let message = error.to_string();
        let err = crate::errors::to_py(error);
        let cause = self.raised.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some((raised_message, cause)) = cause
            && raised_message == message
        {
            err.set_cause(py, Some(cause));
        }
        err
    }

    /// Every string an iterable answer holds (a str itself is refused: it would be read as its characters).
    fn strings(
        &self,
        py: Python<'_>,
        call: &str,
        answer: &Bound<'_, PyAny>,
        expected: &str,
    ) -> sinkpoint::Result<Vec<String>> {
        if answer.cast::<PyString>().is_ok() {
            return Err(Self::bad_answer(call, answer, expected));
        }
        let Ok(iter) = answer.try_iter() else { return Err(Self::bad_answer(call, answer, expected)) };
        let mut out = Vec::new();
        for item in iter {
            // An iterator (a generator) may raise as it goes: the same as the call raising.
            let item = item.map_err(|e| self.raised(py, call, e))?;
            match item.extract::<String>() {
                Ok(s) => out.push(s),
                Err(_) => return Err(Self::bad_answer(call, &item, expected)),
            }
        }
        Ok(out)
    }
}

/// A `stat` answer: None, or `(bytes, modified_ms)` with non-negative ints (a float `modified_ms` is floored).
fn stat_answer(call: &str, answer: &Bound<'_, PyAny>) -> sinkpoint::Result<Option<FileStat>> {
    const EXPECTED: &str = "None or a tuple (bytes: int, modified_ms: int)";
    if answer.is_none() {
        return Ok(None);
    }
    let bad = || PyDataFiles::bad_answer(call, answer, EXPECTED);
    let tuple = answer.cast::<PyTuple>().map_err(|_| bad())?;
    if tuple.len() != 2 {
        return Err(bad());
    }
    let bytes: u64 = tuple.get_item(0).and_then(|b| b.extract()).map_err(|_| bad())?;
    let modified = tuple.get_item(1).map_err(|_| bad())?;
    let modified_ms = match modified.extract::<u64>() {
        Ok(ms) => ms,
        Err(_) => match modified.extract::<f64>() {
            Ok(ms) if ms.is_finite() && ms >= 0.0 => ms.floor() as u64,
            _ => return Err(bad()),
        },
    };
    Ok(Some(FileStat { bytes, modified_ms }))
}

#[async_trait]
impl DataFiles for PyDataFiles {
    fn files_of(&self, result: &WriteResult) -> sinkpoint::Result<Vec<String>> {
        let format = format_name(result.format());
        let call = format!("files_of({format:?}, <{} bytes>)", result.bytes().len());
        Python::attach(|py| {
            let data = PyBytes::new(py, result.bytes());
            let answer = self.object.bind(py).call_method1("files_of", (format.as_str(), data));
            match answer {
                Ok(a) => self.strings(py, &call, &a, "a list of file names (str)"),
                Err(e) => Err(self.raised(py, &call, e)),
            }
        })
    }

    async fn referenced(&self) -> sinkpoint::Result<BTreeSet<String>> {
        let call = "referenced()";
        Python::attach(|py| match self.object.bind(py).call_method0("referenced") {
            Ok(a) => Ok(self.strings(py, call, &a, "an iterable of file names (str)")?.into_iter().collect()),
            Err(e) => Err(self.raised(py, call, e)),
        })
    }

    async fn stat(&self, file: &str) -> sinkpoint::Result<Option<FileStat>> {
        let call = format!("stat({file:?})");
        Python::attach(|py| match self.object.bind(py).call_method1("stat", (file,)) {
            Ok(a) => stat_answer(&call, &a),
            Err(e) => Err(self.raised(py, &call, e)),
        })
    }

    async fn delete(&self, file: &str) -> sinkpoint::Result<()> {
        let call = format!("delete({file:?})");
        Python::attach(|py| match self.object.bind(py).call_method1("delete", (file,)) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.raised(py, &call, e)),
        })
    }
}

/// One entry of the store's garbage ledger: a write result of a dropped attempt (a restart, an abort, a
/// force_abort, or the loser of a seal found by adopt), whose data files `collect_data_files` deletes.
#[pyclass(name = "GarbageEntry", module = "sinkpoint", frozen, get_all)]
#[derive(Clone)]
pub(crate) struct PyGarbageEntry {
    /// The sequence number of the store record that dropped the result.
    seq: u64,
    /// The result's index among that record's.
    index: u32,
    /// The checkpoint whose attempt it was.
    id: String,
    /// The dropped attempt.
    attempt: u32,
    /// The write result (`format`, `data`).
    result: PyWriteResult,
}

impl From<GarbageEntry> for PyGarbageEntry {
    fn from(e: GarbageEntry) -> Self {
        Self {
            seq: e.at.seq,
            index: e.at.index,
            id: e.id.as_str().to_owned(),
            attempt: e.attempt.get(),
            result: e.result.into(),
        }
    }
}

#[pymethods]
impl PyGarbageEntry {
    fn __repr__(&self) -> String {
        format!(
            "GarbageEntry(seq={}, index={}, id={:?}, attempt={}, result=WriteResult({:?}, <{} bytes>))",
            self.seq,
            self.index,
            self.id,
            self.attempt,
            format_name(self.result.inner.format()),
            self.result.inner.bytes().len()
        )
    }
}

/// One file of one ledger entry, and what the collector decided about it.
#[pyclass(name = "OrphanFile", module = "sinkpoint", frozen, get_all)]
#[derive(Clone)]
pub(crate) struct PyOrphanFile {
    /// The file, as the data files object's `files_of` named it.
    file: String,
    /// "deleted", "due" (a dry run would delete it), "young" (within the grace period: kept, entry kept),
    /// "gone" (already), "live" (a live checkpoint names it: kept) or "referenced" (the table holds it: kept).
    verdict: &'static str,
    /// The checkpoint whose dropped attempt wrote it.
    id: String,
    /// That attempt.
    attempt: u32,
    /// Its size, when it exists.
    bytes: Option<u64>,
    /// Its ledger entry's `seq`.
    seq: u64,
    /// Its ledger entry's `index`.
    index: u32,
}

impl From<OrphanFile> for PyOrphanFile {
    fn from(f: OrphanFile) -> Self {
        Self {
            file: f.file,
            verdict: Verdict::name(f.verdict),
            id: f.id.as_str().to_owned(),
            attempt: f.attempt.get(),
            bytes: f.bytes,
            seq: f.entry.seq,
            index: f.entry.index,
        }
    }
}

#[pymethods]
impl PyOrphanFile {
    fn __repr__(&self) -> String {
        let bytes = self.bytes.map_or_else(|| "None".to_owned(), |b| b.to_string());
        format!(
            "OrphanFile({:?}, verdict={:?}, id={:?}, attempt={}, bytes={bytes}, seq={}, index={})",
            self.file, self.verdict, self.id, self.attempt, self.seq, self.index
        )
    }
}

/// What `Driver.collect_data_files` found and did.
#[pyclass(name = "CollectReport", module = "sinkpoint", frozen, get_all)]
pub(crate) struct PyCollectReport {
    /// Every file of every ledger entry read, in ledger order.
    files: Vec<PyOrphanFile>,
    /// Ledger entries read.
    entries: u64,
    /// Ledger entries removed (0 in a dry run).
    forgotten: u64,
}

impl From<CollectReport> for PyCollectReport {
    fn from(r: CollectReport) -> Self {
        Self {
            files: r.files.into_iter().map(PyOrphanFile::from).collect(),
            entries: r.entries,
            forgotten: r.forgotten,
        }
    }
}

impl PyCollectReport {
    fn count(&self, verdict: &str) -> (u64, u64) {
        self.files.iter().filter(|f| f.verdict == verdict).fold((0, 0), |(n, b), f| (n + 1, b + f.bytes.unwrap_or(0)))
    }
}

#[pymethods]
impl PyCollectReport {
    /// How many files got `verdict` ("deleted", "due", "young", "gone", "live", "referenced"), and their bytes.
    fn tally(&self, verdict: &str) -> PyResult<(u64, u64)> {
        if !VERDICTS.contains(&verdict) {
            return Err(invalid(format!("unknown verdict {verdict:?}: one of {VERDICTS:?}")));
        }
        Ok(self.count(verdict))
    }

    fn __repr__(&self) -> String {
        let tallies: Vec<String> = VERDICTS
            .iter()
            .map(|v| (v, self.count(v)))
            .filter(|(_, (n, _))| *n > 0)
            .map(|(v, (n, b))| format!("{v}={n} ({b} bytes)"))
            .collect();
        format!(
            "CollectReport(entries={}, forgotten={}, files={}{}{})",
            self.entries,
            self.forgotten,
            self.files.len(),
            if tallies.is_empty() { "" } else { ": " },
            tallies.join(", ")
        )
    }
}
