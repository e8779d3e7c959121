//! The mirror's object-store access: one dedicated runtime for every call (so the store's connections never
//! depend on a caller's runtime being driven), reads that tell "absent" from "failed", and the one way to put:
//! the crate's create-once primitive (`crate::create_once`), whose ambiguous outcome is settled by reading the
//! object back, never assumed.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt as _};
use tokio::runtime::Runtime;

use crate::create_once::{CreateError, CreateOnce, Created};
use crate::error::{Error, Result};
use crate::limits::{MIRROR_OBJECT_BYTES_MAX, MIRROR_PUT_ATTEMPTS_MAX, MIRROR_READS_CONCURRENT_MAX};
use crate::mirror::layout::Layout;

/// A runtime that may be dropped anywhere, an async context included.
#[derive(Debug)]
struct OwnedRuntime(Option<Runtime>);

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The object store, the layout under its prefix, and the runtime every call runs on.
#[derive(Debug)]
pub(crate) struct Remote {
    store: Arc<dyn ObjectStore>,
    pub(crate) layout: Layout,
    rt: OwnedRuntime,
    /// The most one request may take (wall time): a request still running then is abandoned, and a put is
    /// then ambiguous like any other failed one.
    timeout: std::time::Duration,
}

impl Remote {
    pub(crate) fn new(store: Arc<dyn ObjectStore>, prefix: Path, request_timeout_ms: u64) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sinkpoint-mirror-io")
            .enable_all()
            .build()?;
        let timeout = std::time::Duration::from_millis(request_timeout_ms.max(1));
        Ok(Self { store, layout: Layout::new(prefix), rt: OwnedRuntime(Some(rt)), timeout })
    }

    /// Where the mirror lives, for messages.
    pub(crate) fn describe(&self, path: &Path) -> String {
        describe(path, &self.store.to_string())
    }

    /// The mirror's runtime. Its `block_on` is called from threads that are not driving a runtime: the writer,
    /// the uploader, `spawn_blocking`.
    fn runtime(&self) -> Result<&Runtime> {
        self.rt.0.as_ref().ok_or_else(|| Error::bug("the mirror's runtime is gone"))
    }

    /// Runs one request to completion on the mirror's runtime, within the request timeout.
    fn block_on<T, F: Future<Output = object_store::Result<T>>>(&self, future: F) -> Result<object_store::Result<T>> {
        Ok(self.runtime()?.block_on(timed(self.timeout, future)))
    }

    /// The object's bytes, or `None` if it is absent.
    pub(crate) fn get(&self, path: &Path) -> Result<Option<Bytes>> {
        self.get_many(std::slice::from_ref(path))?.pop().ok_or_else(|| Error::bug("one read, no answer"))?
    }

    /// Each object's bytes (`None` if absent), in the order of `paths`, read up to
    /// [`MIRROR_READS_CONCURRENT_MAX`] at a time (each within the request timeout). Each answer stands alone, so
    /// a caller that stops at the first absent object never sees a later one's error, as if it had read them in
    /// turn: a restore reads a long log in a fraction of the round trips' sum.
    pub(crate) fn get_many(&self, paths: &[Path]) -> Result<Vec<Result<Option<Bytes>>>> {
        let timeout = self.timeout;
        let reads = futures::stream::iter(paths.iter().cloned())
            .map(|path| {
                let store = self.store.clone();
                timed(timeout, async move {
                    let got = store.get(&path).await?;
                    if got.meta.size > MIRROR_OBJECT_BYTES_MAX {
                        return Ok(Err(got.meta.size));
                    }
                    got.bytes().await.map(Ok)
                })
            })
            .buffered(MIRROR_READS_CONCURRENT_MAX);
        let results: Vec<_> = self.runtime()?.block_on(reads.collect());
        Ok(paths
            .iter()
            .zip(results)
            .map(|(path, result)| match result {
                Ok(Ok(bytes)) => Ok(Some(bytes)),
                Ok(Err(size)) => {
                    Err(Error::corrupt(format!("{}: {size} bytes is over the object limit", self.describe(path))))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e.into()),
            })
            .collect())
    }

    /// Every object under `dir` of the layout (`manifest`, `wal`, `snapshot`).
    pub(crate) fn list(&self, dir: &str) -> Result<Vec<ObjectMeta>> {
        let prefix = self.layout.dir(dir);
        let store = self.store.clone();
        Ok(self.block_on(async move { store.list(Some(&prefix)).try_collect::<Vec<_>>().await })??)
    }

    /// The names of the prefixes one level under the mirror's own that hold a manifest (at most `limit`), for the
    /// message of a mirror that holds none: a URL one level too high names the prefix above a job's mirror.
    pub(crate) fn mirrors_below(&self, limit: usize) -> Result<Vec<String>> {
        let store = self.store.clone();
        let prefix = self.layout.prefix().clone();
        let listed = self.block_on(async move { store.list_with_delimiter(Some(&prefix)).await })??;
        let mut found = Vec::new();
        for child in listed.common_prefixes.into_iter().take(limit) {
            let store = self.store.clone();
            let manifests = child.clone().join("manifest");
            let holds = self.block_on(async move { store.list(Some(&manifests)).next().await.transpose() })??;
            if holds.is_some() {
                found.extend(child.filename().map(str::to_owned));
            }
        }
        Ok(found)
    }

    /// Deletes one object; an absent one is already deleted.
    pub(crate) fn delete(&self, path: &Path) -> Result<()> {
        let store = self.store.clone();
        match self.block_on(async move { store.delete(path).await })? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates `path` holding `bytes` and settles what is there, blocking on the mirror's runtime: the create-once
    /// primitive in its settling mode, each request within the timeout, a read-back within the object limit. A put
    /// that fails ambiguously (a timeout, an error after it may have landed, a retry reporting `AlreadyExists`) is
    /// resolved by reading the object back and comparing bytes, which carry the writer's unique tag. If it cannot
    /// be settled within [`MIRROR_PUT_ATTEMPTS_MAX`] attempts the error says so and poisons the store: nothing is
    /// assumed.
    pub(crate) fn put_settled(&self, path: &Path, bytes: &Bytes) -> Result<Created> {
        let create =
            CreateOnce::settling(MIRROR_PUT_ATTEMPTS_MAX).timeout(self.timeout).read_bytes_max(MIRROR_OBJECT_BYTES_MAX);
        match self.runtime()?.block_on(create.create(self.store.as_ref(), path, bytes)) {
            Ok(created) => Ok(created),
            Err(CreateError::Unsupported(e)) => Err(Error::from(e)),
            Err(CreateError::Unsettled { attempts, last }) => Err(Error::poisoned(format!(
                "the put of {} could not be settled in {attempts} attempts (last: {last}); whether it landed is \
                 unknown",
                self.describe(path)
            ))),
        }
    }
}

/// `future` within `timeout`: a request still running then is abandoned, and fails like any other.
async fn timed<T>(
    timeout: std::time::Duration,
    future: impl Future<Output = object_store::Result<T>>,
) -> object_store::Result<T> {
    match tokio::time::timeout(timeout, future).await {
        Ok(result) => result,
        Err(_) => Err(object_store::Error::Generic {
            store: "sinkpoint mirror",
            source: format!("the request timed out after {} ms", timeout.as_millis()).into(),
        }),
    }
}

/// Names `path` in `store` for a message, as the URL an operator would pass (`file:///dir/prefix`,
/// `s3://bucket/prefix`) when the store is a local directory or S3: object_store's paths drop the leading `/` of
/// a local path, and its stores print as type names. Any other store is named as it prints itself; an empty
/// prefix is then the store's root, not an empty word that would print "the mirror at  in".
pub(crate) fn describe(path: &Path, store: &str) -> String {
    let inner =
        |name: &str| store.strip_prefix(name).and_then(|s| s.strip_prefix('(')).and_then(|s| s.strip_suffix(')'));
    if let Some(root) = inner("LocalFileSystem") {
        // The root is a `file://` URL ending in `/`.
        format!("{root}{path}")
    } else if let Some(bucket) = inner("AmazonS3") {
        format!("s3://{bucket}/{path}")
    } else if path.as_ref().is_empty() {
        format!("the root of {store}")
    } else {
        format!("{path} in {store}")
    }
}

#[cfg(test)]
mod describe_tests {
    use super::*;

    #[test]
    fn an_empty_prefix_is_named_the_root_without_a_double_space() {
        let root = describe(&Path::from(""), "S3(bucket)");
        assert_eq!(root, "the root of S3(bucket)");
        assert!(!format!("the mirror at {root}").contains("  "));
        assert_eq!(describe(&Path::from("jobs/a"), "S3(bucket)"), "jobs/a in S3(bucket)");
    }

    /// A local directory and an S3 bucket are named by the URL an operator passes, with the leading `/`.
    #[test]
    fn a_local_directory_and_a_bucket_are_named_as_urls() {
        let local = object_store::local::LocalFileSystem::new();
        assert_eq!(describe(&Path::from("tmp/m/job"), &local.to_string()), "file:///tmp/m/job");
        assert_eq!(describe(&Path::from("jobs/a"), "AmazonS3(bucket)"), "s3://bucket/jobs/a");
    }
}
