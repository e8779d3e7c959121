//! The exception hierarchy: one class per [`ErrorKind`], under `SinkpointError`, each carrying the core's
//! message (which already says what to do) and `kind`, the kind's snake_case name (a class attribute, and set on
//! each raised instance). `SealLostError` is an `IllegalTransitionError` that also names the winner and hands
//! back the loser's own write results. The classes are created in the module `sinkpoint` (their `__module__`),
//! where users import and pickle them from; `sinkpoint/__init__.py` maps the older names onto them.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use sinkpoint::{Error, ErrorKind, TransitionError};

use crate::values::PyWriteResult;

create_exception!(sinkpoint, SinkpointError, PyException, "Base of every sinkpoint error; `kind` names its kind.");
create_exception!(
    sinkpoint,
    InvalidInputError,
    SinkpointError,
    "Malformed or over a limit: fix the input; retrying fails the same way. Nothing was written."
);
create_exception!(
    sinkpoint,
    IllegalTransitionError,
    SinkpointError,
    "The call does not fit the state of the checkpoint, the commit or the handle (a closed Driver). Nothing was written."
);
create_exception!(
    sinkpoint,
    SealLostError,
    IllegalTransitionError,
    "Another attempt sealed the checkpoint first: `winner` names it; delete the files of `results`, this attempt's own."
);
create_exception!(
    sinkpoint,
    WrongStoreError,
    SinkpointError,
    "The store belongs to another job or target, or its state was lost while the table has its commits."
);
create_exception!(sinkpoint, FencedError, SinkpointError, "A newer writer took over: stop this one.");
create_exception!(
    sinkpoint,
    CorruptError,
    SinkpointError,
    "Stored bytes are damaged: report it; restore from the mirror."
);
create_exception!(
    sinkpoint,
    PoisonedError,
    SinkpointError,
    "A write or fsync failed: drop the handle, reopen and recover."
);
create_exception!(
    sinkpoint,
    AlreadyOpenError,
    SinkpointError,
    "Another writer holds the store's file: stop it or give this one its own file."
);
create_exception!(
    sinkpoint,
    TransientIOError,
    SinkpointError,
    "A transient I/O or object-store failure: retrying may succeed."
);
create_exception!(
    sinkpoint,
    TargetError,
    SinkpointError,
    "The target failed or its answer is unknown: retry later (an unknown commit is re-probed)."
);
create_exception!(
    sinkpoint,
    CommitMismatchError,
    SinkpointError,
    "The target holds our key with other checkpoints: an operator must resolve it."
);
create_exception!(
    sinkpoint,
    InternalError,
    SinkpointError,
    "An internal invariant broke: a bug in sinkpoint; report it."
);

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
        (_, Some(TransitionError::SealLost { .. })) => SealLostError::new_err(message),
        (ErrorKind::InvalidInput, _) => InvalidInputError::new_err(message),
        (ErrorKind::IllegalTransition, _) => IllegalTransitionError::new_err(message),
        (ErrorKind::WrongStore, _) => WrongStoreError::new_err(message),
        (ErrorKind::Fenced, _) => FencedError::new_err(message),
        (ErrorKind::Corrupt, _) => CorruptError::new_err(message),
        (ErrorKind::Poisoned, _) => PoisonedError::new_err(message),
        (ErrorKind::AlreadyOpen, _) => AlreadyOpenError::new_err(message),
        (ErrorKind::Io, _) => TransientIOError::new_err(message),
        (ErrorKind::Target, _) => TargetError::new_err(message),
        (ErrorKind::CommitMismatch, _) => CommitMismatchError::new_err(message),
        _ => InternalError::new_err(message),
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

/// `InvalidInputError` for a bad argument found in the binding itself (before the core sees it).
pub(crate) fn invalid(message: impl Into<String>) -> PyErr {
    to_py(Error::invalid_input(message))
}

/// `IllegalTransitionError` for a call on a handle that is closed for good (a closed `Driver`).
pub(crate) fn closed(message: impl Into<String>) -> PyErr {
    let err = IllegalTransitionError::new_err(message.into());
    Python::attach(|py| {
        // As in `to_py`: setting an attribute on a fresh exception cannot fail short of memory exhaustion.
        let _ = err.value(py).setattr("kind", kind_name(ErrorKind::IllegalTransition));
    });
    err
}

/// Registers the classes on the module, each with its `kind` as a class attribute (so a handler can read it from
/// the class too, and an instance raised from Python has it).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SinkpointError", py.get_type::<SinkpointError>())?;
    let classes = [
        (py.get_type::<InvalidInputError>(), ErrorKind::InvalidInput),
        (py.get_type::<IllegalTransitionError>(), ErrorKind::IllegalTransition),
        (py.get_type::<SealLostError>(), ErrorKind::IllegalTransition),
        (py.get_type::<WrongStoreError>(), ErrorKind::WrongStore),
        (py.get_type::<FencedError>(), ErrorKind::Fenced),
        (py.get_type::<CorruptError>(), ErrorKind::Corrupt),
        (py.get_type::<PoisonedError>(), ErrorKind::Poisoned),
        (py.get_type::<AlreadyOpenError>(), ErrorKind::AlreadyOpen),
        (py.get_type::<TransientIOError>(), ErrorKind::Io),
        (py.get_type::<TargetError>(), ErrorKind::Target),
        (py.get_type::<CommitMismatchError>(), ErrorKind::CommitMismatch),
        (py.get_type::<InternalError>(), ErrorKind::Bug),
    ];
    for (class, kind) in classes {
        class.setattr("kind", kind_name(kind))?;
        m.add(class.name()?, class)?;
    }
    Ok(())
}
