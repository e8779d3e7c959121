//! The contract between a table and the data-file collector: what a table tells it about its data files. A table
//! adapter implements it beside `Target`; the collector above reads it.

use std::collections::BTreeSet;

use async_trait::async_trait;

use crate::error::Result;
use crate::types::WriteResult;

/// A data file's size and age, as the table's storage reports them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FileStat {
    /// Its size in bytes.
    pub bytes: u64,
    /// Its last modification, in milliseconds since the Unix epoch (wall time).
    pub modified_ms: u64,
}

/// What a table tells the collector about its data files. Implemented by [`crate::DirTable`] and the Lance
/// target; a conformance-minded implementation keeps these promises:
///
/// - [`DataFiles::files_of`] names every data file the result makes a commit publish, each as the one string
///   the other methods take for it, and always the same string for the same file;
/// - [`DataFiles::referenced`] includes every data file of every table version a reader may still open (a
///   file it misses may be deleted under a reader's feet); it may include more;
/// - [`DataFiles::stat`] answers `None` only for a file that does not exist;
/// - [`DataFiles::delete`] of a file already gone succeeds;
/// - **a data file is written once**: no writer rewrites a name that exists (create-only writes, or names unique
///   to each attempt, as Lance's UUID-named fragments are). The collector judges a file by its age, then deletes
///   it: a rewrite in between, by a newer attempt that then stages it, would be deleted with it. Create-only
///   writes refuse that rewrite while the old file exists, and a name created after the old file's deletion is
///   never the one judged ([`crate::DirTable::write_data_file`]).
#[async_trait]
pub trait DataFiles: Send + Sync {
    /// The data files `result` names. An error for a result this table cannot have written.
    fn files_of(&self, result: &WriteResult) -> Result<Vec<String>>;
    /// Every data file a version of the table that readers can still open references.
    async fn referenced(&self) -> Result<BTreeSet<String>>;
    /// The file's size and last modification, or `None` when it does not exist.
    async fn stat(&self, file: &str) -> Result<Option<FileStat>>;
    /// Deletes the file; a file already gone is not an error.
    async fn delete(&self, file: &str) -> Result<()>;
}
