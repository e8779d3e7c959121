//! The exception hierarchy: one class per [`ErrorKind`], under `SinkpointError`, each carrying the core's
//! message (which already says what to do) and `kind`, the kind's snake_case name. `SealLost` is an
//! `IllegalTransition` that also names the winner and hands back the loser's own write results.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use sinkpoint::{Error, ErrorKind, TransitionError};

use crate::values::PyWriteResult;

create_exception!(_sinkpoint, SinkpointError, PyException, "Base of every sinkpoint error; `kind` names it.");
create_exception!(_sinkpoint, InvalidInput, SinkpointError, "Malformed or over a limit: fix it. Nothing written.");
create_exception!(_sinkpoint, IllegalTransition, SinkpointError, "Does not fit the state. Nothing written.");
create_exception!(_sinkpoint, SealLost, IllegalTransition, "Another attempt sealed it first: clean up `results`.");
create_exception!(_sinkpoint, WrongStore, SinkpointError, "Another job's or target's store, or its state was lost.");
create_exception!(_sinkpoint, Fenced, SinkpointError, "A newer writer took over: stop this one.");
create_exception!(_sinkpoint, Corrupt, SinkpointError, "Stored bytes are damaged: report; restore from the mirror.");
create_exception!(_sinkpoint, Poisoned, SinkpointError, "A write or fsync failed: drop the handle and reopen.");
create_exception!(_sinkpoint, AlreadyOpen, SinkpointError, "Another writer holds the store's file.");
create_exception!(_sinkpoint, IoError, SinkpointError, "Transient I/O or object-store failure: retry.");
create_exception!(_sinkpoint, TargetError, SinkpointError, "The target failed or its answer is unknown: retry later.");
create_exception!(_sinkpoint, CommitMismatch, SinkpointError, "The target holds our key with other checkpoints.");
create_exception!(_sinkpoint, Bug, SinkpointError, "An internal invariant broke: report it.");

/// The snake_case name of `kind` (the exception's `kind` attribute).
pub(crate) fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidInput => "invalid_input",
        ErrorKind::IllegalTransition => "illegal_transition",
        ErrorKind::WrongStore => "wrong_store",
        ErrorKind::Fenced => "fenced",
        ErrorKind::Corrupt => "corrupt",
        ErrorKind::Poisoned => "poisoned",
        ErrorKind::AlreadyOpen => "already_open",
        ErrorKind::Io => "io",
        ErrorKind::Target => "target",
        ErrorKind::CommitMismatch => "commit_mismatch",
        // ErrorKind is non_exhaustive: a kind this binding does not know yet is reported as what it is not
        // prepared for, with the core's message intact.
        _ => "bug",
    }
}

/// The Python exception for a core error.
pub(crate) fn to_py(error: Error) -> PyErr {
    let message = error.to_string();
    let kind = error.kind();
    let err = match (kind, error.transition()) {
        (_, Some(TransitionError::SealLost { .. })) => SealLost::new_err(message),
        (ErrorKind::InvalidInput, _) => InvalidInput::new_err(message),
        (ErrorKind::IllegalTransition, _) => IllegalTransition::new_err(message),
        (ErrorKind::WrongStore, _) => WrongStore::new_err(message),
        (ErrorKind::Fenced, _) => Fenced::new_err(message),
        (ErrorKind::Corrupt, _) => Corrupt::new_err(message),
        (ErrorKind::Poisoned, _) => Poisoned::new_err(message),
        (ErrorKind::AlreadyOpen, _) => AlreadyOpen::new_err(message),
        (ErrorKind::Io, _) => IoError::new_err(message),
        (ErrorKind::Target, _) => TargetError::new_err(message),
        (ErrorKind::CommitMismatch, _) => CommitMismatch::new_err(message),
        _ => Bug::new_err(message),
    };
    Python::attach(|py| {
        let value = err.value(py);
        // Setting attributes on a fresh exception instance cannot fail short of memory exhaustion; the
        // exception is still the right class and message without them.
        let _ = value.setattr("kind", kind_name(kind));
        if let Some(TransitionError::SealLost { id, winner, results }) = error.transition() {
            let _ = value.setattr("id", id.as_str());
            let _ = value.setattr("winner", winner.as_str());
            let results: Vec<PyWriteResult> = results.iter().cloned().map(PyWriteResult::from).collect();
            let _ = value.setattr("results", results);
        }
    });
    err
}

/// `InvalidInput` for a bad argument found in the binding itself (before the core sees it).
pub(crate) fn invalid(message: impl Into<String>) -> PyErr {
    to_py(Error::invalid_input(message))
}

/// Registers the classes on the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SinkpointError", py.get_type::<SinkpointError>())?;
    m.add("InvalidInput", py.get_type::<InvalidInput>())?;
    m.add("IllegalTransition", py.get_type::<IllegalTransition>())?;
    m.add("SealLost", py.get_type::<SealLost>())?;
    m.add("WrongStore", py.get_type::<WrongStore>())?;
    m.add("Fenced", py.get_type::<Fenced>())?;
    m.add("Corrupt", py.get_type::<Corrupt>())?;
    m.add("Poisoned", py.get_type::<Poisoned>())?;
    m.add("AlreadyOpen", py.get_type::<AlreadyOpen>())?;
    m.add("IoError", py.get_type::<IoError>())?;
    m.add("TargetError", py.get_type::<TargetError>())?;
    m.add("CommitMismatch", py.get_type::<CommitMismatch>())?;
    m.add("Bug", py.get_type::<Bug>())?;
    Ok(())
}
