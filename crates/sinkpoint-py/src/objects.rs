//! Object stores from URLs: `file:///abs/dir` (or a bare absolute path), `s3://bucket/prefix` with
//! `storage_options` (object_store's `aws_*` keys: `aws_endpoint`, `aws_region`, `aws_allow_http`, credentials;
//! unset ones come from the environment), and `memory://name`, one in-memory store per name in this process
//! (tests).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use pyo3::prelude::*;

use crate::errors::invalid;

/// The in-memory stores of this process, by name.
static MEMORY: Mutex<Option<HashMap<String, Arc<InMemory>>>> = Mutex::new(None);

/// The store and the prefix inside it that `url` names.
pub(crate) fn open(url: &str, options: &HashMap<String, String>) -> PyResult<(Arc<dyn ObjectStore>, Path)> {
    if let Some(name) = url.strip_prefix("memory://") {
        let mut stores = MEMORY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let store = stores.get_or_insert_with(HashMap::new).entry(name.to_owned()).or_default().clone();
        return Ok((store, Path::default()));
    }
    let local = url.strip_prefix("file://").or_else(|| url.starts_with('/').then_some(url));
    if let Some(dir) = local {
        return local_dir(url, dir);
    }
    let parsed = url::Url::parse(url).map_err(|e| {
        invalid(format!(
            "{url:?} is not a URL sinkpoint can open ({e}): use file:///abs/dir, s3://bucket/prefix or memory://name"
        ))
    })?;
    let (store, prefix) = object_store::parse_url_opts(&parsed, options)
        .map_err(|e| invalid(format!("cannot open the object store at {url}: {e}")))?;
    Ok((Arc::from(store), prefix))
}

fn local_dir(url: &str, dir: &str) -> PyResult<(Arc<dyn ObjectStore>, Path)> {
    if !dir.starts_with('/') {
        return Err(invalid(format!("a local object store needs an absolute path, not {dir:?}")));
    }
    crate::args::check_local_store_dir(url, dir)?;
    // fsync: a put that returned must survive the machine's crash, as on a real object store.
    let store = LocalFileSystem::new_with_prefix(dir)
        .map_err(|e| invalid(format!("cannot open the directory {dir} as an object store: {e}")))?
        .with_fsync(true);
    Ok((Arc::new(store), Path::default()))
}
