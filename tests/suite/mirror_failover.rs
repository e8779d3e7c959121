//! Proves failover between machines: M1 → M2 → M1, each with its own local file, always ends
//! in the mirror's state (a stale local file that is a prefix of the mirror's log takes the tail); a local tail
//! that a newer epoch fenced is refused as `Fenced` (superseded, not damaged), naming the sequence number and
//! slot where they diverge;
//! a local tail no newer epoch fenced (an asynchronous writer that crashed) is re-shipped, not lost.
//!
//! Backends: InMemory and a local directory; the tests about conditional creates, listings or request counts
//! (`mirror_support::kinds_with_s3`) also on moto's S3 API.

use crate::mirror_support;

use mirror_support::*;
use sinkpoint::mirror::{MirrorMode, MirrorSettings};
use sinkpoint::testkit::ManualClock;
use sinkpoint::testkit::RawProtocol;
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{CheckpointState, ErrorKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_m1_m2_m1_with_m1s_stale_local_file() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "failover");
        let dir = tempfile::tempdir().unwrap();
        let (m1, m2) = (dir.path().join("m1.redb"), dir.path().join("m2.redb"));
        let clock = ManualClock::new(0);
        let store = builder(&bucket, &m1, sync_settings(), &clock).open().await.unwrap();
        for n in 0..3 {
            seal(&store, n).await;
        }
        store.close();

        // M2 has never seen the store: it restores from the mirror and goes on.
        let store = builder(&bucket, &m2, sync_settings(), &clock).open().await.unwrap();
        assert!(!store.created(), "{kind:?}");
        assert_eq!(store.epoch(), 2);
        for n in 3..6 {
            seal(&store, n).await;
        }
        store.begin_commit(0, &[id(0), id(3)], None, false).await.unwrap();
        store.mark_committed(0).await.unwrap();
        let after_m2 = digest(&store);
        store.close();

        // M1 comes back with its stale file, a prefix of the mirror's log: it takes M2's tail.
        let store = builder(&bucket, &m1, sync_settings(), &clock).open().await.unwrap();
        assert_eq!(store.epoch(), 3, "{kind:?}");
        assert_eq!(digest(&store), after_m2, "{kind:?}: M1 did not take M2's tail");
        seal(&store, 6).await;
        let after_m1 = digest(&store);
        store.close();

        // And M2 again, stale by M1's epoch 3.
        let store = builder(&bucket, &m2, sync_settings(), &clock).open().await.unwrap();
        assert_eq!(store.epoch(), 4, "{kind:?}");
        assert_eq!(digest(&store), after_m1, "{kind:?}");
        store.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_tail_fenced_by_a_newer_epoch_is_refused_naming_where_they_diverge() {
    for kind in kinds_with_s3() {
        let bucket = Bucket::new(kind, "diverged");
        let dir = tempfile::tempdir().unwrap();
        let (m1, m2) = (dir.path().join("m1.redb"), dir.path().join("m2.redb"));
        let clock = ManualClock::new(0);
        let old = builder(&bucket, &m1, sync_settings(), &clock).open().await.unwrap();
        seal(&old, 0).await;
        // Slots 0 (fence), 1, 2; records 0 (Create), 1 (Open), 2, 3. M2's fence takes slot 3 at seq 4.
        let new = builder(&bucket, &m2, sync_settings(), &clock).open().await.unwrap();
        // M1 commits locally, then finds slot 3 taken: fenced, and its record stays only in its local file.
        let err = old.stage(&id(1), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(1)])).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Fenced, "{kind:?}: {err}");
        old.close();
        new.close();

        // Nothing is damaged (red-team 21): the local file was superseded, so the error is `Fenced`, never
        // `Corrupt`, and says so.
        let err = builder(&bucket, &m1, sync_settings(), &clock).open().await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Fenced, "{kind:?}: {err}");
        let message = err.to_string();
        assert!(message.contains("superseded by epoch 2"), "{kind:?}: {message}");
        assert!(message.contains("from seq 4"), "{kind:?}: {message}");
        assert!(message.contains("wal/00000000000000000003"), "{kind:?}: {message}");
        assert!(message.contains("delete the local file"), "{kind:?}: {message}");

        // Deleting the stale file restores M1 from the mirror: checkpoint 1 was never acked, and is not there.
        std::fs::remove_file(&m1).unwrap();
        let store = builder(&bucket, &m1, sync_settings(), &clock).open().await.unwrap();
        assert_eq!(store.get(&id(0)).unwrap().unwrap().state, CheckpointState::Sealed, "{kind:?}");
        assert!(store.get(&id(1)).unwrap().is_none(), "{kind:?}: a fenced record reached the mirror");
        store.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfenced_local_tail_is_reshipped_on_reopen() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "reship");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.redb");
        let clock = ManualClock::new(0);
        let settings = MirrorSettings {
            mode: MirrorMode::Asynchronous { lag_batches_max: 64, lag_ms_max: u64::MAX },
            ..sync_settings()
        };
        let store = builder(&bucket, &file, settings.clone(), &clock).open().await.unwrap();
        seal(&store, 0).await;
        store.flush().await.unwrap();
        // The uploads are held, so staging is acked locally only; then the mirror stops answering for good.
        bucket.faults.hold_puts(true);
        for n in 1..4 {
            store
                .stage(&id(n), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(n)]).results(vec![result(n)]))
                .await
                .unwrap();
        }
        assert_eq!(store.mirror_lag().groups, 3, "{kind:?}");
        let local = digest(&store);
        bucket.faults.crash();
        bucket.faults.hold_puts(false);
        let err = store.flush().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Poisoned, "{kind:?}: {err}");
        assert_eq!(store.get(&id(0)).unwrap_err().kind(), ErrorKind::Poisoned, "{kind:?}: reads must stop too");
        store.close();
        bucket.faults.revive();

        // The same machine reopens: no newer epoch fenced its tail, so the tail goes to the mirror first.
        let store = builder(&bucket, &file, settings.clone(), &clock).open().await.unwrap();
        assert_eq!(digest(&store), local, "{kind:?}");
        store.close();
        std::fs::remove_file(&file).unwrap();
        let store = builder(&bucket, &file, settings, &clock).open().await.unwrap();
        assert_eq!(digest(&store), local, "{kind:?}: the re-shipped tail is not in the mirror");
        store.close();
    }
}
