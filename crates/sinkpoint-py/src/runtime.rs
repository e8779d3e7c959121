//! The one tokio runtime of this process, and the bridge that runs a future on it with the GIL released.
//!
//! A runtime does not survive `fork` (its worker threads stay in the parent), and Python process pools fork:
//! the runtime remembers the pid that built it, and a forked child builds its own on first use.

use std::future::Future;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// Worker threads of the runtime: the core's calls are I/O-bound (object store, fsync), and a Python process
/// rarely has more than a few in flight.
const RUNTIME_WORKER_THREADS: usize = 2;

static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// This process's runtime, built on first use (and again after a fork).
pub(crate) fn runtime() -> PyResult<Arc<Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((owner, rt)) = slot.as_ref()
        && *owner == pid
    {
        return Ok(rt.clone());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_WORKER_THREADS)
        .thread_name("sinkpoint")
        .enable_all()
        .build()
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("cannot start sinkpoint's runtime: {e}")))?;
    let rt = Arc::new(rt);
    // A runtime inherited through fork is leaked, not dropped: dropping it would join threads that do not exist.
    if let Some(old) = slot.replace((pid, rt.clone())) {
        std::mem::forget(old);
    }
    Ok(rt)
}

/// Runs `future` to completion on the runtime with the GIL released (other Python threads go on; a Python
/// target called from inside re-attaches for its own calls).
///
/// The future is made inside the released section (`make`), so it need not be `Send` itself: only what it
/// borrows crosses threads.
pub(crate) fn block_on<M, F>(py: Python<'_>, make: M) -> PyResult<F::Output>
where
    M: FnOnce() -> F + Send,
    F: Future,
    F::Output: Send,
{
    let rt = runtime()?;
    Ok(py.detach(|| rt.block_on(make())))
}
