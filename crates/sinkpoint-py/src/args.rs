//! The checks of the arguments that name places: paths, URIs and URLs (a `str` or an `os.PathLike`), option
//! mappings (`str` to `str`), and the local paths sinkpoint writes to (a store file, a local object store's
//! directory). A wrong type is a `TypeError` naming the argument, as Python's own functions raise it; a path that
//! can never be written is an `InvalidInputError` naming the path: permanent, so never the retryable
//! `TransientIOError`. Every check runs before anything is written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyMapping, PyString};

use crate::errors::invalid;

/// The `str` or `os.PathLike` argument `name` (`what` says what it names, for the message), as a `String`.
pub(crate) fn path_arg(name: &str, what: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = value.cast::<PyString>() {
        return s.extract::<String>();
    }
    // Bytes are refused: os.fspath accepts them, but every path sinkpoint stores and prints is text.
    if !value.is_instance_of::<pyo3::types::PyBytes>() && value.hasattr("__fspath__")? {
        let path: PathBuf = value.extract()?;
        return path.into_os_string().into_string().map_err(|p| invalid(format!("{name} {p:?} is not valid UTF-8")));
    }
    Err(PyTypeError::new_err(format!(
        "{name} must be a str or os.PathLike ({what}), not {}: {}",
        value.get_type().name()?,
        value.repr()?
    )))
}

/// The optional mapping argument `name` of `str` to `str` (any `collections.abc.Mapping`), as a `HashMap`; `None`
/// when it is `None`. Messages name keys and types, never values: options carry credentials.
pub(crate) fn options_arg(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<HashMap<String, String>>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let Ok(mapping) = value.cast::<PyMapping>() else {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a mapping of str to str (e.g. {{\"aws_region\": \"us-east-1\"}}), not {}",
            value.get_type().name()?
        )));
    };
    let mut out = HashMap::new();
    for item in mapping.items()?.iter() {
        let (key, val): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        let Ok(key_str) = key.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "{name} must be a mapping of str to str: its key {} is a {}",
                key.repr()?,
                key.get_type().name()?
            )));
        };
        let key_str: String = key_str.extract()?;
        let Ok(val_str) = val.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "{name}[{}] must be a str, not {} (every option is a string, e.g. \"true\")",
                key.repr()?,
                val.get_type().name()?
            )));
        };
        out.insert(key_str, val_str.extract::<String>()?);
    }
    Ok(Some(out))
}

/// Whether this process may write `path` (access(2) with W_OK: the permission bits, a read-only mount, and the
/// capabilities that override them).
fn writable(path: &Path) -> Result<(), std::io::Error> {
    rustix::fs::access(path, rustix::fs::Access::WRITE_OK).map_err(std::io::Error::from)
}

/// Refuses, before the store is opened, a store path that can never hold a store: a directory, a path whose
/// directory is missing or not a directory, a file or a directory this process may not write.
pub(crate) fn check_store_path(path: &str) -> PyResult<()> {
    if path.is_empty() {
        return Err(invalid("the store path is empty: give the path of the store's file (e.g. state/job.redb)"));
    }
    let file = Path::new(path);
    match std::fs::metadata(file) {
        Ok(meta) if meta.is_dir() => {
            return Err(invalid(format!(
                "the store path {path} is a directory: give the path of a file in it (e.g. {}/job.redb)",
                path.trim_end_matches('/')
            )));
        }
        Ok(_) => {
            return writable(file).map_err(|e| {
                invalid(format!("the store file {path} is not writable ({e}): the driver writes it on every call"))
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(invalid(format!("the store path {path} cannot be read ({e})"))),
    }
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let shown = parent.display();
    match std::fs::metadata(parent) {
        Ok(meta) if meta.is_dir() => writable(parent).map_err(|e| {
            invalid(format!(
                "the directory {shown} of the store path {path} is not writable ({e}): the store's file cannot be \
                 created there"
            ))
        }),
        Ok(_) => Err(invalid(format!("{shown}, the directory of the store path {path}, is not a directory"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(invalid(format!(
            "the directory {shown} of the store path {path} does not exist: create it first (the store's file is \
             created, its directory is not)"
        ))),
        Err(e) => Err(invalid(format!("the directory {shown} of the store path {path} cannot be read ({e})"))),
    }
}

/// Creates the directory of a local object store (`url` names it for the message) if missing and refuses one
/// this process may not write: shared staging and a mirror are written by every worker and the driver.
pub(crate) fn check_local_store_dir(url: &str, dir: &str) -> PyResult<()> {
    let path = Path::new(dir);
    if let Err(e) = std::fs::create_dir_all(path) {
        let permanent = matches!(
            e.kind(),
            std::io::ErrorKind::PermissionDenied
                | std::io::ErrorKind::ReadOnlyFilesystem
                | std::io::ErrorKind::NotADirectory
                | std::io::ErrorKind::AlreadyExists
        );
        if permanent {
            return Err(invalid(format!(
                "{url}: the directory {dir} cannot be created ({e}): a local object store is a directory this \
                 process may write"
            )));
        }
        return Err(crate::errors::to_py(sinkpoint::Error::from(e)));
    }
    if !path.is_dir() {
        return Err(invalid(format!("{url}: {dir} is not a directory")));
    }
    writable(path).map_err(|e| {
        invalid(format!(
            "{url}: the directory {dir} is not writable ({e}): every worker and the driver write their objects there"
        ))
    })
}
