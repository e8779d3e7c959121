//! Pins the documented durability contract of asynchronous mirror mode (findings 8 and 18): a seal is
//! acknowledged, and reads (`is_processed`, `get`) show it, before it is in the mirror; only after `flush`
//! returned Ok may a caller act on it irrevocably. A disk lost before the flush restores without the seal.

mod mirror_support;

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
