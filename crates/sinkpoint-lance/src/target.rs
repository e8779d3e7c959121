//! [`LanceTarget`]: the sinkpoint commit protocol over one Lance dataset.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{StreamExt as _, TryStreamExt as _};
use lance::Dataset;
use lance::dataset::CommitBuilder;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::cleanup::{CleanupPolicy, RemovalStats};
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance_io::object_store::{ObjectStoreParams, WrappingObjectStore};
use lance_table::io::commit::{CommitHandler, commit_handler_from_url};
use sinkpoint::{CommitKey, CommitOutcome, ProbeOutcome, Target, TargetCommit};

use crate::LanceDataFiles;
use crate::fence::{NextVersionOnly, Reached};
use crate::limits::{FOREIGN_COMMIT_RETRIES_MAX, STAGED_FILE_CHECKS_IN_FLIGHT_MAX};
use crate::mark::{self, JobMark, KeyCheck, ProbeStep};
use crate::props::{self, Recorded};
use crate::results::decode_fragment;

/// The URI schemes whose Lance commit handler is a conditional put (or the local filesystem's atomic rename),
/// which the V + 1 fence relies on. Lance gives every other scheme an unconditional put.
const FENCED_SCHEMES: [&str; 8] = ["file", "file-object-store", "s3", "gs", "az", "abfss", "oss", "memory"];

/// A sinkpoint [`Target`] over the Lance dataset at `uri` (which must exist: create it with its schema first).
#[derive(Clone, Debug)]
pub struct LanceTarget {
    uri: String,
    storage_options: HashMap<String, String>,
    handler: Option<Arc<dyn CommitHandler>>,
    store_wrapper: Option<Arc<dyn WrappingObjectStore>>,
    fenced: bool,
}

/// What one fenced attempt ended in.
enum Attempt {
    Done(CommitOutcome),
    /// A foreign commit took V + 1 first; nothing of ours was published.
    Retry,
}

impl LanceTarget {
    /// A target committing into the dataset at `uri` (a local path, `file://`, `s3://`, `memory://`…) through
    /// Lance's own commit handler for that URI. Refused (`InvalidInput`) for a scheme whose Lance handler is not
    /// a conditional put (`file+uring://`, `s3+ddb://`…): nothing could keep a second commit of one key out.
    pub fn new(uri: impl Into<String>) -> sinkpoint::Result<Self> {
        let uri = uri.into();
        check_fenced_scheme(&uri)?;
        Ok(Self { uri, storage_options: HashMap::new(), handler: None, store_wrapper: None, fenced: true })
    }

    /// Lance's storage options for the dataset's object store (for S3: `aws_endpoint`, `aws_region`,
    /// `allow_http`, credentials), as pylance's `storage_options` takes them.
    #[must_use]
    pub fn with_storage_options(mut self, options: HashMap<String, String>) -> Self {
        self.storage_options = options;
        self
    }

    /// The dataset at its latest version, opened with the target's storage options.
    pub async fn open(&self) -> lance::Result<Dataset> {
        let params = ObjectStoreParams { object_store_wrapper: self.store_wrapper.clone(), ..Default::default() };
        DatasetBuilder::from_uri(&self.uri)
            .with_store_params(params)
            .with_storage_options(self.storage_options.clone())
            .load()
            .await
    }

    /// Opens the dataset's object store through `wrapper`: how the benchmarks count the requests a probe makes.
    #[doc(hidden)]
    #[must_use]
    pub fn with_object_store_wrapper(mut self, wrapper: Arc<dyn WrappingObjectStore>) -> Self {
        self.store_wrapper = Some(wrapper);
        self
    }

    /// Commits through `handler` (wrapped in the fence) instead of the URI's default: how tests inject a lost
    /// acknowledgement or a failure before publishing.
    #[must_use]
    pub fn with_commit_handler(mut self, handler: Arc<dyn CommitHandler>) -> Self {
        self.handler = Some(handler);
        self
    }

    /// Drops the key check and the V + 1 fence: a plain rebasing `CommitBuilder` Append, as Lance does by
    /// default. Only for the tests that show the duplicates this lets through; never use it for data.
    #[doc(hidden)]
    #[must_use]
    pub fn unfenced(mut self) -> Self {
        self.fenced = false;
        self
    }

    /// Runs Lance's `cleanup_old_versions` with `policy`, keeping every version a probe may still read: those
    /// after `retention_watermark` ([`sinkpoint::Store::retention_watermark`], the version the key in flight
    /// was prepared against). The probe of a key in flight reads the transaction its commit landed in, for the
    /// checkpoint ids; expiring it turns the answer into Unknown, which `resolve not-committed` settles (the
    /// re-send's key check reads the job's mark, which no cleanup removes). `None`: nothing is in flight,
    /// `policy` applies as given.
    ///
    /// Refused for `policy.delete_unverified`: it deletes every file no version references, which includes the
    /// fragments workers staged and the driver has not committed yet. Lance's default deletes those once they are
    /// 7 days old, so a staged checkpoint must be committed within 7 days.
    pub async fn cleanup_old_versions(
        &self,
        mut policy: CleanupPolicy,
        retention_watermark: Option<u64>,
    ) -> lance::Result<RemovalStats> {
        if policy.delete_unverified {
            return Err(lance::Error::invalid_input(
                "cleanup with delete_unverified deletes the fragments staged for commits not made yet (their files \
                 are referenced by no version): leave it off; Lance deletes unreferenced files once they are 7 days old",
            ));
        }
        if let Some(watermark) = retention_watermark {
            let keep_from = watermark.saturating_add(1);
            policy.before_version = Some(policy.before_version.map_or(keep_from, |v| v.min(keep_from)));
        }
        self.open().await?.cleanup_with_policy(policy).await
    }

    /// The dataset's URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The dataset's data files, with the target's storage options: what
    /// [`sinkpoint::gc::collect_data_files`] takes to delete the files of the job's dropped attempts.
    pub fn data_files(&self) -> LanceDataFiles {
        LanceDataFiles::new(&self.uri).with_storage_options(self.storage_options.clone())
    }

    async fn inner_handler(&self) -> lance::Result<Arc<dyn CommitHandler>> {
        match &self.handler {
            Some(h) => Ok(h.clone()),
            None => commit_handler_from_url(&self.uri, &None).await,
        }
    }

    async fn attempt(&self, commit: &TargetCommit<'_>) -> Attempt {
        let dataset = match self.open().await {
            Ok(d) => d,
            Err(e) => return Attempt::Done(CommitOutcome::Unknown { reason: format!("opening the dataset: {e}") }),
        };
        let read_version = dataset.version().version;
        let fragments = match commit.results.iter().map(decode_fragment).collect::<Result<Vec<_>, _>>() {
            Ok(f) => f,
            Err(reason) => return Attempt::Done(CommitOutcome::NotLanded { reason }),
        };
        let inner = match self.inner_handler().await {
            Ok(h) => h,
            Err(e) => return Attempt::Done(CommitOutcome::NotLanded { reason: format!("no commit handler: {e}") }),
        };
        if !self.fenced {
            // A plain Append with Lance's default retries, so two racing appends both land whatever their timing.
            let transaction = TransactionBuilder::new(read_version, Operation::Append { fragments }).build();
            let result = CommitBuilder::new(Arc::new(dataset)).with_commit_handler(inner).execute(transaction).await;
            return classify(result.map(|_| ()), Reached::Failed);
        }
        let digest = mark::digest(commit.ids, &sorted_files(&fragments));
        let job = commit.key.job.as_str();
        let landed = match mark::read_mark(&dataset.manifest().table_metadata, job) {
            Ok(m) => m,
            Err(reason) => return Attempt::Done(CommitOutcome::NotLanded { reason }),
        };
        match mark::key_check(landed.as_ref(), commit.key.n, commit.epoch, &digest) {
            KeyCheck::Commit => {}
            // Our own earlier attempt landed (its answer was lost): the same commit, so it is committed.
            KeyCheck::AlreadyLanded => return Attempt::Done(CommitOutcome::Committed),
            KeyCheck::Refused(reason) => return Attempt::Done(CommitOutcome::NotLanded { reason }),
        }
        if let Err(reason) = check_staged_files(&dataset, &fragments, commit.ids).await {
            return Attempt::Done(CommitOutcome::NotLanded { reason });
        }
        // Properties go on the Transaction: CommitBuilder::with_transaction_properties is a no-op in 14.0.2.
        let transaction = TransactionBuilder::new(read_version, Operation::Append { fragments })
            .transaction_properties(Some(Arc::new(props::encode(commit))))
            .build();
        let (mark_key, mark_value) = JobMark::new(commit.key.n, commit.epoch, read_version + 1, digest).entry(job);
        let fence = Arc::new(NextVersionOnly::new(inner, read_version + 1).setting_metadata(mark_key, mark_value));
        // Lance must not rebase past V + 1 on its own (no retries), and must not run the table's auto-cleanup
        // inside our commit: it would expire versions and staged files regardless of the retention watermark.
        let result = CommitBuilder::new(Arc::new(dataset))
            .with_commit_handler(fence.clone())
            .with_max_retries(0)
            .with_skip_auto_cleanup(true)
            .execute(transaction)
            .await;
        classify(result.map(|_| ()), fence.reached())
    }
}

/// Refuses a URI whose scheme Lance commits to with an unconditional put.
fn check_fenced_scheme(uri: &str) -> sinkpoint::Result<()> {
    // A plain path (no `scheme://`) is the local filesystem; Windows drive letters have no `//` after the colon.
    let Some((scheme, _)) = uri.split_once("://") else { return Ok(()) };
    if FENCED_SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme)) {
        return Ok(());
    }
    Err(sinkpoint::Error::invalid_input(format!(
        "the Lance URI scheme {scheme:?} ({uri}) commits through Lance's unconditional handler, which cannot keep \
         a second commit of one key out: use a plain path or file:// for a local dataset, or one of {}",
        FENCED_SCHEMES.join(", ")
    )))
}

/// Checks that every data file the fragments name is still there: a Lance cleanup deletes staged files no
/// version references (at once with `delete_unverified`, else after 7 days), and committing a fragment whose file
/// is gone would make every scan of the table fail. `Err` names the missing files and the checkpoints.
async fn check_staged_files(
    dataset: &Dataset,
    fragments: &[lance_table::format::Fragment],
    ids: &[sinkpoint::CheckpointId],
) -> Result<(), String> {
    let store = dataset.object_store(None).await.map_err(|e| format!("opening the dataset's object store: {e}"))?;
    let data_dir = dataset.data_dir();
    let mut paths = Vec::new();
    for file in fragments.iter().flat_map(|f| f.files.iter()) {
        if file.base_id.is_some() {
            return Err(format!(
                "data file {} is in another base of the dataset: sinkpoint commits fragments staged in the \
                 dataset's own data directory",
                file.path
            ));
        }
        paths.push(file.path.clone());
    }
    let missing: Vec<String> = futures::stream::iter(paths)
        .map(|path| {
            let (store, location) = (store.clone(), data_dir.clone().join(path.as_str()));
            async move { store.exists(&location).await.map(|there| (!there).then_some(path)) }
        })
        .buffer_unordered(STAGED_FILE_CHECKS_IN_FLIGHT_MAX)
        .try_filter_map(|gone| async move { Ok(gone) })
        .try_collect()
        .await
        .map_err(|e| format!("checking the staged data files: {e}"))?;
    if missing.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = ids.iter().map(sinkpoint::CheckpointId::as_str).collect();
    Err(format!(
        "staged data files are gone (a Lance cleanup deletes files no version references: at once with \
         delete_unverified, else once they are 7 days old): {missing:?}. Nothing was committed. The checkpoints \
         of this key ({ids:?}) cannot land: un-bind the key and force-abort them, so their inputs are written again"
    ))
}

/// The outcome of one attempt from how far the fence saw it get; Lance's error only words the reason.
fn classify(result: lance::Result<()>, reached: Reached) -> Attempt {
    match (result, reached) {
        (Ok(()), _) | (Err(_), Reached::Published) => Attempt::Done(CommitOutcome::Committed),
        (Err(_), Reached::Refused | Reached::Conflict) => Attempt::Retry,
        (Err(e), Reached::NotCalled) if !e.is_commit_status_unknown() => {
            Attempt::Done(CommitOutcome::NotLanded { reason: e.to_string() })
        }
        (Err(e), _) => Attempt::Done(CommitOutcome::Unknown { reason: e.to_string() }),
    }
}

fn sorted_files(fragments: &[lance_table::format::Fragment]) -> Vec<String> {
    let mut files: Vec<String> = fragments.iter().flat_map(|f| f.files.iter().map(|d| d.path.clone())).collect();
    files.sort_unstable();
    files
}

/// The job's sinkpoint commits in versions `from..=to`, oldest first, each with the data files it appended
/// (sorted). `Err` when a version's transaction cannot be read (cleaned up, or I/O): nothing can be concluded
/// about that range then.
async fn job_commits(dataset: &Dataset, job: &str, from: u64, to: u64) -> Result<Vec<(Recorded, Vec<String>)>, String> {
    let mut out = Vec::new();
    for version in from..=to {
        let transaction = match dataset.read_transaction_by_version(version).await {
            Ok(Some(t)) => t,
            Ok(None) => return Err(format!("version {version} has no transaction file")),
            Err(e) => return Err(format!("version {version} cannot be read (cleaned up?): {e}")),
        };
        let Some(properties) = transaction.transaction_properties.as_deref() else { continue };
        // Another job's properties are never decoded: damage there is not this job's to report.
        if properties.get(props::JOB).map(String::as_str) != Some(job) {
            continue;
        }
        match props::decode(properties)? {
            Some(recorded) if recorded.job == job => {
                let files = match &transaction.operation {
                    Operation::Append { fragments } => sorted_files(fragments),
                    _ => Vec::new(),
                };
                out.push((recorded, files));
            }
            _ => {}
        }
    }
    Ok(out)
}

#[async_trait]
impl Target for LanceTarget {
    async fn version(&self) -> sinkpoint::Result<Option<u64>> {
        match self.open().await {
            Ok(dataset) => Ok(Some(dataset.version().version)),
            Err(e) => Err(sinkpoint::Error::target_with_source(format!("reading the version of {}", self.uri), e)),
        }
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        for _ in 0..=FOREIGN_COMMIT_RETRIES_MAX {
            if let Attempt::Done(outcome) = self.attempt(commit).await {
                return outcome;
            }
        }
        CommitOutcome::NotLanded {
            reason: format!("foreign commits took the next version {FOREIGN_COMMIT_RETRIES_MAX} times in a row"),
        }
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        let dataset = match self.open().await {
            Ok(d) => d,
            Err(e) => return ProbeOutcome::Unknown { reason: format!("opening the dataset: {e}") },
        };
        let job = key.job.as_str();
        let landed = match mark::read_mark(&dataset.manifest().table_metadata, job) {
            Ok(m) => m,
            Err(reason) => return ProbeOutcome::Unknown { reason },
        };
        let unreadable = |reason: String| match &landed {
            Some(mark) => landed_but_unreadable(key.n, mark, &reason),
            None => reason,
        };
        match mark::probe_step(landed.as_ref(), key.n) {
            // The latest version holds no key n: a late attempt would have to land at a version after it,
            // where the next commit's key check finds it first.
            ProbeStep::NotCommitted => ProbeOutcome::NotCommitted,
            ProbeStep::ReadIds { version } => match job_commits(&dataset, job, version, version).await {
                Ok(commits) => match commits.into_iter().find(|(c, _)| c.n == key.n) {
                    Some((c, _)) => ProbeOutcome::Committed { ids: Some(c.ids) },
                    None => ProbeOutcome::Unknown {
                        reason: format!(
                            "the job's mark says key {} landed at version {version}, whose transaction \
                             does not record it (the mark or the transaction is damaged)",
                            key.n
                        ),
                    },
                },
                Err(reason) => ProbeOutcome::Unknown { reason: unreadable(reason) },
            },
            // Only a second driver or a zombie lands later keys over ours; which set key n holds is in the
            // versions since its intent. A probe before any intent only asks whether the key is there.
            ProbeStep::LandedBefore { version } => match prepared_version {
                None => ProbeOutcome::Committed { ids: None },
                Some(prepared) => match job_commits(&dataset, job, prepared + 1, version).await {
                    Ok(commits) => match commits.into_iter().find(|(c, _)| c.n == key.n) {
                        Some((c, _)) => ProbeOutcome::Committed { ids: Some(c.ids) },
                        None => ProbeOutcome::Unknown {
                            reason: format!(
                                "a later key of the job landed at version {version}, but key {} is in none of the \
                                 versions since its intent ({}..={version})",
                                key.n,
                                prepared + 1
                            ),
                        },
                    },
                    Err(reason) => ProbeOutcome::Unknown { reason: unreadable(reason) },
                },
            },
        }
    }
}

/// Why a probe cannot say which checkpoints a landed key holds, and the ways out.
fn landed_but_unreadable(n: u64, mark: &JobMark, reason: &str) -> String {
    format!(
        "key {n} landed (the job's mark: epoch {} at version {}), but which checkpoints it holds cannot be read \
         ({reason}): its version was cleaned up past the retention watermark. Nothing can land twice, whichever \
         verdict is given: `sinkpoint resolve {n} not-committed` re-sends the key, and the re-send is known as the \
         landed commit when this store's epoch sent it ({}); after the store was reopened, a landed key {n} of a \
         job with one driver is this store's, and `sinkpoint resolve {n} committed --i-checked-the-table` settles it",
        mark.epoch, mark.version, mark.epoch
    )
}
