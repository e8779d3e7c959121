//! The reference target: an append-only table kept in any `object_store` (a local directory by default).
//!
//! Layout under the table's prefix:
//! - `data/{name}`: data files written by workers (invisible until a commit references them);
//! - `_commits/{job}/{n:020}`: one commit object per key, created with `PutMode::Create` under a name derived
//!   from the key, so a key can never land twice (key exclusivity), and refused unless `{n-1}` exists and has
//!   an epoch no newer than the commit's (a zombie's late commit is refused). The object holds the key, the
//!   covered ids, the epoch, the final flag and the data files, so a commit is atomic with its data.
//!
//! Commits are never deleted, so a probe that finds no object under a key knows it is not committed.
//!
//! The `PutMode::Create` of the commit object is what keeps a zombie writer away from the table: fencing through
//! the mirror refuses a stale writer at its next store call, but a zombie paused mid-commit reaches this table
//! anyway, and only the conditional create (with the check of key `n - 1`) refuses its late commit. It is the
//! crate's one create-once primitive (`crate::create_once`) in its reporting mode: an `AlreadyExists` is read back
//! to tell a lost ack of our own commit from another writer's, and any other failure is the commit's `Unknown`.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

use crate::commit::{CommitOutcome, ProbeOutcome, Target, TargetCommit};
use crate::create_once::{CreateOnce, Created, put_create};
use crate::error::{Error, Result};
use crate::gc::files::{DataFiles, FileStat};
use crate::types::{CheckpointId, Epoch, Format, JobId, WriteResult};
use crate::wal::record::{decode_value, encode_value};

/// One commit object of a [`DirTable`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub struct DirCommitRecord {
    /// The job.
    pub job: JobId,
    /// The key's number.
    pub n: u64,
    /// The writer's epoch.
    pub epoch: Epoch,
    /// The covered checkpoints, sorted.
    pub ids: Vec<CheckpointId>,
    /// The data files it publishes (the write results' bytes, as paths relative to the table).
    pub files: Vec<String>,
    /// Whether it is the job's last commit.
    pub final_commit: bool,
}

/// An append-only table in an object store; see the module docs for the layout and the guarantees.
#[derive(Clone, Debug)]
pub struct DirTable {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
}

impl DirTable {
    /// A table under `prefix` of `store`.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path) -> Self {
        Self { store, prefix }
    }

    /// A table in a local directory (created if missing), every file fsynced before its put returns.
    pub fn local(dir: impl AsRef<std::path::Path>) -> Result<Self> {
        std::fs::create_dir_all(dir.as_ref())?;
        let fs = object_store::local::LocalFileSystem::new_with_prefix(dir.as_ref())?.with_fsync(true);
        Ok(Self::new(Arc::new(fs), Path::default()))
    }

    fn commit_path(&self, job: &JobId, n: u64) -> Path {
        self.prefix.clone().join("_commits").join(job.as_str()).join(format!("{n:020}"))
    }

    fn data_path(&self, name: &str) -> Path {
        self.prefix.clone().join("data").join(name)
    }

    /// Writes a data file (a worker's output, invisible until a commit references it) and returns the write
    /// result naming it. A data file is written once: a name that exists is refused (`InvalidInput`), so name
    /// each attempt's files apart (the attempt, a session id, a UUID). The collector judges a dropped attempt's
    /// file by its age and deletes it afterwards; a rewrite of that name in between would be deleted with it,
    /// under a newer attempt that staged it (docs/protocols/collector.md).
    pub async fn write_data_file(&self, name: &str, content: Vec<u8>) -> Result<WriteResult> {
        CheckpointId::new(name)?; // The same safe alphabet as ids: a single path segment.
        // Never settled by a read-back: a data file's bytes carry no writer's tag, so equal bytes could be another
        // attempt's file of that name, one the collector may be deleting.
        match put_create(self.store.as_ref(), &self.data_path(name), Bytes::from(content), None).await {
            Ok(()) => WriteResult::new(Format::Other("dir-table".into()), name.as_bytes().to_vec()),
            Err(object_store::Error::AlreadyExists { .. }) => Err(Error::invalid_input(format!(
                "data file {name} exists: a data file is written once (the collector may be deleting a dropped \
                 attempt's file of that name). Write this attempt's file under a name of its own (add the \
                 attempt or a session id)"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    async fn read_commit(&self, job: &JobId, n: u64) -> Result<Option<DirCommitRecord>> {
        let path = self.commit_path(job, n);
        match self.store.get(&path).await {
            Ok(got) => {
                let bytes = got.bytes().await?;
                decode_value(&bytes, &|| format!("dir table commit object {path}")).map(Some)
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Every commit object in the table, of every job, in (job, key) order.
    pub async fn commits(&self) -> Result<Vec<DirCommitRecord>> {
        let root = self.prefix.clone().join("_commits");
        let mut metas: Vec<_> = self.store.list(Some(&root)).try_collect().await?;
        metas.sort_by(|a, b| a.location.cmp(&b.location));
        let mut out = Vec::with_capacity(metas.len());
        for meta in metas {
            let bytes = self.store.get(&meta.location).await?.bytes().await?;
            out.push(decode_value(&bytes, &|| format!("dir table commit object {}", meta.location))?);
        }
        Ok(out)
    }

    /// The table's content: every line of every data file that a commit references, in commit order. A data
    /// file referenced twice is read twice: that is what a duplicate commit would do to a real table.
    pub async fn rows(&self) -> Result<Vec<String>> {
        let mut rows = Vec::new();
        for commit in self.commits().await? {
            for file in &commit.files {
                let bytes = self.store.get(&self.data_path(file)).await?.bytes().await?;
                let text = String::from_utf8(bytes.to_vec())
                    .map_err(|_| Error::corrupt(format!("dir table data file {file} is not UTF-8")))?;
                rows.extend(text.lines().map(str::to_owned));
            }
        }
        Ok(rows)
    }
}

/// The reference table's data files: a write result is one file name under `data/`; every commit of every job
/// references its files forever (commits are never deleted).
#[async_trait]
impl DataFiles for DirTable {
    fn files_of(&self, result: &WriteResult) -> Result<Vec<String>> {
        let name = std::str::from_utf8(result.bytes())
            .map_err(|_| Error::corrupt("a dir table write result is not a UTF-8 file name"))?;
        CheckpointId::new(name).map_err(|_| Error::corrupt(format!("a dir table write result names {name:?}")))?;
        Ok(vec![name.to_owned()])
    }

    async fn referenced(&self) -> Result<BTreeSet<String>> {
        Ok(self.commits().await?.into_iter().flat_map(|c| c.files).collect())
    }

    async fn stat(&self, file: &str) -> Result<Option<FileStat>> {
        match self.store.head(&self.data_path(file)).await {
            Ok(meta) => Ok(Some(FileStat {
                bytes: meta.size,
                modified_ms: u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0),
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn delete(&self, file: &str) -> Result<()> {
        match self.store.delete(&self.data_path(file)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait]
impl Target for DirTable {
    /// No version: the probe reads the key's own commit object and needs no bound. Counting the commits here
    /// would list every commit of every job before each key, quadratic over a table's life.
    async fn version(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        let job = &commit.key.job;
        let n = commit.key.n;
        if n > 0 {
            match self.read_commit(job, n - 1).await {
                Ok(Some(previous)) if previous.epoch > commit.epoch => {
                    return CommitOutcome::NotLanded {
                        reason: format!(
                            "key {} was committed by epoch {}, newer than {}",
                            n - 1,
                            previous.epoch,
                            commit.epoch
                        ),
                    };
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    return CommitOutcome::NotLanded { reason: format!("key {} is not in the table", n - 1) };
                }
                Err(e) => return CommitOutcome::NotLanded { reason: format!("reading key {}: {e}", n - 1) },
            }
        }
        let files: Result<Vec<String>> = commit
            .results
            .iter()
            .map(|r| {
                String::from_utf8(r.bytes().to_vec())
                    .map_err(|_| Error::corrupt("a dir table write result is not a UTF-8 file name"))
            })
            .collect();
        let files = match files {
            Ok(f) => f,
            Err(e) => return CommitOutcome::NotLanded { reason: e.to_string() },
        };
        let record = DirCommitRecord {
            job: job.clone(),
            n,
            epoch: commit.epoch,
            ids: commit.ids.to_vec(),
            files,
            final_commit: commit.final_commit,
        };
        let bytes = match encode_value(&record) {
            Ok(b) => b,
            Err(e) => return CommitOutcome::NotLanded { reason: e.to_string() },
        };
        let path = self.commit_path(job, n);
        // The reporting mode: a failed put is this commit's `Unknown`, which the committer settles by a probe.
        match CreateOnce::reporting().create(self.store.as_ref(), &path, &Bytes::from(bytes)).await {
            // Ours, or our own earlier attempt's whose ack was lost: the same commit, so it is committed.
            Ok(Created::Ours) => CommitOutcome::Committed,
            Ok(Created::Taken(found)) => {
                match decode_value::<DirCommitRecord>(&found, &|| format!("dir table commit object {path}")) {
                    // The same commit in other bytes is ours too.
                    Ok(existing) if existing == record => CommitOutcome::Committed,
                    Ok(existing) => CommitOutcome::NotLanded {
                        reason: format!(
                            "key {n} is taken by a commit of epoch {} for {:?}",
                            existing.epoch, existing.ids
                        ),
                    },
                    Err(_) => CommitOutcome::Unknown { reason: format!("key {n} exists but cannot be read") },
                }
            }
            // A failed put may still have landed: never report NotLanded here.
            Err(e) => CommitOutcome::Unknown { reason: e.to_string() },
        }
    }

    async fn probe(&self, key: &crate::types::CommitKey, _prepared_version: Option<u64>) -> ProbeOutcome {
        match self.read_commit(&key.job, key.n).await {
            Ok(Some(record)) => ProbeOutcome::Committed { ids: Some(record.ids) },
            Ok(None) => ProbeOutcome::NotCommitted,
            Err(e) => ProbeOutcome::Unknown { reason: e.to_string() },
        }
    }
}

#[cfg(all(test, feature = "testkit"))]
mod tests {
    use object_store::memory::InMemory;

    use super::*;
    use crate::testkit::FaultStore;
    use crate::types::CommitKey;

    /// One key the way the committer makes it: `version` before the intent, the probe of the new key, the
    /// commit. Returns how many objects its listings returned.
    async fn commit_key(table: &DirTable, store: &FaultStore<InMemory>, job: &JobId, n: u64) -> u64 {
        let before = store.counts().listed;
        let key = CommitKey { job: job.clone(), n };
        let version = table.version().await.unwrap();
        assert!(matches!(table.probe(&key, None).await, ProbeOutcome::NotCommitted));
        let name = format!("{job}-{n}");
        let result = table.write_data_file(&name, b"row\n".to_vec()).await.unwrap();
        let ids = [CheckpointId::new(name).unwrap()];
        let commit = TargetCommit {
            key: &key,
            ids: &ids,
            epoch: 1,
            results: std::slice::from_ref(&result),
            final_commit: false,
            prepared_version: version,
        };
        assert!(matches!(table.commit(&commit).await, CommitOutcome::Committed));
        store.counts().listed - before
    }

    /// A `version` that lists the commits would make commit k of a table shared with other jobs cost a listing
    /// of everything committed before it (quadratic over its life): the objects listed per commit stay flat.
    #[tokio::test]
    async fn the_objects_listed_per_commit_stay_constant_as_the_table_grows() {
        let store = FaultStore::new(InMemory::new());
        let table = DirTable::new(Arc::new(store.clone()), Path::from("t"));
        let other = JobId::new("other-job").unwrap();
        for n in 0..10 {
            commit_key(&table, &store, &other, n).await;
        }
        let job = JobId::new("job").unwrap();
        let mut listed = Vec::new();
        for n in 0..10 {
            listed.push(commit_key(&table, &store, &job, n).await);
        }
        assert!(listed.iter().all(|&l| l == listed[0]), "objects listed per commit grow with the table: {listed:?}");
    }
}
