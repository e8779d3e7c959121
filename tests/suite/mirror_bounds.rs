//! Proves the mirror's size bounds: snapshots are paced by the bytes shipped as well as by records, so a log of
//! few but large records is still truncated; the intervals grow with the state (the log ratio), so the snapshots of a
//! growing store cost a few times its log, not its square; a zero byte interval and a ratio over the limit are
//! refused at open.
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

/// The bytes of every object under `prefix` (`wal/`, `snapshot/`) in the bucket.
async fn bytes_under(bucket: &Bucket, prefix: &str) -> u64 {
    let mut total = 0;
    for key in bucket.keys().await.into_iter().filter(|k| k.starts_with(prefix)) {
        total += bucket.read(&key).await.len() as u64;
    }
    total
}

/// Seals `checkpoints` checkpoints under `settings` (nothing collected), and returns the bytes of every snapshot
/// and of every log segment the mirror received, after checking that a restore holds what the store held.
async fn snapshot_and_log_bytes(test: &str, checkpoints: u32, settings: MirrorSettings) -> (u64, u64) {
    let bucket = Bucket::new(Kind::Memory, test);
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let settings = MirrorSettings { gc_age_ms_min: u64::MAX, ..settings };
    let store = builder(&bucket, &dir.path().join("a.redb"), settings.clone(), &clock).open().await.unwrap();
    for n in 0..checkpoints {
        seal(&store, n).await;
    }
    store.flush().await.unwrap();
    let held = digest(&store);
    store.close();
    let restored = builder(&bucket, &dir.path().join("b.redb"), settings, &clock).open().await.unwrap();
    assert_eq!(digest(&restored), held, "{test}: the restore differs from the store");
    restored.close();
    (bytes_under(&bucket, "snapshot/").await, bytes_under(&bucket, "wal/").await)
}

#[tokio::test]
async fn snapshots_written_over_a_growing_store_stay_within_a_few_times_its_log() {
    // Every 10 records, fixed, a snapshot of the whole state: bytes quadratic in the job's length.
    let every_10 = MirrorSettings { snapshot_interval_records: 10, ..sync_settings() };
    let fixed = MirrorSettings { snapshot_log_ratio_percent: 0, ..every_10.clone() };
    let (fixed_snapshots, fixed_log) = snapshot_and_log_bytes("bounds-ratio-fixed", 400, fixed).await;
    // The default ratio: the next snapshot once the log since the last one is as long as that snapshot.
    let growing = MirrorSettings { snapshot_log_ratio_percent: 100, ..every_10 };
    let (snapshots, log) = snapshot_and_log_bytes("bounds-ratio-growing", 400, growing).await;
    eprintln!("400 checkpoints: fixed {fixed_snapshots} snapshot bytes / {fixed_log} log; growing {snapshots} / {log}");
    assert!(fixed_snapshots > 10 * fixed_log, "the fixed schedule should cost many times its log here");
    assert!(snapshots <= 3 * log, "{snapshots} bytes of snapshots for {log} bytes of log");
    assert!(snapshots > 0, "the growing schedule still takes snapshots");
}

#[tokio::test]
async fn a_snapshot_log_ratio_above_the_limit_and_a_zero_log_bound_are_refused_at_open() {
    let max = sinkpoint::limits::MIRROR_SNAPSHOT_LOG_RATIO_PERCENT_MAX as u32;
    for (name, settings) in [
        ("snapshot_log_ratio_percent", MirrorSettings { snapshot_log_ratio_percent: max + 1, ..sync_settings() }),
        ("snapshot_log_records_max", MirrorSettings { snapshot_log_records_max: 0, ..sync_settings() }),
    ] {
        let bucket = Bucket::new(Kind::Memory, "bounds-ratio-limit");
        let dir = tempfile::tempdir().unwrap();
        let err =
            builder(&bucket, &dir.path().join("a.redb"), settings, &ManualClock::new(0)).open().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains(name), "{err}");
        assert!(bucket.keys().await.is_empty(), "a refused open wrote {:?}", bucket.keys().await);
    }
}
