//! `Driver`: the committer side of a job, on the driver. It opens the store (a local redb file, mirrored to
//! an object store if given) lazily, on first use; opening claims a new epoch, which fences every older driver of
//! the job that shares its store file or its mirror (two drivers with separate stores and no mirror are not
//! fenced). Each call runs the core's committer against the target. Once closed, the handle stays closed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use sinkpoint::commit::CrashHook;
use sinkpoint::gc::{CollectSettings, GarbageRef, collect_data_files};
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::shared::Inbox;
use sinkpoint::{Committer, JobId, Resolution, StateFilter, Store, SystemClock, Target, TargetIdentity};

use crate::args::{check_store_path, options_arg, path_arg};
use crate::collect::{DATA_FILE_GRACE_S_DEFAULT, PyCollectReport, PyDataFiles, PyGarbageEntry, grace_ms};
use crate::delta_target::PyDeltaTarget;
use crate::errors::{closed, invalid, to_py};
use crate::lance_target::PyLanceTarget;
use crate::runtime::block_on;
use crate::staging::PySharedStaging;
use crate::target::{PyDirTable, PyTarget};
use crate::values::{
    PyAdoptReport, PyCheckpointInfo, PyCommitReport, PyRecoveryReport, PyWriteResult, Reduced, id_arg, key_arg,
    python_state_name, results_to_py,
};

// `collect_data_files`'s text signature spells this default.
const _: () = assert!(DATA_FILE_GRACE_S_DEFAULT == 86_400.0);

/// The exit code of a process stopped at a crash point (`crash_at`), as the Rust example jobs use.
const CRASH_EXIT_CODE: i32 = 86;

/// A driver's constructor arguments, in order: what it pickles as.
type DriverArgs = (
    String,
    String,
    Py<PyAny>,
    String,
    Option<String>,
    HashMap<String, String>,
    Option<Py<PySharedStaging>>,
    Option<String>,
);

/// Where a driver handle is: not opened yet, open, or closed for good.
enum Handle {
    /// Configuration only; the first call opens the store.
    Unopened,
    /// The opened store and target.
    Open(Arc<Opened>),
    /// `close()` (or the end of its `with` block) ran: every later call raises.
    Closed,
}

/// What an opened driver holds.
struct Opened {
    store: Store,
    target: Arc<dyn Target>,
    inbox: Option<Inbox>,
}

/// The committer side of a job: a store, a target, and optionally the shared staging whose sealed
/// checkpoints it adopts.
#[pyclass(name = "Driver", module = "sinkpoint", frozen)]
pub(crate) struct PyDriver {
    path: String,
    job: String,
    target: Py<PyAny>,
    target_identity: String,
    mirror: Option<String>,
    mirror_options: HashMap<String, String>,
    staging: Option<Py<PySharedStaging>>,
    crash_at: Option<String>,
    handle: Mutex<Handle>,
}

/// The identity a store records for `target`: the given one, else a DirTable's `file://` URL, a LanceTarget's
/// `lance:<uri>`, a DeltaTarget's `delta:<uri>`, or a Python target's own `identity` attribute.
fn identity_of(target: &Bound<'_, PyAny>, given: Option<String>) -> PyResult<String> {
    if let Some(identity) = given {
        return Ok(identity);
    }
    if let Ok(table) = target.cast::<PyDirTable>() {
        return Ok(format!("file://{}", table.get().path_str()));
    }
    if let Ok(lance) = target.cast::<PyLanceTarget>() {
        return Ok(lance.get().identity_str());
    }
    if let Ok(delta) = target.cast::<PyDeltaTarget>() {
        return Ok(delta.get().identity_str());
    }
    if target.hasattr("identity")? {
        return target.getattr("identity")?.extract();
    }
    Err(invalid(
        "the target has no `identity` attribute: pass target_identity= (a stable name of the table, e.g. its URI)",
    ))
}

fn check_target(target: &Bound<'_, PyAny>) -> PyResult<()> {
    if target.cast::<PyDirTable>().is_ok()
        || target.cast::<PyLanceTarget>().is_ok()
        || target.cast::<PyDeltaTarget>().is_ok()
    {
        return Ok(());
    }
    for method in ["version", "commit", "probe"] {
        if !target.hasattr(method)? {
            let type_name = target.get_type().name()?;
            return Err(invalid(format!(
                "the target {type_name} has no {method}(): a target is a sinkpoint.DirTable, a sinkpoint.LanceTarget, a sinkpoint.DeltaTarget or an object with version(), commit(commit) and probe(job, key, prepared_version)"
            )));
        }
    }
    Ok(())
}

/// A state named the Python way (`commit_unknown`; the library's `commit-unknown` is read too). The refusal
/// lists the Python names.
fn parse_state(state: &str) -> PyResult<StateFilter> {
    state.parse().map_err(|_| {
        let names: Vec<String> = StateFilter::ALL.iter().map(|f| python_state_name(*f)).collect();
        invalid(format!("unknown state {state:?}: one of {}", names.join(", ")))
    })
}

impl PyDriver {
    /// The opened store and target, opening them on first use; refused once the handle is closed (a reopen
    /// would claim a new epoch behind the caller's back).
    fn opened(&self, py: Python<'_>) -> PyResult<Arc<Opened>> {
        match &*self.handle.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            Handle::Open(o) => return Ok(o.clone()),
            Handle::Closed => return Err(self.closed_error()),
            Handle::Unopened => {}
        }
        let opened = Arc::new(self.open(py)?);
        let mut slot = self.handle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The lock is not held across the open: the open releases the GIL, and a thread waiting on this lock holds
        // it (a deadlock). Two threads racing the first call both open; the loser's open of the same file fails
        // with AlreadyOpenError (redb's lock) and that call raises it; the winner's store is kept. A close that
        // came in meanwhile wins: the store just opened is dropped (closed) and the call raises.
        match &*slot {
            Handle::Open(o) => Ok(o.clone()),
            Handle::Closed => Err(self.closed_error()),
            Handle::Unopened => {
                *slot = Handle::Open(opened.clone());
                Ok(opened)
            }
        }
    }

    fn closed_error(&self) -> PyErr {
        closed(format!(
            "this Driver ({}) is closed (close() or the end of its with block): create a new Driver to open the \
             store again (it claims a new epoch)",
            self.path
        ))
    }

    fn open(&self, py: Python<'_>) -> PyResult<Opened> {
        check_store_path(&self.path)?;
        let job = JobId::new(self.job.as_str()).map_err(to_py)?;
        let identity = TargetIdentity::new(self.target_identity.as_str()).map_err(to_py)?;
        let mut builder = Store::builder(job, identity).path(&self.path);
        if let Some(url) = &self.mirror {
            let (objects, prefix) = crate::objects::open(url, &self.mirror_options)?;
            builder = builder.mirror(objects, prefix, MirrorSettings::default());
        }
        // The compiled targets are driven natively; any other object through its Python methods.
        let bound = self.target.bind(py);
        let target: Arc<dyn Target> = if let Ok(table) = bound.cast::<PyDirTable>() {
            Arc::new(table.get().table.clone())
        } else if let Ok(lance) = bound.cast::<PyLanceTarget>() {
            Arc::new(lance.get().target.clone())
        } else if let Ok(delta) = bound.cast::<PyDeltaTarget>() {
            Arc::new(delta.get().target.clone())
        } else {
            Arc::new(PyTarget::new(self.target.clone_ref(py)))
        };
        let inbox = match &self.staging {
            Some(s) => Some(Inbox::new(s.get().get()?)),
            None => None,
        };
        let store = block_on(py, || builder.open())?.map_err(to_py)?;
        Ok(Opened { store, target, inbox })
    }

    fn committer<'a>(&self, opened: &'a Opened) -> Committer<'a> {
        let committer = Committer::new(&opened.store, opened.target.as_ref());
        match &self.crash_at {
            Some(point) => {
                let point = point.clone();
                let hook: CrashHook = Arc::new(move |name| {
                    if name == point {
                        eprintln!("sinkpoint: stopping the process at crash point {name} (crash_at)");
                        std::process::exit(CRASH_EXIT_CODE);
                    }
                    false
                });
                committer.with_crash_hook(hook)
            }
            None => committer,
        }
    }
}

#[pymethods]
impl PyDriver {
    /// A driver for `job` with its store at `path` (a `str` or `os.PathLike`: a local file, created if missing,
    /// in a directory that exists) committing into `target` (a DirTable, a LanceTarget, a DeltaTarget, or a Python
    /// object with version(), commit() and probe()). `mirror`: an object store URL the store is mirrored to (a
    /// driver that lost its disk restores from it; drivers on several machines fence each other through it).
    /// `staging`: the job's SharedStaging, whose sealed checkpoints `adopt` brings in. Nothing is opened until
    /// first use.
    #[new]
    #[pyo3(signature = (path, job, target, target_identity = None, mirror = None, mirror_options = None, staging = None, crash_at = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        path: Bound<'_, PyAny>,
        job: String,
        target: Bound<'_, PyAny>,
        target_identity: Option<String>,
        mirror: Option<Bound<'_, PyAny>>,
        mirror_options: Option<Bound<'_, PyAny>>,
        staging: Option<Py<PySharedStaging>>,
        crash_at: Option<String>,
    ) -> PyResult<Self> {
        let path = path_arg("path", "the store's local file", &path)?;
        let mirror = match mirror.filter(|m| !m.is_none()) {
            Some(m) => Some(path_arg("mirror", "the URL of the store's mirror", &m)?),
            None => None,
        };
        let mirror_options = options_arg("mirror_options", mirror_options.as_ref())?;
        JobId::new(job.as_str()).map_err(to_py)?;
        check_target(&target)?;
        let target_identity = identity_of(&target, target_identity)?;
        TargetIdentity::new(target_identity.as_str()).map_err(to_py)?;
        if let Some(point) = &crash_at
            && !sinkpoint::commit::crash_points::ALL.contains(&point.as_str())
        {
            return Err(invalid(format!(
                "unknown crash point {point:?}: one of {:?}",
                sinkpoint::commit::crash_points::ALL
            )));
        }
        Ok(Self {
            path,
            job,
            target: target.unbind(),
            target_identity,
            mirror,
            mirror_options: mirror_options.unwrap_or_default(),
            staging,
            crash_at,
            handle: Mutex::new(Handle::Unopened),
        })
    }

    /// This driver's epoch (opens the store).
    #[getter]
    fn epoch(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.opened(py)?.store.epoch())
    }

    /// The job id.
    #[getter]
    fn job(&self) -> &str {
        &self.job
    }

    /// The target identity the store records.
    #[getter]
    fn target_identity(&self) -> &str {
        &self.target_identity
    }

    /// Recovery after any crash (call it first): settles the key in flight by probing the target (F1: mark
    /// it; F2: re-commit it under the same key; unknown: report it in `blocked`) and commits what was sealed.
    fn recover(&self, py: Python<'_>) -> PyResult<PyRecoveryReport> {
        let opened = self.opened(py)?;
        let report = block_on(py, || async { self.committer(&opened).recover().await })?.map_err(to_py)?;
        PyRecoveryReport::new(py, report)
    }

    /// One round of adopting what workers sealed in the shared staging (needs `staging=`): every seal (a listing
    /// of the job's claims), or, given `expected` checkpoint ids, the seals of those ids and of the inbox's parts
    /// (no listing of the claims: the cost follows `expected`, not the job's history).
    #[pyo3(signature = (expected = None))]
    fn adopt(&self, py: Python<'_>, expected: Option<Vec<String>>) -> PyResult<PyAdoptReport> {
        let expected = expected.map(|ids| ids.iter().map(|id| id_arg(id)).collect::<PyResult<Vec<_>>>()).transpose()?;
        let opened = self.opened(py)?;
        let Some(inbox) = &opened.inbox else {
            return Err(invalid("this driver has no shared staging: pass staging=SharedStaging(...) to adopt"));
        };
        let report = match &expected {
            Some(ids) => block_on(py, || inbox.adopt_expected(&opened.store, ids))?,
            None => block_on(py, || inbox.adopt(&opened.store))?,
        };
        Ok(report.map_err(to_py)?.into())
    }

    /// Commits every sealed checkpoint (not final).
    fn commit_pending(&self, py: Python<'_>) -> PyResult<PyCommitReport> {
        let opened = self.opened(py)?;
        Ok(block_on(py, || async { self.committer(&opened).commit_pending().await })?.map_err(to_py)?.into())
    }

    /// Commits every sealed checkpoint as the job's final commit and marks the job finished.
    fn finish(&self, py: Python<'_>) -> PyResult<PyCommitReport> {
        let opened = self.opened(py)?;
        Ok(block_on(py, || async { self.committer(&opened).finish().await })?.map_err(to_py)?.into())
    }

    /// Whether the job's final commit landed.
    fn is_finished(&self, py: Python<'_>) -> PyResult<bool> {
        self.opened(py)?.store.is_finished().map_err(to_py)
    }

    /// Whether `key` is processed in this driver's store (sealed here or adopted).
    fn is_processed(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_arg(key)?;
        self.opened(py)?.store.is_processed(&key).map_err(to_py)
    }

    /// The checkpoints in `state` ("staged", "sealed", "committing", "commit_unknown", "committed",
    /// "aborted"), or in every state.
    #[pyo3(signature = (state = None))]
    fn checkpoints(&self, py: Python<'_>, state: Option<&str>) -> PyResult<Vec<PyCheckpointInfo>> {
        let filters = match state {
            Some(s) => vec![parse_state(s)?],
            None => StateFilter::ALL.to_vec(),
        };
        let opened = self.opened(py)?;
        let mut out = Vec::new();
        for filter in filters {
            out.extend(opened.store.list(filter).map_err(to_py)?.into_iter().map(PyCheckpointInfo::from));
        }
        Ok(out)
    }

    /// The oldest target version a probe may still need (keep every version after it), or None.
    fn retention_watermark(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.opened(py)?.store.retention_watermark().map_err(to_py)
    }

    /// Operator hatch: settles key `key`, whose outcome is unknown, as "committed" (the table holds exactly the
    /// recorded checkpoints) or "not_committed" (it does not and never will). `reason` is logged.
    fn resolve(&self, py: Python<'_>, key: u64, resolution: &str, reason: &str) -> PyResult<()> {
        let resolution = match resolution {
            "committed" => Resolution::Committed,
            "not_committed" => Resolution::NotCommitted,
            other => return Err(invalid(format!("resolution {other:?}: \"committed\" or \"not_committed\""))),
        };
        let opened = self.opened(py)?;
        block_on(py, || opened.store.operator().resolve(key, resolution, reason))?.map_err(to_py)
    }

    /// Operator hatch: aborts Sealed checkpoints (any other state is refused, nothing written), un-processing
    /// their keys so their inputs are read again; returns their write results to delete (also in the garbage
    /// ledger). A checkpoint adopted from shared staging has its worker's claim released by the next `adopt`.
    /// `reason` is logged.
    fn force_abort(&self, py: Python<'_>, ids: Vec<String>, reason: &str) -> PyResult<Vec<PyWriteResult>> {
        let ids = ids.iter().map(|id| id_arg(id)).collect::<PyResult<Vec<_>>>()?;
        let opened = self.opened(py)?;
        Ok(results_to_py(block_on(py, || opened.store.operator().force_abort(&ids, reason))?.map_err(to_py)?))
    }

    /// The store's garbage ledger: write results of dropped attempts (restart, abort, force_abort, and the
    /// losers of seals found by `adopt`) whose data files `collect_data_files` deletes, in ledger order: at most
    /// `limit` entries (and at most 4096) after the entry `after`, a `(seq, index)` pair (page with the last
    /// entry's).
    #[pyo3(signature = (limit = 1000, after = None))]
    fn garbage(&self, py: Python<'_>, limit: usize, after: Option<(u64, u32)>) -> PyResult<Vec<PyGarbageEntry>> {
        let after = after.map(|(seq, index)| GarbageRef { seq, index });
        let opened = self.opened(py)?;
        Ok(opened.store.garbage(after, limit).map_err(to_py)?.into_iter().map(PyGarbageEntry::from).collect())
    }

    /// Collects the orphan data files of the ledger's entries from the table `files` knows (a DirTable, a
    /// DeltaTarget's table, or an object with `files_of(format, data)`, `referenced()`, `stat(file)` and
    /// `delete(file)`, such as `sinkpoint.lance.LanceDataFiles`). A file a live checkpoint names, the table references, or modified less
    /// than `grace_s` seconds ago is kept; the rest is due. With `apply`, due files are deleted and the settled
    /// entries leave the ledger; without it (the default) nothing changes. Runs without the GIL, re-attaching it
    /// for each call on `files`. Raises TransientIOError (or InvalidInputError for a bad answer) when `files`
    /// fails: what was deleted before stays deleted and its entries are forgotten.
    // The text signature spells the default as a number (PyO3 shows a constant as `...`); a const assertion at
    // the top of this file keeps the two equal.
    #[pyo3(signature = (files, grace_s = DATA_FILE_GRACE_S_DEFAULT, apply = false))]
    #[pyo3(text_signature = "($self, /, files, grace_s=86400.0, apply=False)")]
    fn collect_data_files(
        &self,
        py: Python<'_>,
        files: &Bound<'_, PyAny>,
        grace_s: f64,
        apply: bool,
    ) -> PyResult<PyCollectReport> {
        let settings = CollectSettings { grace_ms: grace_ms(grace_s)?, apply };
        // A DirTable and a DeltaTarget's table are collected by their Rust implementations; anything else through
        // its Python methods.
        if let Ok(dir) = files.cast::<PyDirTable>() {
            let table = dir.get().table.clone();
            let opened = self.opened(py)?;
            let report = block_on(py, || collect_data_files(&opened.store, &table, &SystemClock, &settings))?;
            return Ok(report.map_err(to_py)?.into());
        }
        if let Ok(delta) = files.cast::<PyDeltaTarget>() {
            let table = delta.get().target.data_files();
            let opened = self.opened(py)?;
            let report = block_on(py, || collect_data_files(&opened.store, &table, &SystemClock, &settings))?;
            return Ok(report.map_err(to_py)?.into());
        }
        let table = PyDataFiles::new(files)?;
        let opened = self.opened(py)?;
        match block_on(py, || collect_data_files(&opened.store, &table, &SystemClock, &settings))? {
            Ok(report) => Ok(report.into()),
            Err(e) => Err(table.to_py(py, e)),
        }
    }

    /// Closes the store (after the calls already queued). The handle stays closed: a later call raises
    /// IllegalTransitionError (a new Driver opens the store again, under a new epoch). Closing again does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = std::mem::replace(
            &mut *self.handle.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
            Handle::Closed,
        );
        if let Handle::Open(opened) = taken
            && let Ok(opened) = Arc::try_unwrap(opened)
        {
            block_on(py, || opened.store.close_async())?;
        }
        Ok(())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self) -> String {
        format!("Driver({:?}, job={:?}, target={:?})", self.path, self.job, self.target_identity)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py, DriverArgs> {
        let this = slf.get();
        let py = slf.py();
        let args = (
            this.path.clone(),
            this.job.clone(),
            this.target.clone_ref(py),
            this.target_identity.clone(),
            this.mirror.clone(),
            this.mirror_options.clone(),
            this.staging.as_ref().map(|s| s.clone_ref(py)),
            this.crash_at.clone(),
        );
        Ok((slf.get_type().into_any(), args))
    }
}
