//! Proves the mirror's size bounds: snapshots are paced by the bytes shipped as well as by records, so a log of
//! few but large records is still truncated; a zero byte interval is refused at open.
//!
//! Backends: InMemory and a local directory (`mirror_support::kinds`): nothing here depends on how S3 answers.

use crate::mirror_support;

use mirror_support::*;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::testkit::ManualClock;
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{ErrorKind, Format, WriteResult};

const RESULT_BYTES: usize = 100_000;

async fn wait_for(bucket: &Bucket, key: &str) {
    for _ in 0..2000 {
        if bucket.keys().await.iter().any(|k| k == key) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{key} never appeared: {:?}", bucket.keys().await);
}

fn big(n: u32) -> Vec<WriteResult> {
    vec![WriteResult::new(Format::Parquet, vec![n as u8; RESULT_BYTES]).unwrap()]
}

#[tokio::test]
async fn snapshots_are_taken_after_the_byte_interval_long_before_the_record_interval() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "bounds-bytes");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let settings = MirrorSettings {
            snapshot_interval_records: 1_000_000,
            snapshot_interval_bytes: 3 * RESULT_BYTES as u64 / 2,
            ..sync_settings()
        };
        let store = builder(&bucket, &dir.path().join("a.redb"), settings, &clock).open().await.unwrap();
        // Slot 0 is the fence; one large stage (slot 1) stays under the interval: no snapshot yet.
        store
            .stage(&id(0), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(0)]).results(big(0)))
            .await
            .unwrap();
        store.flush().await.unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let keys = bucket.keys().await;
        assert!(!keys.iter().any(|k| k.starts_with("snapshot/")), "{kind:?}: a snapshot before the interval: {keys:?}");
        // The second (slot 2) passes it: a snapshot of the state before slot 3, and a manifest naming it.
        store
            .stage(&id(1), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(1)]).results(big(1)))
            .await
            .unwrap();
        wait_for(&bucket, "snapshot/00000000000000000003").await;
        wait_for(&bucket, "manifest/00000000000000000001.0000000001").await;
        // The byte count starts again after a snapshot.
        store
            .stage(&id(2), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(2)]).results(big(2)))
            .await
            .unwrap();
        store.flush().await.unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let keys = bucket.keys().await;
        assert!(!keys.iter().any(|k| k == "manifest/00000000000000000001.0000000002"), "{kind:?}: {keys:?}");
        store.close();
    }
}

#[tokio::test]
async fn a_zero_snapshot_interval_in_bytes_is_refused_at_open() {
    let bucket = Bucket::new(Kind::Memory, "bounds-zero");
    let dir = tempfile::tempdir().unwrap();
    let settings = MirrorSettings { snapshot_interval_bytes: 0, ..sync_settings() };
    let err = builder(&bucket, &dir.path().join("a.redb"), settings, &ManualClock::new(0)).open().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(bucket.keys().await.is_empty(), "a refused open wrote {:?}", bucket.keys().await);
}
