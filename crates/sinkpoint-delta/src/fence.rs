//! The key fence: the job's Delta application id, the key check and the probe decision on its `txn`, and
//! [`NextVersionOnly`], a log store that lets only one commit version through.
//!
//! Each sinkpoint commit of key n carries the Delta action `txn { appId: app_id(job), version: n }`. Delta
//! keeps the latest `txn` of every app id in the table's state: log replay carries it through every commit and
//! every checkpoint, and log cleanup removes only commit files a checkpoint already covers. So the latest
//! snapshot names each job's last landed key, whatever the table's history, and reading it costs one snapshot
//! load (the last checkpoint and the commits after it), never a walk of the history.
//!
//! The `txn` has no `lastUpdated` (it is written without one), so `delta.setTransactionRetentionDuration`,
//! which expires only transactions that carry it, never removes it.
//!
//! Public so that the decisions can be tested and read on their own; the adapter's API is
//! [`crate::DeltaTarget`].

use std::fmt;
use std::sync::{Arc, Mutex};

use deltalake::DeltaResult;
use deltalake::kernel::Version;
use deltalake::kernel::transaction::TransactionError;
use deltalake::logstore::object_store::ObjectStore;
use deltalake::logstore::{CommitOrBytes, LogStore, LogStoreConfig, LogStoreRef};
use sinkpoint::JobId;

/// A job's Delta application id is this prefix followed by the job id.
pub const APP_ID_PREFIX: &str = "sinkpoint.job.";

/// The name delta-rs gives the log store that commits with a put-if-absent of the object store (a local rename
/// without replace, a conditional put): the only kind the fence is sound on.
pub const CONDITIONAL_LOG_STORE: &str = "DefaultLogStore";

/// The Delta application id of `job`'s `txn`: one per job, so two jobs writing one table never fence each
/// other, and the same for every store and epoch of the job, so a takeover continues the job's keys.
pub fn app_id(job: &JobId) -> String {
    format!("{APP_ID_PREFIX}{job}")
}

/// What the key check of a commit decides from the job's `txn` in the snapshot the commit is built on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyCheck {
    /// The job's last landed key is n − 1 (or nothing landed and n is 0): commit at the next version.
    Commit,
    /// Key n must not land on this snapshot: it is there already, a later key is, or key n − 1 is missing.
    Refused(String),
}

/// The key check of key `n` against `latest`, the job's `txn` version in the snapshot the commit builds on.
pub fn key_check(latest: Option<i64>, n: u64) -> KeyCheck {
    let Ok(wanted) = i64::try_from(n) else {
        return KeyCheck::Refused(format!(
            "key {n} is above {}, the largest Delta txn version: this job cannot commit further into a Delta \
             table; start a new job (a new job id) to go on",
            i64::MAX
        ));
    };
    match latest {
        None if wanted == 0 => KeyCheck::Commit,
        None => KeyCheck::Refused(format!(
            "the table holds no key of this job, and key {n} needs key {} there first: the table is not the one \
             the job committed into (recreated, or restored past the job's first key)",
            wanted - 1
        )),
        Some(v) if v < 0 => KeyCheck::Refused(damaged(v)),
        Some(v) if v == wanted - 1 => KeyCheck::Commit,
        Some(v) if v >= wanted => KeyCheck::Refused(format!(
            "key {n} is taken: the job's last landed key is {v} (an earlier send of this key landed, or another \
             writer of the job committed it)"
        )),
        Some(v) => KeyCheck::Refused(format!(
            "the job's last landed key is {v}, and key {n} needs key {} there first (the table was restored to \
             an older version?)",
            wanted - 1
        )),
    }
}

/// Whether key `n` is in a table whose latest snapshot holds `latest` as the job's `txn` version. Keys land in
/// order (the key check), so every key up to the latest landed. `Err` names damage: a negative version.
pub fn probe_landed(latest: Option<i64>, n: u64) -> Result<bool, String> {
    match latest {
        None => Ok(false),
        Some(v) if v < 0 => Err(damaged(v)),
        // A non-negative i64 always fits in a u64.
        Some(v) => Ok(u64::try_from(v).is_ok_and(|v| v >= n)),
    }
}

fn damaged(v: i64) -> String {
    format!(
        "the job's txn version in the table is {v}, a negative number sinkpoint never writes: the table's log is \
         damaged or another writer uses this job's app id; find out which before going on"
    )
}

/// How far one fenced commit attempt got: this, not delta-rs's error text, decides NotLanded vs Unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reached {
    /// The log store was never asked to write the commit (delta-rs failed or saw the table move first).
    NotCalled,
    /// delta-rs asked for another version than V + 1; nothing was written.
    Refused,
    /// The real log store found V + 1 taken; nothing was written.
    Conflict,
    /// The real log store wrote V + 1: the commit landed.
    Published,
    /// The real log store failed some other way: the commit may or may not be there.
    Failed,
}

/// Wraps the table's real log store and lets only commit version `expected` (V + 1) through.
///
/// With `max_retries = 0`, delta-rs 1.1.x writes a commit built on snapshot V at V + 1 or not at all; this
/// wrapper makes that a property of the adapter rather than of delta-rs's retry loop, and records how far the
/// write got. Every other method is the inner store's.
pub struct NextVersionOnly {
    inner: LogStoreRef,
    expected: Version,
    reached: Mutex<Reached>,
}

impl NextVersionOnly {
    /// A fence letting through only `expected` (V + 1), forwarding it to `inner`.
    pub fn new(inner: LogStoreRef, expected: Version) -> Self {
        Self { inner, expected, reached: Mutex::new(Reached::NotCalled) }
    }

    /// How far the attempt got.
    pub fn reached(&self) -> Reached {
        // A poisoned lock means a panic mid-commit: nothing proves the commit is absent.
        self.reached.lock().map(|r| *r).unwrap_or(Reached::Failed)
    }

    fn set(&self, reached: Reached) {
        if let Ok(mut r) = self.reached.lock() {
            *r = reached;
        }
    }
}

impl fmt::Debug for NextVersionOnly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NextVersionOnly").field("expected", &self.expected).finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl LogStore for NextVersionOnly {
    fn name(&self) -> String {
        // delta-rs passes the commit's bytes (not a temporary file) to the stores it knows by this name.
        self.inner.name()
    }

    async fn refresh(&self) -> DeltaResult<()> {
        self.inner.refresh().await
    }

    async fn read_commit_entry(&self, version: Version) -> DeltaResult<Option<bytes::Bytes>> {
        self.inner.read_commit_entry(version).await
    }

    async fn write_commit_entry(
        &self,
        version: Version,
        commit_or_bytes: CommitOrBytes,
        operation_id: uuid::Uuid,
    ) -> Result<(), TransactionError> {
        if version != self.expected {
            self.set(Reached::Refused);
            return Err(TransactionError::VersionAlreadyExists(version));
        }
        let result = self.inner.write_commit_entry(version, commit_or_bytes, operation_id).await;
        self.set(match &result {
            Ok(()) => Reached::Published,
            Err(TransactionError::VersionAlreadyExists(_)) => Reached::Conflict,
            Err(_) => Reached::Failed,
        });
        result
    }

    async fn abort_commit_entry(
        &self,
        version: Version,
        commit_or_bytes: CommitOrBytes,
        operation_id: uuid::Uuid,
    ) -> Result<(), TransactionError> {
        self.inner.abort_commit_entry(version, commit_or_bytes, operation_id).await
    }

    async fn get_latest_version(&self, start_version: Version) -> DeltaResult<Version> {
        self.inner.get_latest_version(start_version).await
    }

    fn object_store(&self, operation_id: Option<uuid::Uuid>) -> Arc<dyn ObjectStore> {
        self.inner.object_store(operation_id)
    }

    fn root_object_store(&self, operation_id: Option<uuid::Uuid>) -> Arc<dyn ObjectStore> {
        self.inner.root_object_store(operation_id)
    }

    fn transaction_url(&self, operation_id: Option<uuid::Uuid>) -> DeltaResult<url::Url> {
        self.inner.transaction_url(operation_id)
    }

    async fn is_delta_table_location(&self) -> DeltaResult<bool> {
        self.inner.is_delta_table_location().await
    }

    fn config(&self) -> &LogStoreConfig {
        self.inner.config()
    }
}
