//! Proves every outcome of the one conditional create, the ambiguous ones above all: a create on an empty path,
//! a lost acknowledgement settled as ours, another writer's object handed back, our own earlier attempt found by
//! a retry, a put that failed before landing put again, `Precondition` read back like `AlreadyExists`, an
//! "exists" that reads back absent, a store that cannot create, a create that cannot be settled (a dead store, a
//! hanging one, an object over the read limit), and the reporting mode that settles only `AlreadyExists`. The
//! call sites' own suites (`mirror_ambiguous`, `shared`, the conformance suite) prove what each makes of them.

use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStoreExt as _,
    PutMultipartOptions, PutResult,
};

use super::*;
use crate::testkit::{FaultStore, PutFault};

const ATTEMPTS: u32 = 4;

/// How [`Answering`] answers a put.
#[derive(Debug)]
enum Answer {
    /// As the inner store does.
    AsIs,
    /// `Precondition` where the inner store answers `AlreadyExists` (stores that report a create's conflict so).
    Precondition,
    /// `NotImplemented`, whatever the put (S3 with conditional puts disabled).
    NotImplemented,
    /// `AlreadyExists` without putting, this many times (S3's 409 while another conditional put is in flight).
    Conflicts(AtomicU32),
}

/// A store that answers puts as told, over an inner one; gets and everything else pass through.
#[derive(Debug)]
struct Answering {
    inner: InMemory,
    answer: Answer,
}

impl std::fmt::Display for Answering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Answering({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Answering {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        match &self.answer {
            Answer::AsIs => self.inner.put_opts(location, payload, opts).await,
            Answer::Precondition => match self.inner.put_opts(location, payload, opts).await {
                Err(object_store::Error::AlreadyExists { path, source }) => {
                    Err(object_store::Error::Precondition { path, source })
                }
                other => other,
            },
            Answer::NotImplemented => Err(object_store::Error::NotImplemented {
                operation: "put_opts with PutMode::Create".into(),
                implementer: self.to_string(),
            }),
            Answer::Conflicts(left) => {
                if left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                    return Err(object_store::Error::AlreadyExists {
                        path: location.to_string(),
                        source: "another conditional put is in flight".into(),
                    });
                }
                self.inner.put_opts(location, payload, opts).await
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

fn store(answer: Answer) -> FaultStore<Answering> {
    FaultStore::new(Answering { inner: InMemory::new(), answer })
}

/// Puts `bytes` at `path` behind the store's back (not counted): an earlier attempt's object, or a rival's.
async fn seed(store: &FaultStore<Answering>, path: &Path, bytes: &'static str) {
    store.inner().inner.put(path, bytes.into()).await.unwrap();
}

async fn object(store: &FaultStore<Answering>, path: &Path) -> Option<Bytes> {
    match store.inner().inner.get(path).await {
        Ok(got) => Some(got.bytes().await.unwrap()),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => panic!("{e}"),
    }
}

/// (puts, gets) the store saw.
fn requests(store: &FaultStore<Answering>) -> (u64, u64) {
    let counts = store.counts();
    (counts.puts, counts.gets)
}

fn path() -> Path {
    Path::from("claims/a")
}

fn ours() -> Bytes {
    Bytes::from_static(b"ours: session 1")
}

fn settling() -> CreateOnce {
    CreateOnce::settling(ATTEMPTS)
}

#[tokio::test]
async fn a_create_on_an_empty_path_is_ours_in_one_put() {
    let store = store(Answer::AsIs);
    assert_eq!(settling().create(&store, &path(), &ours()).await.unwrap(), Created::Ours);
    assert_eq!(object(&store, &path()).await, Some(ours()));
    assert_eq!(requests(&store), (1, 0), "no read-back when the store answered plainly");
}

#[tokio::test]
async fn a_lost_acknowledgement_is_settled_as_ours_by_reading_back() {
    let store = store(Answer::AsIs);
    store.fail_puts(PutFault::FailAfter, "claims/", 1);
    assert_eq!(settling().create(&store, &path(), &ours()).await.unwrap(), Created::Ours);
    assert_eq!(object(&store, &path()).await, Some(ours()));
    assert_eq!(requests(&store), (1, 1), "one read-back settles it; nothing is put again");
}

#[tokio::test]
async fn another_writers_object_is_handed_back_with_its_bytes() {
    let store = store(Answer::AsIs);
    seed(&store, &path(), "theirs: session 2").await;
    let created = settling().create(&store, &path(), &ours()).await.unwrap();
    assert_eq!(created, Created::Taken(Bytes::from_static(b"theirs: session 2")));
    assert_eq!(object(&store, &path()).await.unwrap(), "theirs: session 2", "the winner's object was touched");
    assert_eq!(requests(&store), (1, 1));
}

/// A retry (ours, or the store client's) whose earlier attempt landed meets `AlreadyExists`: equal bytes are ours.
#[tokio::test]
async fn a_retry_that_finds_our_own_earlier_object_is_ours() {
    let store = store(Answer::AsIs);
    seed(&store, &path(), "ours: session 1").await;
    assert_eq!(settling().create(&store, &path(), &ours()).await.unwrap(), Created::Ours);
    assert_eq!(requests(&store), (1, 1));
}

#[tokio::test]
async fn a_put_that_failed_before_landing_reads_back_absent_and_is_put_again() {
    let store = store(Answer::AsIs);
    store.fail_puts(PutFault::FailBefore, "claims/", 1);
    assert_eq!(settling().create(&store, &path(), &ours()).await.unwrap(), Created::Ours);
    assert_eq!(object(&store, &path()).await, Some(ours()));
    assert_eq!(requests(&store), (2, 1));
}

/// The read-back after a lost acknowledgement fails too: the next put meets our own object and reads it.
#[tokio::test]
async fn a_lost_acknowledgement_whose_read_back_fails_is_settled_by_the_next_attempt() {
    let store = store(Answer::AsIs);
    store.fail_puts(PutFault::FailAfter, "claims/", 1);
    store.fail_gets("claims/", 1);
    assert_eq!(settling().create(&store, &path(), &ours()).await.unwrap(), Created::Ours);
    assert_eq!(requests(&store), (2, 2));
}

#[tokio::test]
async fn precondition_is_read_back_like_already_exists() {
    let store = store(Answer::Precondition);
    seed(&store, &path(), "ours: session 1").await;
    assert_eq!(settling().create(&store, &path(), &ours()).await.unwrap(), Created::Ours);
    let other = Path::from("claims/b");
    seed(&store, &other, "theirs: session 2").await;
    let created = settling().create(&store, &other, &ours()).await.unwrap();
    assert_eq!(created, Created::Taken(Bytes::from_static(b"theirs: session 2")));
    assert_eq!(requests(&store), (2, 2));
}

/// An "exists" answer for an object that reads back absent (another conditional put was in flight, then failed)
/// proves nothing: the create is tried again.
#[tokio::test]
async fn an_exists_answer_that_reads_back_absent_is_put_again() {
    let store = store(Answer::Conflicts(AtomicU32::new(1)));
    assert_eq!(settling().create(&store, &path(), &ours()).await.unwrap(), Created::Ours);
    assert_eq!(object(&store, &path()).await, Some(ours()));
    assert_eq!(requests(&store), (2, 1));
}

#[tokio::test]
async fn a_store_that_cannot_create_conditionally_is_refused_at_once() {
    let store = store(Answer::NotImplemented);
    let err = settling().create(&store, &path(), &ours()).await.unwrap_err();
    assert!(matches!(err, CreateError::Unsupported(object_store::Error::NotImplemented { .. })), "{err:?}");
    assert_eq!(requests(&store), (1, 0), "a refusal of the create itself is neither read back nor retried");
}

#[tokio::test]
async fn a_create_that_cannot_be_settled_says_so_after_its_attempts() {
    let store = store(Answer::AsIs);
    store.crash();
    let err = settling().create(&store, &path(), &ours()).await.unwrap_err();
    match &err {
        CreateError::Unsettled { attempts, last } => {
            assert_eq!(*attempts, ATTEMPTS);
            assert!(last.contains("crashed"), "{last}");
        }
        CreateError::Unsupported(_) => panic!("expected Unsettled, got {err:?}"),
    }
    assert_eq!(requests(&store), (u64::from(ATTEMPTS), u64::from(ATTEMPTS)), "each attempt: a put, a read-back");
}

/// Every put hangs: each is abandoned at the timeout, reads back absent, and is put again, until the attempts are
/// spent; nothing is assumed and nothing landed.
#[tokio::test(start_paused = true)]
async fn a_put_that_hangs_times_out_and_is_never_assumed() {
    let store = store(Answer::AsIs);
    store.hold_puts(true);
    let create = settling().timeout(Duration::from_millis(50));
    let err = create.create(&store, &path(), &ours()).await.unwrap_err();
    assert!(
        matches!(&err, CreateError::Unsettled { attempts: ATTEMPTS, last } if last.contains("timed out")),
        "{err:?}"
    );
    store.hold_puts(false);
    assert_eq!(object(&store, &path()).await, None);
    assert_eq!(requests(&store), (u64::from(ATTEMPTS), u64::from(ATTEMPTS)));
}

#[tokio::test]
async fn an_object_over_the_read_limit_is_not_settled() {
    let store = store(Answer::AsIs);
    seed(&store, &path(), "theirs, and longer than the limit").await;
    let err = settling().read_bytes_max(16).create(&store, &path(), &ours()).await.unwrap_err();
    assert!(matches!(&err, CreateError::Unsettled { last, .. } if last.contains("over the object limit")), "{err:?}");
}

/// The reporting mode settles `AlreadyExists` with one read-back and reports every other failure at once, even a
/// put that landed: its caller settles an unknown outcome by its own means.
#[tokio::test]
async fn reporting_settles_only_already_exists_and_reports_the_rest_at_once() {
    let store = store(Answer::AsIs);
    let report = CreateOnce::reporting();
    seed(&store, &path(), "ours: session 1").await;
    assert_eq!(report.create(&store, &path(), &ours()).await.unwrap(), Created::Ours);
    let theirs = Path::from("claims/theirs");
    seed(&store, &theirs, "theirs: session 2").await;
    assert_eq!(
        report.create(&store, &theirs, &ours()).await.unwrap(),
        Created::Taken(Bytes::from_static(b"theirs: session 2"))
    );
    assert_eq!(requests(&store), (2, 2));

    for fault in [PutFault::FailAfter, PutFault::FailBefore] {
        let at = Path::from(format!("claims/{fault:?}"));
        store.fail_puts(fault, "claims/", 1);
        let before = requests(&store);
        let err = report.create(&store, &at, &ours()).await.unwrap_err();
        assert!(matches!(err, CreateError::Unsettled { attempts: 1, .. }), "{fault:?}: {err:?}");
        assert_eq!(requests(&store), (before.0 + 1, before.1), "{fault:?}: no read-back, no second put");
    }

    let store = self::store(Answer::Precondition);
    seed(&store, &path(), "ours: session 1").await;
    let err = report.create(&store, &path(), &ours()).await.unwrap_err();
    assert!(matches!(err, CreateError::Unsettled { attempts: 1, .. }), "{err:?}");
    assert_eq!(requests(&store), (1, 0), "Precondition is reported, not read back");

    let store = self::store(Answer::Conflicts(AtomicU32::new(1)));
    let err = report.create(&store, &path(), &ours()).await.unwrap_err();
    assert!(matches!(err, CreateError::Unsettled { attempts: 1, .. }), "{err:?}");
    assert_eq!(requests(&store), (1, 1), "an exists that reads back absent is reported, not put again");
}

/// The bare create never reads back: an existing object, whoever's, is the store's answer as it came.
#[tokio::test]
async fn the_bare_create_answers_as_the_store_did() {
    let store = store(Answer::AsIs);
    put_create(&store, &path(), ours(), None).await.unwrap();
    let again = put_create(&store, &path(), ours(), None).await.unwrap_err();
    assert!(matches!(again, object_store::Error::AlreadyExists { .. }), "{again:?}");
    assert_eq!(requests(&store), (2, 0));
}

#[test]
fn an_unsettled_create_displays_its_last_failure() {
    let err = CreateError::Unsettled { attempts: 3, last: "the request timed out after 5 ms".into() };
    assert_eq!(err.to_string(), "the request timed out after 5 ms");
}
