//! Proves that a store restored from a stale mirror (a copy of the bucket taken mid-job: a lagging replica, a
//! rolled-back bucket, a lost tail) is refused with `WrongStore` before it begins a commit key the target already
//! holds, on a watermark target (which would otherwise duplicate or lose rows) and on `DirTable` (which would
//! otherwise end in a mismatch with no way out); and that nothing of the stale store is marked committed.

use crate::mirror_support;

use object_store::ObjectStoreExt as _;
use sinkpoint::Committer;
use sinkpoint::DirTable;
use sinkpoint::testkit::{ManualClock, WatermarkTable};
use sinkpoint::{CheckpointState, ErrorKind, Target};

use mirror_support::*;

/// Copies every object under `from`'s prefix to the same relative key under `to`'s: a replica frozen now.
async fn copy_bucket(from: &Bucket, to: &Bucket) {
    for key in from.keys().await {
        let bytes = from.read(&key).await;
        to.raw.put(&to.path(&key), bytes.into()).await.unwrap();
    }
}

/// Runs the job of the red-team report against `target`: key 0 = {0}; 1 sealed; the replica stops here; 2
/// sealed; key 1 = {1, 2}. Then restores a fresh local file from the replica and returns what the restored
/// store's committer says, and the state of checkpoint 1 afterwards.
async fn run_then_restore_stale(target: &dyn Target, name: &str) -> (ErrorKind, CheckpointState) {
    let clock = ManualClock::new(0);
    let primary = Bucket::new(Kind::Memory, name);
    let replica = Bucket::new(Kind::Memory, &format!("{name}-replica"));
    let dir = tempfile::tempdir().unwrap();
    let store = builder(&primary, &dir.path().join("primary.redb"), sync_settings(), &clock).open().await.unwrap();
    Committer::new(&store, target).recover().await.unwrap();
    seal(&store, 0).await;
    Committer::new(&store, target).commit_pending().await.unwrap();
    seal(&store, 1).await;
    copy_bucket(&primary, &replica).await;
    seal(&store, 2).await;
    Committer::new(&store, target).commit_pending().await.unwrap();
    store.close();

    let restored = builder(&replica, &dir.path().join("restored.redb"), sync_settings(), &clock).open().await.unwrap();
    assert_eq!(restored.pending().unwrap().next_key, 1, "the replica holds key 0 only");
    let err = Committer::new(&restored, target).recover().await.unwrap_err();
    // A second call must refuse too: nothing may have been recorded that a later call would mark.
    let again = Committer::new(&restored, target).commit_pending().await.unwrap_err();
    assert_eq!(again.kind(), err.kind(), "{again}");
    let state = restored.get(&id(1)).unwrap().unwrap().state;
    eprintln!("{name}: {err}");
    (err.kind(), state)
}

#[tokio::test]
async fn a_store_restored_from_a_stale_mirror_is_refused_before_it_begins_a_key_a_watermark_target_holds() {
    let table = WatermarkTable::new();
    let (kind, state) = run_then_restore_stale(&table, "stale-watermark").await;
    assert_eq!(kind, ErrorKind::WrongStore);
    assert_eq!(state, CheckpointState::Sealed, "nothing of the stale store may be marked committed");
    assert_eq!(table.results().len(), 3, "the table holds each of the three results once");
}

#[tokio::test]
async fn a_store_restored_from_a_stale_mirror_is_refused_before_it_begins_a_key_a_dir_table_holds() {
    let table = DirTable::new(std::sync::Arc::new(object_store::memory::InMemory::new()), "table".into());
    let (kind, state) = run_then_restore_stale(&table, "stale-dir").await;
    assert_eq!(kind, ErrorKind::WrongStore);
    assert_eq!(state, CheckpointState::Sealed, "nothing of the stale store may be marked committed");
}
