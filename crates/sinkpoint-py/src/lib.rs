//! sinkpoint for Python: the compiled half of the `sinkpoint` package (`sinkpoint._sinkpoint`).
//!
//! - `staging`: `SharedStaging` and `Worker`, the worker side of a job whose tasks run on many machines.
//! - `driver`: `Driver`, the committer side (store, mirror, target, adoption, recovery, operator hatches).
//! - `target`: the reference `DirTable`, and the bridge that lets the Rust committer drive a target written
//!   in Python.
//! - `lance_target`: `LanceTarget`, the Rust Lance adapter (`sinkpoint-lance`) compiled in and driven natively.
//! - `delta_target`: `DeltaTarget`, the Rust Delta adapter (`sinkpoint-delta`) compiled in and driven natively.
//! - `collect`: `Driver.garbage` and `Driver.collect_data_files`, the orphan data-file collector over a Python
//!   object that knows the table's files (`sinkpoint.lance.LanceDataFiles` is one).
//! - `outcomes`: `CommitOutcome` and `ProbeOutcome`, the typed answers of a target written in Python.
//! - `errors`: one exception class per `ErrorKind`, created in the module `sinkpoint`.
//! - `args`: the checks of paths, URIs and option mappings, and of the local paths sinkpoint writes to.
//!
//! Every blocking call runs on one tokio runtime per process with the GIL released (`runtime`). Handles
//! are configuration until first used: they pickle as it and reopen lazily where they are unpickled.
//!
//! Why the Lance commit is the Rust adapter compiled into this wheel and not pylance: see
//! `docs/decisions/0032-the-wheel-commits-through-the-rust-lance-target.md`.

#![forbid(unsafe_code)]

mod args;
mod collect;
mod delta_target;
mod driver;
mod errors;
mod lance_target;
mod objects;
mod outcomes;
mod runtime;
mod staging;
mod target;
mod values;

use pyo3::prelude::*;

/// The deterministic checkpoint id of a one-input checkpoint: its seal is the key's claim (one request).
#[pyfunction]
fn checkpoint_id_for_key(key: &Bound<'_, PyAny>) -> PyResult<String> {
    let key = values::key_arg(key)?;
    Ok(sinkpoint::CheckpointId::for_key(&key).as_str().to_owned())
}

/// The deterministic checkpoint id of a checkpoint of exactly `keys` (a task's inputs, in any order); one key gives
/// `checkpoint_id_for_key`'s.
#[pyfunction]
fn checkpoint_id_for_keys(keys: Vec<Bound<'_, PyAny>>) -> PyResult<String> {
    let keys: Vec<Vec<u8>> = keys.iter().map(values::key_arg).collect::<PyResult<_>>()?;
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    Ok(sinkpoint::CheckpointId::for_keys(&keys).as_str().to_owned())
}

#[pymodule]
fn _sinkpoint(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("CHECKPOINT_ID_BYTES_MAX", sinkpoint::limits::CHECKPOINT_ID_BYTES_MAX)?;
    m.add("JOB_ID_BYTES_MAX", sinkpoint::limits::JOB_ID_BYTES_MAX)?;
    m.add("SOURCE_KEY_BYTES_MAX", sinkpoint::limits::SOURCE_KEY_BYTES_MAX)?;
    m.add("WRITE_RESULT_BYTES_MAX", sinkpoint::limits::WRITE_RESULT_BYTES_MAX)?;
    m.add("WORKER_NAME_BYTES_MAX", sinkpoint::limits::WORKER_NAME_BYTES_MAX)?;
    m.add("ADOPT_EXPECTED_IDS_MAX", sinkpoint::limits::ADOPT_EXPECTED_IDS_MAX)?;
    m.add("LANCE_FRAGMENT_JSON", values::LANCE_FRAGMENT_JSON)?;
    errors::register(m)?;
    m.add_class::<values::PyWriteResult>()?;
    m.add_class::<values::PyRecoveryReport>()?;
    m.add_class::<values::PyCommitReport>()?;
    m.add_class::<values::PyAdoptReport>()?;
    m.add_class::<values::PySealedBy>()?;
    m.add_class::<values::PyCheckpointInfo>()?;
    m.add_class::<target::PyTargetCommit>()?;
    m.add_class::<outcomes::PyCommitOutcome>()?;
    m.add_class::<outcomes::PyProbeOutcome>()?;
    m.add_class::<target::PyDirTable>()?;
    m.add_class::<lance_target::PyLanceTarget>()?;
    m.add_class::<lance_target::PyCleanupStats>()?;
    m.add_class::<delta_target::PyDeltaTarget>()?;
    m.add_class::<staging::PySharedStaging>()?;
    m.add_class::<staging::PyWorker>()?;
    m.add_class::<driver::PyDriver>()?;
    m.add_class::<collect::PyGarbageEntry>()?;
    m.add_class::<collect::PyOrphanFile>()?;
    m.add_class::<collect::PyCollectReport>()?;
    m.add_function(wrap_pyfunction!(checkpoint_id_for_key, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint_id_for_keys, m)?)?;
    Ok(())
}
