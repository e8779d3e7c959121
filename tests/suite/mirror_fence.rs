//! Proves the answers a writer gets around a takeover and around a mirror that is not its own: a local store
//! that was never mirrored is told it does not belong to a mirror of another store (and keeps its data), and the
//! mirror's clock measures durations monotonically.
//!
//! Backends: InMemory and a local directory; the tests about conditional creates, listings or request counts
//! (`mirror_support::kinds_with_s3`) also on moto's S3 API.

use crate::mirror_support;

use mirror_support::*;
use sinkpoint::testkit::ManualClock;
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{ErrorKind, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmirrored_store_opened_against_another_stores_mirror_is_wrong_store_and_keeps_its_data() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "unmirrored-vs-other");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let mirrored = builder(&bucket, &dir.path().join("m.redb"), sync_settings(), &clock).open().await.unwrap();
        seal(&mirrored, 0).await;
        mirrored.close();

        let file = dir.path().join("u.redb");
        let plain = Store::builder(job(), target()).path(&file).open().await.unwrap();
        seal(&plain, 7).await;
        let before = digest(&plain);
        plain.close();

        let err = builder(&bucket, &file, sync_settings(), &clock).open().await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::WrongStore, "{kind:?}: {err}");
        assert!(!err.to_string().contains("delete the local file"), "{kind:?}: advice that destroys data: {err}");
        let plain = Store::builder(job(), target()).path(&file).open().await.unwrap();
        assert_eq!(digest(&plain), before, "{kind:?}: the unmirrored store was changed");
        plain.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_that_created_the_store_is_fenced_not_told_its_state_was_lost() {
    use sinkpoint::Committer;
    use sinkpoint::DirTable;
    for kind in kinds_with_s3() {
        let bucket = Bucket::new(kind, "zombie-creator");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let table = DirTable::new(std::sync::Arc::new(object_store::memory::InMemory::new()), "table".into());
        // A creates the store (epoch 1) and stalls before recover.
        let a = builder(&bucket, &dir.path().join("a.redb"), sync_settings(), &clock).open().await.unwrap();
        assert!(a.created(), "{kind:?}");
        // B opens through the mirror (epoch 2), commits every key and exits.
        let b = builder(&bucket, &dir.path().join("b.redb"), sync_settings(), &clock).open().await.unwrap();
        assert_eq!(b.epoch(), 2, "{kind:?}");
        let written = table.write_data_file("b-0", b"0:0\n".to_vec()).await.unwrap();
        b.stage(&id(0), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(0)]).results(vec![written]))
            .await
            .unwrap();
        b.seal(&id(0), 1).await.unwrap();
        Committer::new(&b, &table).recover().await.unwrap();
        Committer::new(&b, &table).finish().await.unwrap();
        b.close();
        // A resumes: a takeover explains the target's key 0, so the answer is stop, every time.
        for attempt in 0..2 {
            let err = Committer::new(&a, &table).recover().await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Fenced, "{kind:?} attempt {attempt}: {err}");
        }
        a.close();
    }
}
