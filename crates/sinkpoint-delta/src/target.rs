//! [`DeltaTarget`]: the sinkpoint commit protocol over one Delta table.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties, TransactionError};
use deltalake::kernel::{Action, Add, Transaction};
use deltalake::logstore::LogStoreRef;
use deltalake::logstore::object_store::{ObjectStore, ObjectStoreExt as _, path::Path};
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::table::builder::parse_table_uri;
use deltalake::table::state::DeltaTableState;
use deltalake::{DeltaResult, DeltaTable, DeltaTableBuilder, DeltaTableError};
use futures::{StreamExt as _, TryStreamExt as _};
use sinkpoint::{CheckpointId, CommitKey, CommitOutcome, ProbeOutcome, Target, TargetCommit};

use crate::DeltaDataFiles;
use crate::fence::{self, CONDITIONAL_LOG_STORE, KeyCheck, NextVersionOnly, Reached};
use crate::limits::{FOREIGN_COMMIT_RETRIES_MAX, PROBE_COMMITS_READ_MAX, STAGED_FILE_CHECKS_IN_FLIGHT_MAX};
use crate::props::{self, Landed};
use crate::results::decode_add;

/// Wraps the table's log store beneath the fence: how tests inject a lost acknowledgement.
pub type LogStoreWrapper = Arc<dyn Fn(LogStoreRef) -> LogStoreRef + Send + Sync>;

/// A sinkpoint [`Target`] over the Delta table at a URI (which must exist: create it with its schema first).
///
/// delta-rs reaches storage through its own `object_store` (0.13 for deltalake 1.1.2), not the core's (0.14):
/// they are different crates, so the target opens the table by URI and storage options, and never shares the
/// `Arc<dyn ObjectStore>` the store's mirror uses.
#[derive(Clone)]
pub struct DeltaTarget {
    uri: String,
    storage_options: HashMap<String, String>,
    wrapper: Option<LogStoreWrapper>,
    root_store: Option<Arc<dyn ObjectStore>>,
    fenced: bool,
}

/// What one fenced attempt ended in.
enum Attempt {
    Done(CommitOutcome),
    /// A foreign commit took V + 1 first; nothing of ours was written.
    Retry,
}

impl DeltaTarget {
    /// A target committing into the Delta table at `uri`: a local path or `file://`, the storage deltalake's
    /// default features reach and the adapter is tested on. Storage reached through more of deltalake's features
    /// is committed to only when its log store is a put-if-absent (the commit checks, and refuses the others).
    pub fn new(uri: impl Into<String>) -> Self {
        Self { uri: uri.into(), storage_options: HashMap::new(), wrapper: None, root_store: None, fenced: true }
    }

    /// delta-rs's storage options for the table (for S3: `AWS_ENDPOINT_URL`, `AWS_REGION`, credentials), as
    /// the Python `deltalake` package takes them.
    #[must_use]
    pub fn with_storage_options(mut self, options: HashMap<String, String>) -> Self {
        self.storage_options = options;
        self
    }

    /// Commits through `wrapper(log store)` (beneath the fence) instead of the table's log store: how tests
    /// inject a lost acknowledgement or a failure before writing.
    #[doc(hidden)]
    #[must_use]
    pub fn with_log_store_wrapper(mut self, wrapper: LogStoreWrapper) -> Self {
        self.wrapper = Some(wrapper);
        self
    }

    /// Reaches the table through `root_store` (an object store whose `/` is the storage's root) instead of the
    /// one delta-rs builds for the URI: how tests count the requests a probe makes.
    #[doc(hidden)]
    #[must_use]
    pub fn with_root_object_store(mut self, root_store: Arc<dyn ObjectStore>) -> Self {
        self.root_store = Some(root_store);
        self
    }

    /// Drops the key check and the V + 1 fence: a plain delta-rs commit with the job's `txn` and delta-rs's
    /// default retries. Only for the tests that show the duplicates this lets through; never use it for data.
    #[doc(hidden)]
    #[must_use]
    pub fn unfenced(mut self) -> Self {
        self.fenced = false;
        self
    }

    /// The table's URI, as given.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The table at its latest version, opened with the target's storage options.
    pub async fn open(&self) -> DeltaResult<DeltaTable> {
        self.builder()?.load().await
    }

    /// delta-rs's object store for the table, rooted at the table's directory: where workers write data files
    /// ([`crate::write_data_file`]).
    pub fn object_store(&self) -> DeltaResult<Arc<dyn ObjectStore>> {
        Ok(self.builder()?.build_storage()?.object_store(None))
    }

    /// The table's data files, with the target's storage options: what [`sinkpoint::gc::collect_data_files`]
    /// takes to delete the files of the job's dropped attempts.
    pub fn data_files(&self) -> DeltaDataFiles {
        DeltaDataFiles::new(self.clone())
    }

    fn builder(&self) -> DeltaResult<DeltaTableBuilder> {
        let url = parse_table_uri(&self.uri)?;
        let mut builder = DeltaTableBuilder::from_url(url.clone())?;
        if let Some(store) = &self.root_store {
            builder = builder.with_storage_backend(store.clone(), url);
        }
        Ok(if self.storage_options.is_empty() {
            builder
        } else {
            builder.with_storage_options(self.storage_options.clone())
        })
    }

    /// One fenced attempt. `taken` lists the versions earlier attempts of this call found taken: one of them may
    /// be our own write, reported taken by a storage client's retry that met it.
    async fn attempt(&self, commit: &TargetCommit<'_>, taken: &mut Vec<u64>) -> Attempt {
        let table = match self.open().await {
            Ok(t) => t,
            Err(e) => return not_landed(format!("opening the Delta table at {}: {e}", self.uri)),
        };
        let log_store = table.log_store();
        if log_store.name() != CONDITIONAL_LOG_STORE {
            return not_landed(format!(
                "the Delta table at {} commits through delta-rs's {}, not a put-if-absent ({CONDITIONAL_LOG_STORE}): \
                 the fence cannot keep a second commit of one key out; use storage whose Delta log store commits \
                 with a put-if-absent (a local path, file://)",
                self.uri,
                log_store.name()
            ));
        }
        let snapshot = match table.snapshot() {
            Ok(s) => s,
            Err(e) => return not_landed(format!("reading the snapshot of {}: {e}", self.uri)),
        };
        let adds = match commit.results.iter().map(decode_add).collect::<Result<Vec<_>, _>>() {
            Ok(a) => a,
            Err(reason) => return not_landed(reason),
        };
        let app = fence::app_id(&commit.key.job);
        if !self.fenced {
            return self.plain_commit(commit, &table, adds, &app).await;
        }
        let latest = match snapshot.transaction_version(log_store.as_ref(), &app).await {
            Ok(v) => v,
            Err(e) => return not_landed(format!("reading the job's txn ({app}) in {}: {e}", self.uri)),
        };
        let n = match fence::key_check(latest, commit.key.n) {
            // The key check passed: n fits an i64.
            KeyCheck::Commit => i64::try_from(commit.key.n).unwrap_or(i64::MAX),
            // Key n itself may be this very commit: then it is committed, not refused.
            KeyCheck::Refused(_)
                if latest == i64::try_from(commit.key.n).ok() && is_ours(&table, &app, commit, &adds, taken).await =>
            {
                return Attempt::Done(CommitOutcome::Committed);
            }
            KeyCheck::Refused(reason) => return not_landed(reason),
        };
        if let Err(reason) = check_staged_files(log_store.object_store(None), &adds, commit.ids).await {
            return not_landed(reason);
        }
        self.send(&table, snapshot, commit, adds, n, taken).await
    }

    /// Writes the commit (its key, `n` as a txn version, passed the key check on `snapshot`) as version V + 1 of
    /// `snapshot` V, or nothing; a version found taken goes into `taken`.
    async fn send(
        &self,
        table: &DeltaTable,
        snapshot: &DeltaTableState,
        commit: &TargetCommit<'_>,
        adds: Vec<Add>,
        n: i64,
        taken: &mut Vec<u64>,
    ) -> Attempt {
        let log_store = table.log_store();
        let app = fence::app_id(&commit.key.job);
        let inner = self.wrapper.as_ref().map_or_else(|| log_store.clone(), |wrap| wrap(log_store.clone()));
        let fence = Arc::new(NextVersionOnly::new(inner, snapshot.version() + 1));
        // No delta-rs retries: a retry rebuilt on a newer snapshot would skip the key check.
        let properties = CommitProperties::default()
            .with_application_transaction(Transaction::new(&app, n))
            .with_metadata(props::encode(commit))
            .with_max_retries(0);
        let builder = CommitBuilder::from(properties).with_actions(adds.into_iter().map(Action::Add).collect());
        let prepared = builder.build(Some(snapshot), fence.clone(), append()).into_prepared_commit_future().await;
        let written = match prepared {
            Ok(prepared) => prepared.await,
            Err(e) => Err(e),
        };
        let reached = fence.reached();
        if reached == Reached::Conflict {
            taken.push(snapshot.version() + 1);
        }
        match written {
            Ok(post_commit) => {
                // Landed. The table's post-commit hooks (a checkpoint every `delta.checkpointInterval`
                // commits, expired log cleanup) run now; their failure does not undo the commit.
                if let Err(e) = post_commit.await {
                    tracing::warn!(uri = %self.uri, error = %e, "a post-commit hook failed after the commit landed");
                }
                Attempt::Done(CommitOutcome::Committed)
            }
            Err(e) => classify(&e, reached),
        }
    }

    /// The unfenced commit: delta-rs's own conflict check and retries, nothing of ours.
    async fn plain_commit(&self, commit: &TargetCommit<'_>, table: &DeltaTable, adds: Vec<Add>, app: &str) -> Attempt {
        let snapshot = match table.snapshot() {
            Ok(s) => s,
            Err(e) => return not_landed(e.to_string()),
        };
        let n = i64::try_from(commit.key.n).unwrap_or(i64::MAX);
        let properties = CommitProperties::default()
            .with_application_transaction(Transaction::new(app, n))
            .with_metadata(props::encode(commit));
        let builder = CommitBuilder::from(properties).with_actions(adds.into_iter().map(Action::Add).collect());
        match builder.build(Some(snapshot), table.log_store(), append()).await {
            Ok(_) => Attempt::Done(CommitOutcome::Committed),
            Err(e) => Attempt::Done(CommitOutcome::Unknown { reason: e.to_string() }),
        }
    }
}

impl fmt::Debug for DeltaTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaTarget")
            .field("uri", &self.uri)
            .field("storage_options", &self.storage_options.keys().collect::<Vec<_>>())
            .field("fenced", &self.fenced)
            .finish_non_exhaustive()
    }
}

fn not_landed(reason: String) -> Attempt {
    Attempt::Done(CommitOutcome::NotLanded { reason })
}

/// The operation recorded in `commitInfo`: a blind append.
fn append() -> DeltaOperation {
    DeltaOperation::Write { mode: SaveMode::Append, partition_by: None, predicate: None }
}

/// The outcome of one failed attempt from how far the fence saw it get; delta-rs's error only words the reason.
fn classify(error: &DeltaTableError, reached: Reached) -> Attempt {
    match reached {
        Reached::Published => Attempt::Done(CommitOutcome::Committed),
        Reached::Refused | Reached::Conflict => Attempt::Retry,
        // delta-rs saw a newer version than its snapshot before writing (it does not rebase with no retries).
        Reached::NotCalled
            if matches!(
                error,
                DeltaTableError::Transaction { source: TransactionError::MaxCommitAttempts(_) }
                    | DeltaTableError::VersionAlreadyExists(_)
            ) =>
        {
            Attempt::Retry
        }
        Reached::NotCalled => {
            Attempt::Done(CommitOutcome::NotLanded { reason: format!("nothing was written: {error}") })
        }
        Reached::Failed => Attempt::Done(CommitOutcome::Unknown { reason: error.to_string() }),
    }
}

/// The object-store path of a data file the log names (percent-decoded) relative to the table's root.
pub(crate) fn file_path(path: &str) -> Path {
    Path::parse(path).unwrap_or_else(|_| Path::from(path))
}

/// Checks that every data file the `Add`s name is still there: a VACUUM deletes files no version references
/// once they are older than `delta.deletedFileRetentionDuration` (7 days by default), which includes staged
/// files, and committing one whose file is gone would make every scan of the table fail.
async fn check_staged_files(store: Arc<dyn ObjectStore>, adds: &[Add], ids: &[CheckpointId]) -> Result<(), String> {
    // Owned paths: a stream over borrowed ones makes the commit future's Send bound fail to be general enough.
    let paths: Vec<String> = adds.iter().map(|a| a.path.clone()).collect();
    let missing: Vec<String> = futures::stream::iter(paths)
        .map(|path| {
            let store = store.clone();
            async move {
                match store.head(&file_path(&path)).await {
                    Ok(_) => Ok(None),
                    Err(deltalake::ObjectStoreError::NotFound { .. }) => Ok(Some(path)),
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(STAGED_FILE_CHECKS_IN_FLIGHT_MAX)
        .try_filter_map(|gone| async move { Ok(gone) })
        .try_collect()
        .await
        .map_err(|e| format!("checking the staged data files (nothing was written): {e}"))?;
    if missing.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = ids.iter().map(CheckpointId::as_str).collect();
    Err(format!(
        "staged data files are gone (a VACUUM deletes files no version references once they are older than the \
         table's deletedFileRetentionDuration): {missing:?}. Nothing was committed. The checkpoints of this key \
         ({ids:?}) cannot land: un-bind the key and force-abort them, so their inputs are written again"
    ))
}

/// Key `key` as its own commit file records it, found among the commit files after `prepared_version` (the
/// version its intent recorded), oldest first, at most [`PROBE_COMMITS_READ_MAX`] of them. `None` when there is
/// no intent to start from, the commit is not among them, one of them is gone (log cleanup) or cannot be read,
/// or the commit holding the job's txn has no readable record: the txn alone then says the key landed.
async fn landed_commit(
    table: &DeltaTable,
    app: &str,
    key: &CommitKey,
    prepared_version: Option<u64>,
) -> Option<Landed> {
    let latest = table.version()?;
    let first = prepared_version?.checked_add(1)?;
    let log_store = table.log_store();
    for version in first..=latest.min(first.saturating_add(PROBE_COMMITS_READ_MAX - 1)) {
        let commit = log_store.read_commit_entry(version).await.ok()??;
        match props::landed_key(&commit, app, key.job.as_str(), key.n) {
            Ok(Some(landed)) => return Some(landed),
            Ok(None) => {}
            Err(reason) => {
                tracing::warn!(version, %reason, "the commit of the job's key has no readable sinkpoint record");
                return None;
            }
        }
    }
    None
}

/// Whether the commit of `commit.key` in the table is this very commit (same epoch, checkpoints and data
/// files): looked for at the versions this call's attempts found `taken`, then among the commit files since the
/// intent. It is when an earlier send landed and its answer was lost, or a storage client's retry met its own
/// write and reported the version taken.
async fn is_ours(table: &DeltaTable, app: &str, commit: &TargetCommit<'_>, adds: &[Add], taken: &[u64]) -> bool {
    let is_this = |landed: &Landed| {
        let mut ids = commit.ids.to_vec();
        ids.sort_unstable();
        let mut landed_ids = landed.ids.clone();
        landed_ids.sort_unstable();
        let mut files: Vec<&str> = adds.iter().map(|a| a.path.as_str()).collect();
        files.sort_unstable();
        landed.epoch == commit.epoch && landed_ids == ids && landed.files == files
    };
    let log_store = table.log_store();
    for &version in taken {
        if let Ok(Some(bytes)) = log_store.read_commit_entry(version).await
            && let Ok(Some(landed)) = props::landed_key(&bytes, app, commit.key.job.as_str(), commit.key.n)
        {
            return is_this(&landed);
        }
    }
    landed_commit(table, app, commit.key, commit.prepared_version).await.is_some_and(|landed| is_this(&landed))
}

#[async_trait]
impl Target for DeltaTarget {
    async fn version(&self) -> sinkpoint::Result<Option<u64>> {
        match self.open().await {
            Ok(table) => Ok(table.version()),
            Err(e) => Err(sinkpoint::Error::target_with_source(format!("reading the version of {}", self.uri), e)),
        }
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        let mut taken = Vec::new();
        for _ in 0..=FOREIGN_COMMIT_RETRIES_MAX {
            if let Attempt::Done(outcome) = self.attempt(commit, &mut taken).await {
                return outcome;
            }
        }
        CommitOutcome::NotLanded {
            reason: format!("foreign commits took the next version {} times in a row", FOREIGN_COMMIT_RETRIES_MAX + 1),
        }
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        let table = match self.open().await {
            Ok(t) => t,
            Err(e) => return ProbeOutcome::Unknown { reason: format!("opening the Delta table at {}: {e}", self.uri) },
        };
        let snapshot = match table.snapshot() {
            Ok(s) => s,
            Err(e) => return ProbeOutcome::Unknown { reason: format!("reading the snapshot of {}: {e}", self.uri) },
        };
        let app = fence::app_id(&key.job);
        let latest = match snapshot.transaction_version(table.log_store().as_ref(), &app).await {
            Ok(v) => v,
            Err(e) => return ProbeOutcome::Unknown { reason: format!("reading the job's txn ({app}): {e}") },
        };
        match fence::probe_landed(latest, key.n) {
            // The txn is a watermark (keys land in order): the ids come from the key's own commit file, when it
            // is among the few since the intent and still there.
            Ok(true) => {
                ProbeOutcome::Committed { ids: landed_commit(&table, &app, key, prepared_version).await.map(|l| l.ids) }
            }
            // A late attempt of key n could only land at a version after the one read here, on a snapshot whose
            // txn is n - 1; the next commit of key n then finds it, and is refused.
            Ok(false) => ProbeOutcome::NotCommitted,
            Err(reason) => ProbeOutcome::Unknown { reason },
        }
    }
}
