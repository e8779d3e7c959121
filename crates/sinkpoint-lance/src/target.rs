//! [`LanceTarget`]: the sinkpoint commit protocol over one Lance dataset.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use lance::Dataset;
use lance::dataset::CommitBuilder;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::cleanup::{CleanupPolicy, RemovalStats};
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance_table::io::commit::{CommitHandler, commit_handler_from_url};
use sinkpoint::{CommitKey, CommitOutcome, ProbeOutcome, Target, TargetCommit};

use crate::LanceDataFiles;
use crate::fence::{NextVersionOnly, Reached};
use crate::limits::FOREIGN_COMMIT_RETRIES_MAX;
use crate::props::{self, Recorded};
use crate::results::decode_fragment;

/// A sinkpoint [`Target`] over the Lance dataset at `uri` (which must exist: create it with its schema first).
#[derive(Clone, Debug)]
pub struct LanceTarget {
    uri: String,
    storage_options: HashMap<String, String>,
    handler: Option<Arc<dyn CommitHandler>>,
    fenced: bool,
}

/// What one fenced attempt ended in.
enum Attempt {
    Done(CommitOutcome),
    /// A foreign commit took V + 1 first; nothing of ours was published.
    Retry,
}

impl LanceTarget {
    /// A target committing into the dataset at `uri` through Lance's own commit handler for that URI.
    pub fn new(uri: impl Into<String>) -> Self {
        Self { uri: uri.into(), storage_options: HashMap::new(), handler: None, fenced: true }
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
        DatasetBuilder::from_uri(&self.uri).with_storage_options(self.storage_options.clone()).load().await
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
    /// was prepared against). A probe reads the transactions of the versions since its intent; expiring them
    /// turns its answer into Unknown, which only an operator can settle. `None`: nothing is in flight, `policy`
    /// applies as given.
    pub async fn cleanup_old_versions(
        &self,
        mut policy: CleanupPolicy,
        retention_watermark: Option<u64>,
    ) -> lance::Result<RemovalStats> {
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
    /// [`sinkpoint::collect::collect_data_files`] takes to delete the files of the job's dropped attempts.
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
        // Unfenced is a plain Append: no key check either, exactly what Lance does by default.
        match if self.fenced { key_check(&dataset, commit, read_version).await } else { Ok(None) } {
            Ok(None) => {}
            Ok(Some(outcome)) => return Attempt::Done(outcome),
            Err(reason) => return Attempt::Done(CommitOutcome::Unknown { reason }),
        }
        let fragments = match commit.results.iter().map(decode_fragment).collect::<Result<Vec<_>, _>>() {
            Ok(f) => f,
            Err(reason) => return Attempt::Done(CommitOutcome::NotLanded { reason }),
        };
        // Properties go on the Transaction: CommitBuilder::with_transaction_properties is a no-op in 14.0.2.
        let transaction = TransactionBuilder::new(read_version, Operation::Append { fragments })
            .transaction_properties(Some(Arc::new(props::encode(commit))))
            .build();
        let inner = match self.inner_handler().await {
            Ok(h) => h,
            Err(e) => return Attempt::Done(CommitOutcome::NotLanded { reason: format!("no commit handler: {e}") }),
        };
        let fence = Arc::new(NextVersionOnly::new(inner.clone(), read_version + 1));
        let handler: Arc<dyn CommitHandler> = if self.fenced { fence.clone() as Arc<dyn CommitHandler> } else { inner };
        let builder = CommitBuilder::new(Arc::new(dataset)).with_commit_handler(handler);
        // Fenced, Lance must not rebase past V + 1 on its own; unfenced keeps Lance's default retries, so two
        // racing appends both land whatever their timing (with none, the loser's conflict hid the duplicate).
        let builder = if self.fenced { builder.with_max_retries(0) } else { builder };
        let result = builder.execute(transaction).await;
        classify(result.map(|_| ()), if self.fenced { fence.reached() } else { Reached::Failed })
    }
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

/// Checks, on the table as of `read_version`, that key n of the job is not there yet and no newer epoch
/// wrote after the intent. `Ok(None)`: commit. Only versions after the prepared one are read: key n cannot
/// land before its intent, which was recorded after the prepared version was read.
async fn key_check(
    dataset: &Dataset,
    commit: &TargetCommit<'_>,
    read_version: u64,
) -> Result<Option<CommitOutcome>, String> {
    let from = commit.prepared_version.map_or(1, |v| v + 1);
    for (recorded, files) in job_commits(dataset, commit.key.job.as_str(), from, read_version).await? {
        if recorded.n == commit.key.n {
            // The same commit, data files included: two stores without a mirror share an epoch and may hold
            // the same ids, so epoch and ids alone would take another driver's commit for ours.
            let ours = recorded.epoch == commit.epoch && recorded.ids == commit.ids && files == data_files(commit)?;
            return Ok(Some(if ours {
                // Our own earlier attempt landed (its answer was lost): the same commit, so it is committed.
                CommitOutcome::Committed
            } else {
                CommitOutcome::NotLanded {
                    reason: format!("key {} is taken by epoch {} for {:?}", recorded.n, recorded.epoch, recorded.ids),
                }
            }));
        }
        if recorded.n > commit.key.n || recorded.epoch > commit.epoch {
            return Ok(Some(CommitOutcome::NotLanded {
                reason: format!("fenced: key {} of epoch {} landed after the intent", recorded.n, recorded.epoch),
            }));
        }
    }
    Ok(None)
}

/// The data files a commit's fragments name, sorted.
fn data_files(commit: &TargetCommit<'_>) -> Result<Vec<String>, String> {
    let fragments = commit.results.iter().map(decode_fragment).collect::<Result<Vec<_>, _>>()?;
    Ok(sorted_files(&fragments))
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
        let from = prepared_version.map_or(1, |v| v + 1);
        match job_commits(&dataset, key.job.as_str(), from, dataset.version().version).await {
            Ok(commits) => match commits.into_iter().find(|(c, _)| c.n == key.n) {
                Some((c, _)) => ProbeOutcome::Committed { ids: Some(c.ids) },
                // Every version since the intent was read and none holds the key; a late attempt would have to
                // land at a version after the latest, where the next commit's key check finds it first.
                None => ProbeOutcome::NotCommitted,
            },
            Err(reason) => ProbeOutcome::Unknown { reason },
        }
    }
}
