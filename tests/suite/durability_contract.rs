//! Pins the documented durability contract of asynchronous mirror mode (findings 8 and 18): a seal is
//! acknowledged, and reads (`is_processed`, `get`) show it, before it is in the mirror; only after `flush`
//! returned Ok may a caller act on it irrevocably. A disk lost before the flush restores without the seal.

use crate::mirror_support;

use std::time::Duration;

use mirror_support::*;
use sinkpoint::mirror::{MirrorMode, MirrorSettings};
use sinkpoint::testkit::ManualClock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_seal_is_read_as_processed_before_it_is_mirrored_and_lost_with_the_disk_without_flush() {
    let bucket = Bucket::new(Kind::Memory, "durability-contract");
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let settings = MirrorSettings {
        mode: MirrorMode::Asynchronous { lag_batches_max: 100, lag_ms_max: u64::MAX },
        ..sync_settings()
    };
    let store = builder(&bucket, &dir.path().join("a.redb"), settings, &clock).open().await.unwrap();
    bucket.faults.hold_puts_under("/wal/");
    seal(&store, 0).await;
    // The seal was acknowledged and the local commit answers reads: right for skipping, not for deleting.
    assert!(store.is_processed(&key(0)).unwrap(), "the acknowledged seal is not read as processed");
    assert!(store.mirror_lag().groups > 0, "the seal is already in the mirror: the test holds nothing");
    let flushed = tokio::time::timeout(Duration::from_millis(200), store.flush()).await;
    assert!(flushed.is_err(), "flush returned while the seal's upload was held");
    // The disk and the writer are lost now: what the mirror holds at this moment is all a restore gets.
    let copy = Bucket::new(Kind::Memory, "durability-contract-copy");
    for name in bucket.keys().await {
        copy.overwrite(&name, bucket.read(&name).await).await;
    }
    let restored = builder(&copy, &dir.path().join("b.redb"), sync_settings(), &clock).open().await.unwrap();
    assert!(!restored.is_processed(&key(0)).unwrap(), "a seal never flushed survived the lost disk");
    restored.close();
    bucket.faults.hold_puts(false);
    store.flush().await.unwrap();
    store.close();
}

/// Finding 10 (store half): dropping a store inside a runtime never blocks the runtime's thread for long, even
/// while a mirror put hangs; the writer and uploader finish on their own, detached.
#[test]
#[expect(clippy::disallowed_methods, reason = "what is measured is the wall time a drop blocks the runtime")]
fn dropping_a_store_with_a_held_put_in_a_current_thread_runtime_returns_promptly() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let bucket = Bucket::new(Kind::Memory, "drop-promptly");
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let settings = MirrorSettings {
        mode: MirrorMode::Asynchronous { lag_batches_max: 100, lag_ms_max: u64::MAX },
        ..sync_settings()
    };
    rt.block_on(async {
        let store = builder(&bucket, &dir.path().join("a.redb"), settings, &clock).open().await.unwrap();
        bucket.faults.hold_puts_under("/wal/");
        seal(&store, 0).await;
        let started = std::time::Instant::now();
        drop(store);
        assert!(started.elapsed() < Duration::from_secs(2), "drop blocked the runtime for {:?}", started.elapsed());
    });
    bucket.faults.hold_puts(false);
}

/// Finding 10: `close_async` joins the writer and the uploads off the runtime's threads, so a current-thread
/// runtime keeps running its other tasks meanwhile.
#[test]
fn close_async_joins_off_the_runtime_thread() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let bucket = Bucket::new(Kind::Memory, "close-async");
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let settings = MirrorSettings {
        mode: MirrorMode::Asynchronous { lag_batches_max: 100, lag_ms_max: u64::MAX },
        ..sync_settings()
    };
    rt.block_on(async {
        let store = builder(&bucket, &dir.path().join("a.redb"), settings, &clock).open().await.unwrap();
        bucket.faults.hold_puts_under("/wal/");
        seal(&store, 0).await;
        let closing = tokio::spawn(store.close_async());
        // The runtime's only thread still runs this task while the close waits for the held put.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!closing.is_finished(), "close_async returned before the held upload finished");
        bucket.faults.hold_puts(false);
        closing.await.unwrap();
    });
}
