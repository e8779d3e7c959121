//! Proves the read-only view of the skip set: a remote worker without the local file answers
//! `is_processed` from the mirror exactly as the store does, `refresh` brings it up to date (seals, aborts),
//! it restores afresh when collection removed the slots it had reached, and a damaged object stops it.
//! Runs on the default current-thread test runtime, which the mirror must not depend on.
//!
//! Backends: InMemory and a local directory; the tests about conditional creates, listings or request counts
//! (`mirror_support::kinds_with_s3`) also on moto's S3 API.

use crate::mirror_support;

use mirror_support::*;
use sinkpoint::ErrorKind;
use sinkpoint::mirror::{MirrorSettings, MirrorView};
use sinkpoint::testkit::ManualClock;
use sinkpoint::{Attempt, Part, StagePart};

#[tokio::test]
async fn the_view_answers_from_the_mirror_and_refreshes() {
    for kind in kinds_with_s3() {
        let bucket = Bucket::new(kind, "view");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let store = builder(&bucket, &dir.path().join("a.redb"), sync_settings(), &clock).open().await.unwrap();
        for n in 0..3 {
            seal(&store, n).await;
        }
        store.stage(&id(3), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(3)])).await.unwrap();

        let mut view = MirrorView::open(bucket.store(), bucket.prefix.clone()).await.unwrap();
        assert_eq!(view.epoch(), 1);
        for n in 0..5 {
            assert_eq!(view.is_processed(&key(n)).unwrap(), store.is_processed(&key(n)).unwrap(), "{kind:?}: {n}");
        }
        assert!(view.is_processed(&key(0)).unwrap() && !view.is_processed(&key(3)).unwrap(), "{kind:?}");

        store.seal(&id(3), 1).await.unwrap();
        store.operator().force_abort(&[id(0)], "re-read input 0").await.unwrap();
        assert!(view.is_processed(&key(0)).unwrap(), "{kind:?}: the view moved before a refresh");
        assert_eq!(view.refresh().await.unwrap(), 2, "{kind:?}");
        assert!(!view.is_processed(&key(0)).unwrap() && view.is_processed(&key(3)).unwrap(), "{kind:?}");
        assert_eq!(view.refresh().await.unwrap(), 0, "{kind:?}");
        assert_eq!(view.next_seq(), store.log_frames().unwrap().len() as u64, "{kind:?}");
        store.close();
    }
}

#[tokio::test]
async fn the_view_restores_afresh_after_collection_and_stops_at_damage() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "view-gc");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let settings = MirrorSettings { snapshot_interval_records: 4, gc_age_ms_min: 1_000, ..sync_settings() };
        let store = builder(&bucket, &dir.path().join("a.redb"), settings, &clock).open().await.unwrap();
        seal(&store, 0).await;
        let mut view = MirrorView::open(bucket.store(), bucket.prefix.clone()).await.unwrap();
        for n in 1..12 {
            seal(&store, n).await;
        }
        clock.advance(1_000);
        seal(&store, 12).await;
        // Wait (up to 20 s) until collection removed the slots the view has read.
        for _ in 0..2000 {
            if !bucket.keys().await.contains(&"wal/00000000000000000002".to_string()) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(!bucket.keys().await.contains(&"wal/00000000000000000002".to_string()), "{kind:?}: not collected");
        view.refresh().await.unwrap();
        assert!((0..13).all(|n| view.is_processed(&key(n)).unwrap()), "{kind:?}");
        store.close();

        // The newest snapshot is the one the newest manifest references.
        let last = bucket.keys().await.into_iter().filter(|k| k.starts_with("snapshot/")).max().unwrap();
        let good = bucket.read(&last).await;
        bucket.overwrite(&last, good[..good.len() - 1].to_vec()).await;
        let err = MirrorView::open(bucket.store(), bucket.prefix.clone()).await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{kind:?}: {err}");
        assert!(err.to_string().contains(&last), "{kind:?}: {err}");
    }
}
