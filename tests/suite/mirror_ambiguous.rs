//! Proves that an ambiguous put is settled by reading the slot back, never assumed: a lost
//! ack (the put landed, the answer did not), a put that failed before landing, a retry that reports
//! `AlreadyExists` for our own object, and an ambiguous claim and fence at open all go on without a duplicate
//! or a gap; a put that cannot be settled poisons the store until a reopen resolves the slot.
//!
//! Backends: InMemory and a local directory; the tests about conditional creates, listings or request counts
//! (`mirror_support::kinds_with_s3`) also on moto's S3 API.

use crate::mirror_support;

use mirror_support::*;
use sinkpoint::ErrorKind;
use sinkpoint::testkit::{ManualClock, PutFault};
use sinkpoint::{Attempt, Part, StagePart};

async fn wal_keys(bucket: &Bucket) -> Vec<String> {
    bucket.keys().await.into_iter().filter(|k| k.starts_with("wal/")).collect()
}

fn dense(keys: &[String]) -> bool {
    keys.iter().enumerate().all(|(i, k)| *k == format!("wal/{i:020}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_segment_puts_are_settled_by_reading_back() {
    for kind in kinds_with_s3() {
        let bucket = Bucket::new(kind, "ambiguous");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.redb");
        let clock = ManualClock::new(0);
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();

        // A lost ack: the segment landed, the put said it failed.
        bucket.faults.fail_puts(PutFault::FailAfter, "/wal/", 1);
        store.stage(&id(0), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(0)])).await.unwrap();
        // A put that failed before landing: put again.
        bucket.faults.fail_puts(PutFault::FailBefore, "/wal/", 1);
        store.stage(&id(1), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(1)])).await.unwrap();
        // A lost ack whose read-back fails too: the retry finds our own object (AlreadyExists) and reads it.
        bucket.faults.fail_puts(PutFault::FailAfter, "/wal/", 1);
        bucket.faults.fail_gets("/wal/", 1);
        store.stage(&id(2), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(2)])).await.unwrap();
        store.stage(&id(3), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(3)])).await.unwrap();
        let keys = wal_keys(&bucket).await;
        assert_eq!(keys.len(), 5, "{kind:?}: {keys:?}");
        assert!(dense(&keys), "{kind:?}: {keys:?}");
        let state = digest(&store);
        store.close();
        std::fs::remove_file(&file).unwrap();
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();
        assert_eq!(digest(&store), state, "{kind:?}");
        store.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_claim_and_fence_at_open_are_settled() {
    for kind in kinds_with_s3() {
        let bucket = Bucket::new(kind, "ambiguous-open");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        bucket.faults.fail_puts(PutFault::FailAfter, "/manifest/", 1);
        bucket.faults.fail_puts(PutFault::FailAfter, "/wal/", 1);
        let store = builder(&bucket, &dir.path().join("a.redb"), sync_settings(), &clock).open().await.unwrap();
        assert_eq!(store.epoch(), 1, "{kind:?}: our own landed claim was taken for another writer's");
        assert!(store.created());
        seal(&store, 0).await;
        store.close();
        let keys = bucket.keys().await;
        assert_eq!(keys.iter().filter(|k| k.starts_with("manifest/")).count(), 1, "{kind:?}: {keys:?}");
        assert!(dense(&wal_keys(&bucket).await), "{kind:?}: {keys:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_that_cannot_be_settled_poisons_until_reopen() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "unsettled");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.redb");
        let clock = ManualClock::new(0);
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();
        seal(&store, 0).await;
        let puts = bucket.faults.counts().puts;
        bucket.faults.crash();
        let err =
            store.stage(&id(1), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(1)])).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Poisoned, "{kind:?}: {err}");
        assert!(err.to_string().contains("could not be settled"), "{kind:?}: {err}");
        let tries = bucket.faults.counts().puts - puts;
        assert_eq!(tries, u64::from(sinkpoint::testkit::limits::MIRROR_PUT_ATTEMPTS_MAX), "{kind:?}");
        // Poisoned, not guessed: every call now says so, and nothing more is put.
        assert_eq!(
            store
                .stage(&id(2), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(2)]))
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::Poisoned
        );
        assert_eq!(store.is_processed(&key(0)).unwrap_err().kind(), ErrorKind::Poisoned);
        assert_eq!(bucket.faults.counts().puts - puts, tries, "{kind:?}: a poisoned writer kept putting");
        store.close();

        // The reopen settles the slot by reading it: absent, so the local record is shipped there now.
        bucket.faults.revive();
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();
        assert!(store.get(&id(1)).unwrap().is_some(), "{kind:?}");
        assert!(store.is_processed(&key(0)).unwrap(), "{kind:?}");
        let state = digest(&store);
        store.close();
        std::fs::remove_file(&file).unwrap();
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();
        assert_eq!(digest(&store), state, "{kind:?}");
        store.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_that_hangs_times_out_and_is_never_assumed() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "timeout");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.redb");
        let clock = ManualClock::new(0);
        let settings = sinkpoint::mirror::MirrorSettings { request_timeout_ms: 50, ..sync_settings() };
        let store = builder(&bucket, &file, settings.clone(), &clock).open().await.unwrap();
        seal(&store, 0).await;
        // Every put now hangs: each attempt times out, reads back nothing, and is put again, until the writer
        // gives up without assuming anything.
        bucket.faults.hold_puts(true);
        let err =
            store.stage(&id(1), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(1)])).await.unwrap_err();
        bucket.faults.hold_puts(false);
        assert_eq!(err.kind(), ErrorKind::Poisoned, "{kind:?}: {err}");
        assert!(err.to_string().contains("timed out"), "{kind:?}: {err}");
        store.close();
        let store = builder(&bucket, &file, settings, &clock).open().await.unwrap();
        assert!(store.get(&id(1)).unwrap().is_some(), "{kind:?}: the local record was not shipped on reopen");
        assert!(dense(&wal_keys(&bucket).await), "{kind:?}");
        store.close();
    }
}
