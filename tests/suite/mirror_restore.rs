//! Proves restore and bounded growth: a store whose local file is deleted mid-job is rebuilt
//! from the mirror (manifest → snapshot → slots) to exactly the state it had and finishes the job, also when its
//! log spans several windows of concurrent reads (and a gap in a later window is still refused); snapshots
//! and collection keep the mirror and the local log bounded, deleting only after the minimum age; a deleted
//! prefix is reported as missing, never taken for an empty store.
//!
//! Backends: InMemory and a local directory; the tests about conditional creates, listings or request counts
//! (`mirror_support::kinds_with_s3`) also on moto's S3 API.

use crate::mirror_support;

use mirror_support::*;
use sinkpoint::mirror::{MirrorSettings, MirrorView};
use sinkpoint::testkit::ManualClock;
use sinkpoint::testkit::RawProtocol;
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{CheckpointState, ErrorKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_after_the_local_file_is_deleted_mid_job() {
    for kind in kinds_with_s3() {
        let bucket = Bucket::new(kind, "restore-mid-job");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.redb");
        let clock = ManualClock::new(0);
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();
        assert!(store.created());
        for n in 0..5 {
            seal(&store, n).await;
        }
        store.begin_commit(0, &[id(0), id(1), id(2)], Some(3), false).await.unwrap();
        store.mark_committed(0).await.unwrap();
        store
            .stage(&id(5), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(5)]).results(vec![result(5)]))
            .await
            .unwrap();
        let before = digest(&store);
        store.close();

        std::fs::remove_file(&file).unwrap();
        let store = builder(&bucket, &file, sync_settings(), &clock).must_exist().open().await.unwrap();
        assert!(!store.created(), "{kind:?}: a restore is not a creation");
        assert_eq!(store.epoch(), 2, "{kind:?}");
        assert_eq!(digest(&store), before, "{kind:?}: the restored state differs");
        assert_eq!(store.orphans(), &[id(5)], "{kind:?}: the staged checkpoint of epoch 1 is an orphan");

        // The job goes on from the restored state and finishes.
        store.seal(&id(5), 1).await.unwrap();
        store.begin_commit(1, &[id(3), id(4), id(5)], None, true).await.unwrap();
        store.mark_committed(1).await.unwrap();
        let done = digest(&store);
        store.close();
        std::fs::remove_file(&file).unwrap();
        let store = builder(&bucket, &file, sync_settings(), &clock).must_exist().open().await.unwrap();
        assert_eq!(digest(&store), done, "{kind:?}");
        assert!(store.is_finished().unwrap(), "{kind:?}");
        assert_eq!(store.get(&id(5)).unwrap().unwrap().state, CheckpointState::Committed { key: Some(1) });
        store.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_of_several_read_windows_restores_exactly_and_a_gap_in_a_later_window_is_refused() {
    // The slots are read several at a time (MIRROR_READS_CONCURRENT_MAX = 16): 41 slots are three windows.
    for kind in kinds_with_s3() {
        let bucket = Bucket::new(kind, "restore-windows");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.redb");
        let clock = ManualClock::new(0);
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();
        for n in 0..20 {
            seal(&store, n).await;
        }
        let state = digest(&store);
        store.close();
        let wal: Vec<String> = bucket.keys().await.into_iter().filter(|k| k.starts_with("wal/")).collect();
        assert_eq!(wal.len(), 41, "{kind:?}: the fence and two slots a checkpoint: {wal:?}");
        std::fs::remove_file(&file).unwrap();
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();
        assert_eq!(digest(&store), state, "{kind:?}: the restored state differs");
        store.close();
        // A slot missing in the third window, with later ones present: a gap, named, never a shorter log.
        let wal: Vec<String> = bucket.keys().await.into_iter().filter(|k| k.starts_with("wal/")).collect();
        let missing = &wal[35];
        bucket.delete(missing).await;
        std::fs::remove_file(&file).unwrap();
        let err = builder(&bucket, &file, sync_settings(), &clock).open().await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{kind:?}: {err}");
        let message = err.to_string();
        assert!(message.contains("gap") && message.contains(missing.as_str()), "{kind:?}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopening_with_the_local_file_continues_at_the_next_epoch() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "reopen-local");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.redb");
        let clock = ManualClock::new(0);
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();
        seal(&store, 0).await;
        store.close();
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();
        assert_eq!(store.epoch(), 2);
        seal(&store, 1).await;
        let state = digest(&store);
        store.close();
        // Slots: 0 = fence of epoch 1 (Create, Open), 1 and 2 = stage and seal, 3 = fence of epoch 2, 4 and 5.
        let wal: Vec<String> = bucket.keys().await.into_iter().filter(|k| k.starts_with("wal/")).collect();
        assert_eq!(wal.len(), 6, "{kind:?}: {wal:?}");
        std::fs::remove_file(&file).unwrap();
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();
        assert_eq!(digest(&store), state, "{kind:?}");
        store.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_and_collection_keep_the_mirror_and_the_log_bounded() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "bounded");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.redb");
        let clock = ManualClock::new(1_000_000);
        let settings = MirrorSettings { snapshot_interval_records: 8, gc_age_ms_min: 60_000, ..sync_settings() };
        let store = builder(&bucket, &file, settings.clone(), &clock).open().await.unwrap();
        for n in 0..20 {
            seal(&store, n).await;
        }
        store.flush().await.unwrap();
        // Snapshots were made, but nothing is old enough to delete yet: slot 0 is still there.
        let keys = bucket.keys().await;
        assert!(keys.iter().any(|k| k.starts_with("snapshot/")), "{kind:?}: no snapshot in {keys:?}");
        assert!(keys.contains(&"wal/00000000000000000000".to_string()), "{kind:?}: deleted before the minimum age");
        let wal_before = keys.iter().filter(|k| k.starts_with("wal/")).count();
        assert_eq!(wal_before, 41, "{kind:?}");

        clock.advance(60_000);
        for n in 20..24 {
            seal(&store, n).await;
        }
        // Collection runs on the maintenance thread after the ship; wait (up to 60 s, for a loaded machine) for it.
        let bounded = |keys: &[String]| {
            let wal = keys.iter().filter(|k| k.starts_with("wal/")).count();
            let snapshots = keys.iter().filter(|k| k.starts_with("snapshot/")).count();
            let manifests = keys.iter().filter(|k| k.starts_with("manifest/")).count();
            wal <= 8 + 8 && snapshots <= 2 && manifests <= 2
        };
        let mut keys = bucket.keys().await;
        for _ in 0..6000 {
            if bounded(&keys) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            keys = bucket.keys().await;
        }
        assert!(bounded(&keys), "{kind:?}: not collected: {keys:?}");
        let local_log = store.log_frames().unwrap().len();
        assert!(local_log <= 8 + 2, "{kind:?}: the local log keeps {local_log} frames");
        let state = digest(&store);
        store.close();

        // A restore from what is left (manifest → snapshot → slots) gives the same state.
        std::fs::remove_file(&file).unwrap();
        let store = builder(&bucket, &file, settings.clone(), &clock).must_exist().open().await.unwrap();
        assert_eq!(digest(&store), state, "{kind:?}");
        store.close();
        let view = MirrorView::open(bucket.store(), bucket.prefix.clone()).await.unwrap();
        assert!(view.is_processed(&key(0)).unwrap() && view.is_processed(&key(23)).unwrap(), "{kind:?}");
        assert!(!view.is_processed(&key(24)).unwrap(), "{kind:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_prefix_is_reported_as_missing() {
    for kind in kinds_with_s3() {
        let bucket = Bucket::new(kind, "deleted-prefix");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.redb");
        let clock = ManualClock::new(0);
        let store = builder(&bucket, &file, sync_settings(), &clock).open().await.unwrap();
        seal(&store, 0).await;
        store.close();
        bucket.delete_prefix().await;
        assert!(bucket.keys().await.is_empty());

        // The local file says it was mirrored: an empty prefix is a lost mirror, not a new one.
        let err = builder(&bucket, &file, sync_settings(), &clock).open().await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::WrongStore, "{kind:?}: {err}");
        assert!(err.to_string().contains("missing"), "{kind:?}: {err}");
        // Without the local file, a store that must exist is missing too.
        std::fs::remove_file(&file).unwrap();
        let err = builder(&bucket, &file, sync_settings(), &clock).must_exist().open().await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::WrongStore, "{kind:?}: {err}");
        assert!(err.to_string().contains("missing"), "{kind:?}: {err}");
        let err = MirrorView::open(bucket.store(), bucket.prefix.clone()).await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::WrongStore, "{kind:?}: {err}");
        assert!(bucket.keys().await.is_empty(), "{kind:?}: a refused open wrote to the mirror");
        // A store opened without its mirror is refused: its records would never reach it.
        let file2 = dir.path().join("b.redb");
        let store = builder(&bucket, &file2, sync_settings(), &clock).open().await.unwrap();
        store.close();
        let err = sinkpoint::Store::builder(job(), target()).path(&file2).open().await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::WrongStore, "{kind:?}: {err}");
    }
}
