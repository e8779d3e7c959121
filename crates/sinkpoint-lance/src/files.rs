//! [`LanceDataFiles`]: what the orphan data-file collector ([`sinkpoint::gc::collect_data_files`]) asks a Lance dataset.
//!
//! Files are named relative to the dataset's root, as Lance's own cleanup names them: `data/<file>.lance` for a
//! data file (or an overlay), `_deletions/<fragment>-<version>-<id>.<arrow|bin>` for a deletion file. Only files
//! of the dataset's own directory are ever candidates: a write result naming a file in another base of a
//! multi-base dataset is refused, and so is one whose name could leave its directory.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance_io::object_store::{ObjectStore, ObjectStoreParams, ObjectStoreRegistry, StorageOptionsAccessor};
use lance_table::format::{DataFile, Fragment};
use lance_table::io::deletion::relative_deletion_file_path;
use object_store::ObjectStoreExt as _;
use object_store::path::Path;
use sinkpoint::gc::{DataFiles, FileStat};
use sinkpoint::{Error, Result, WriteResult};
use tokio::sync::OnceCell;

use crate::results::decode_fragment;

/// The directory of a Lance dataset's data files, under its root.
const DATA_DIR: &str = "data";
/// The directory of a Lance dataset's deletion files, under its root.
const DELETIONS_DIR: &str = "_deletions";

/// The data files of the Lance dataset at a URI, for [`sinkpoint::gc::collect_data_files`]: the collector of
/// the data files of dropped attempts (restarted, aborted, force-aborted, discarded) that no commit will ever
/// reference. Build it with [`LanceDataFiles::new`] or from the job's target ([`crate::LanceTarget::data_files`]).
///
/// - [`DataFiles::files_of`] names the data files (and the deletion file, if any) of a fragment staged as
///   [`Format::Lance`](sinkpoint::Format::Lance) or [`crate::FRAGMENT_JSON_FORMAT`], relative to the dataset's
///   root: `data/<file>.lance`.
/// - [`DataFiles::referenced`] is every data, overlay and deletion file of every version of the dataset that
///   still exists (attached or detached), read from each version's manifest; nothing for a dataset that does not
///   exist. Refused for a dataset with branches (their versions are not read here).
/// - [`DataFiles::stat`] and [`DataFiles::delete`] go through Lance's object store for the URI, with the storage
///   options given (for S3: `aws_endpoint`, `aws_region`, `allow_http`, credentials).
#[derive(Debug)]
pub struct LanceDataFiles {
    uri: String,
    storage_options: HashMap<String, String>,
    /// The dataset's object store and its root in it, opened on first use.
    store: OnceCell<(Arc<ObjectStore>, Path)>,
}

impl LanceDataFiles {
    /// The data files of the dataset at `uri` (which need not exist: then nothing is referenced and every file is
    /// gone).
    pub fn new(uri: impl Into<String>) -> Self {
        Self { uri: uri.into(), storage_options: HashMap::new(), store: OnceCell::new() }
    }

    /// Lance's storage options for the dataset's object store, as [`crate::LanceTarget::with_storage_options`]
    /// takes them.
    #[must_use]
    pub fn with_storage_options(mut self, options: HashMap<String, String>) -> Self {
        self.storage_options = options;
        self
    }

    /// The dataset's URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The dataset at its latest version, or `None` when there is no dataset at the URI.
    async fn open(&self) -> Result<Option<Dataset>> {
        let opened =
            DatasetBuilder::from_uri(&self.uri).with_storage_options(self.storage_options.clone()).load().await;
        match opened {
            Ok(dataset) => Ok(Some(dataset)),
            Err(lance::Error::DatasetNotFound { .. }) => Ok(None),
            Err(e) => Err(self.failed("opening", e)),
        }
    }

    /// The object store holding the dataset, and the dataset's root in it.
    async fn store(&self) -> Result<&(Arc<ObjectStore>, Path)> {
        self.store
            .get_or_try_init(|| async {
                let accessor = (!self.storage_options.is_empty())
                    .then(|| Arc::new(StorageOptionsAccessor::with_static_options(self.storage_options.clone())));
                let params = ObjectStoreParams { storage_options_accessor: accessor, ..ObjectStoreParams::default() };
                let registry = Arc::new(ObjectStoreRegistry::default());
                ObjectStore::from_uri_and_params(registry, &self.uri, &params)
                    .await
                    .map_err(|e| self.failed("opening the object store of", e))
            })
            .await
    }

    /// Where `file` (a name [`DataFiles::files_of`] gives) is in the object store; refused for any other name.
    async fn location(&self, file: &str) -> Result<(&ObjectStore, Path)> {
        let (dir, name) = file.split_once('/').unwrap_or(("", file));
        if !matches!(dir, DATA_DIR | DELETIONS_DIR) || !is_plain_name(name) {
            return Err(Error::invalid_input(format!(
                "{file:?} is not a file of a Lance dataset's own data directory (\"{DATA_DIR}/<file>\" or \
                 \"{DELETIONS_DIR}/<file>\"): pass a name LanceDataFiles::files_of gave"
            )));
        }
        let (store, root) = self.store().await?;
        Ok((store.as_ref(), root.clone().join(dir).join(name)))
    }

    /// A Lance failure while doing `what` to the dataset, as a target error (retry later; check the URI and the
    /// storage options).
    fn failed(&self, what: &str, e: lance::Error) -> Error {
        Error::target_with_source(format!("{what} the Lance dataset at {}", self.uri), e)
    }

    /// Adds every file the fragments of `dataset`'s current version reference to `out`.
    fn add_referenced(&self, dataset: &Dataset, out: &mut BTreeSet<String>) {
        let bases = &dataset.manifest().base_paths;
        let spell = |base_id: Option<u32>, dir: &str, name: &str| match base_id.map(|id| (id, bases.get(&id))) {
            None => format!("{dir}/{name}"),
            // The dataset's own root registered as a base: the same file as without it.
            Some((_, Some(base))) if base.is_dataset_root && same_uri(&base.path, &self.uri) => {
                format!("{dir}/{name}")
            }
            // Another directory, never a name files_of gives; kept so the set says what is referenced.
            Some((_, Some(base))) if base.is_dataset_root => {
                format!("{}/{dir}/{name}", base.path.trim_end_matches('/'))
            }
            Some((_, Some(base))) => format!("{}/{name}", base.path.trim_end_matches('/')),
            Some((id, None)) => format!("<unknown base {id}>/{dir}/{name}"),
        };
        for fragment in dataset.fragments().iter() {
            for data_file in fragment.referenced_lance_files() {
                out.insert(spell(data_file.base_id, DATA_DIR, &data_file.path));
            }
            if let Some(deletion) = &fragment.deletion_file {
                let relative = relative_deletion_file_path(fragment.id, deletion);
                let name = relative.strip_prefix(&format!("{DELETIONS_DIR}/")).unwrap_or(&relative);
                out.insert(spell(deletion.base_id, DELETIONS_DIR, name));
            }
        }
    }

    /// Every version number of the dataset that exists now, attached or detached.
    async fn versions(&self, dataset: &Dataset) -> Result<BTreeSet<u64>> {
        let mut versions: BTreeSet<u64> = dataset
            .version_refs()
            .await
            .map_err(|e| self.failed("listing the versions of", e))?
            .into_iter()
            .map(|v| v.version)
            .collect();
        let detached =
            dataset.list_detached_manifests().await.map_err(|e| self.failed("listing the detached versions of", e))?;
        versions.extend(detached.into_iter().map(|location| location.version));
        Ok(versions)
    }
}

/// Whether `name` is one plain file name: no directory, nothing that could leave one.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\'])
        && !name.contains("://")
        && !name.chars().any(char::is_control)
}

/// Whether two spellings of a dataset URI name the same place (a trailing slash apart).
fn same_uri(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// `data/<path>` for a data file of the dataset's own data directory; refused otherwise.
fn data_file_name(data_file: &DataFile) -> Result<String> {
    if let Some(base) = data_file.base_id {
        return Err(Error::invalid_input(format!(
            "data file {:?} is in base {base} of a multi-base Lance dataset: LanceDataFiles collects files of the \
             dataset's own data directory only (collect that base's files with its own dataset)",
            data_file.path
        )));
    }
    if !is_plain_name(&data_file.path) {
        return Err(Error::corrupt(format!(
            "a Lance fragment names the data file {:?}, which is not one file of the data directory: the write \
             result is damaged; find out what staged it before collecting",
            data_file.path
        )));
    }
    Ok(format!("{DATA_DIR}/{}", data_file.path))
}

/// The files of a fragment of a write result, relative to the dataset's root.
fn fragment_files(fragment: &Fragment) -> Result<Vec<String>> {
    let mut files = fragment.referenced_lance_files().map(data_file_name).collect::<Result<Vec<_>>>()?;
    if let Some(deletion) = &fragment.deletion_file {
        if let Some(base) = deletion.base_id {
            return Err(Error::invalid_input(format!(
                "the deletion file of fragment {} is in base {base} of a multi-base Lance dataset: LanceDataFiles \
                 collects files of the dataset's own directory only",
                fragment.id
            )));
        }
        files.push(relative_deletion_file_path(fragment.id, deletion));
    }
    Ok(files)
}

#[async_trait]
impl DataFiles for LanceDataFiles {
    fn files_of(&self, result: &WriteResult) -> Result<Vec<String>> {
        let fragment = decode_fragment(result).map_err(|reason| match result.format() {
            sinkpoint::Format::Lance => Error::corrupt(format!(
                "a Lance write result does not decode ({reason}): the store holds damaged bytes; report it"
            )),
            sinkpoint::Format::Other(tag) if tag == crate::FRAGMENT_JSON_FORMAT => Error::corrupt(format!(
                "a {tag} write result does not decode ({reason}): the store holds damaged bytes; report it"
            )),
            _ => Error::invalid_input(format!(
                "{reason}: LanceDataFiles names the files of Lance fragments only; collect this job's files with \
                 the DataFiles of the table that wrote them"
            )),
        })?;
        fragment_files(&fragment)
    }

    async fn referenced(&self) -> Result<BTreeSet<String>> {
        let Some(dataset) = self.open().await? else { return Ok(BTreeSet::new()) };
        let branches = dataset.list_branches().await.map_err(|e| self.failed("listing the branches of", e))?;
        if !branches.is_empty() {
            let mut names: Vec<&String> = branches.keys().collect();
            names.sort();
            names.truncate(3);
            return Err(Error::invalid_input(format!(
                "the Lance dataset at {} has branches ({names:?}…): LanceDataFiles does not read the files their \
                 versions reference, so it cannot tell which files are unreferenced; collect without branches",
                self.uri
            )));
        }
        let mut out = BTreeSet::new();
        let mut read = BTreeSet::new();
        // Until a listing shows no version unread: a commit that lands meanwhile is read too.
        loop {
            let versions = self.versions(&dataset).await?;
            let unread: Vec<u64> = versions.difference(&read).copied().collect();
            if unread.is_empty() {
                return Ok(out);
            }
            for version in unread {
                match dataset.checkout_version(version).await {
                    Ok(at) => self.add_referenced(&at, &mut out),
                    // Cleaned up since the listing: no reader can open it any more. Still listed: a real failure.
                    Err(e) => {
                        if self.versions(&dataset).await?.contains(&version) {
                            return Err(self.failed(&format!("reading version {version} of"), e));
                        }
                    }
                }
                read.insert(version);
            }
        }
    }

    async fn stat(&self, file: &str) -> Result<Option<FileStat>> {
        let (store, path) = self.location(file).await?;
        match store.inner.head(&path).await {
            Ok(meta) => Ok(Some(FileStat {
                bytes: meta.size,
                modified_ms: u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0),
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::target_with_source(format!("reading the size and age of {file} in {}", self.uri), e)),
        }
    }

    async fn delete(&self, file: &str) -> Result<()> {
        let (store, path) = self.location(file).await?;
        match store.inner.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::target_with_source(format!("deleting {file} from {}", self.uri), e)),
        }
    }
}
