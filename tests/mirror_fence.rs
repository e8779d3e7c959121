//! Proves the answers a writer gets around a takeover and around a mirror that is not its own: a local store
//! that was never mirrored is told it does not belong to a mirror of another store (and keeps its data), and the
//! mirror's clock measures durations monotonically.

mod mirror_support;

use mirror_support::*;
use sinkpoint::testkit::ManualClock;
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
