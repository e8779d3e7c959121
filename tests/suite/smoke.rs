//! Proves the basic life of a checkpoint through the public API, on a real file: stage, seal, commit, reopen.

use sinkpoint::testkit::RawProtocol;
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{
    CheckpointId, CheckpointState, ErrorKind, Format, JobId, StageOutcome, Store, TargetIdentity, TransitionError,
    WriteResult,
};

fn id(s: &str) -> CheckpointId {
    CheckpointId::new(s).unwrap()
}

fn result(s: &str) -> WriteResult {
    WriteResult::new(Format::Lance, s.as_bytes().to_vec()).unwrap()
}

#[tokio::test]
async fn a_checkpoint_lives_through_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let job = JobId::new("job").unwrap();
    let target = TargetIdentity::new("mem://t").unwrap();
    let store = Store::builder(job.clone(), target.clone()).path(&path).open().await.unwrap();
    assert_eq!(store.epoch(), 1);
    let a = id("input-0");
    assert_eq!(
        store
            .stage(
                &a,
                StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"k0".to_vec()]).results(vec![result("f0")])
            )
            .await
            .unwrap(),
        StageOutcome::Staged
    );
    assert_eq!(
        store
            .stage(
                &a,
                StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"k0".to_vec()]).results(vec![result("f0")])
            )
            .await
            .unwrap(),
        StageOutcome::AlreadyStaged
    );
    let err = store
        .stage(
            &a,
            StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"k0".to_vec()]).results(vec![result("other")]),
        )
        .await
        .unwrap_err();
    assert!(matches!(err.transition(), Some(TransitionError::PartConflict { .. })), "{err}");
    store.stage(&a, StagePart::new(Attempt::FIRST, Part::new(1)).keys(vec![b"k1".to_vec()])).await.unwrap();
    assert!(!store.is_processed(b"k0").unwrap());
    let err = store.seal(&a, 3).await.unwrap_err();
    assert!(matches!(err.transition(), Some(TransitionError::MissingParts { count: 1, .. })), "{err}");
    store.seal(&a, 2).await.unwrap();
    assert!(store.is_processed(b"k0").unwrap() && store.is_processed(b"k1").unwrap());
    let pending = store.pending().unwrap();
    assert_eq!(pending.checkpoints.len(), 1);
    assert_eq!(pending.checkpoints[0].results, vec![result("f0")]);
    store.begin_commit(0, std::slice::from_ref(&a), Some(7), true).await.unwrap();
    let err = store.begin_commit(1, std::slice::from_ref(&a), None, false).await.unwrap_err();
    assert!(matches!(err.transition(), Some(TransitionError::CommitInFlight { key: 0 })), "{err}");
    store.close();

    let store = Store::builder(job.clone(), target.clone()).path(&path).open().await.unwrap();
    assert_eq!(store.epoch(), 2);
    assert_eq!(store.get(&a).unwrap().unwrap().state, CheckpointState::Committing { key: 0 });
    store.mark_committed(0).await.unwrap();
    assert_eq!(store.get(&a).unwrap().unwrap().state, CheckpointState::Committed { key: Some(0) });
    assert!(store.pending().unwrap().checkpoints.is_empty());
    assert!(store.is_finished().unwrap());
    assert!(store.is_processed(b"k1").unwrap());
    assert_eq!(store.processed_keys().map(|k| k.unwrap()).collect::<Vec<_>>(), vec![b"k0".to_vec(), b"k1".to_vec()]);
    store.close();

    let other = Store::builder(JobId::new("other").unwrap(), target).path(&path).open().await.err().unwrap();
    assert_eq!(other.kind(), ErrorKind::WrongStore);
}

#[tokio::test]
async fn a_creation_killed_halfway_leaves_nothing_that_blocks_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    // What a process killed inside redb's initialisation of a new file leaves behind: the staging file only.
    std::fs::write(dir.path().join("s.redb.creating"), vec![0u8; 8192]).unwrap();
    let store = Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("t").unwrap()).path(&path).open().await;
    assert!(store.is_ok(), "{:?}", store.err());
    assert!(!dir.path().join("s.redb.creating").exists());
}

#[tokio::test]
async fn an_existing_file_that_is_not_a_store_is_refused_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    std::fs::write(&path, vec![0u8; 8192]).unwrap();
    let result = Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("t").unwrap()).path(&path).open().await;
    assert!(result.is_err(), "a file that is not a redb database must not be opened");
    assert_eq!(std::fs::read(&path).unwrap(), vec![0u8; 8192], "and it must be left as it was");
}

#[tokio::test]
async fn without_a_mirror_the_local_log_stays_bounded() {
    use sinkpoint::StagingDurability;
    use sinkpoint::testkit::limits::LOG_RECORDS_RETAINED_MAX;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("mem://t").unwrap())
        .path(&path)
        .staging_durability(StagingDurability::None)
        .open()
        .await
        .unwrap();
    let a = id("input-0");
    let mut most = 0;
    // Enough records to cross the truncation threshold (twice the retained count) twice.
    let calls = 4 * LOG_RECORDS_RETAINED_MAX as u32 + 10;
    for part in 0..calls {
        store
            .stage(&a, StagePart::new(Attempt::FIRST, Part::new(part)).results(vec![result(&format!("f{part}"))]))
            .await
            .unwrap();
        if part % 256 == 0 {
            most = most.max(store.log_frames().unwrap().len());
        }
    }
    store.seal(&a, calls).await.unwrap();
    let frames = store.log_frames().unwrap().len() as u64;
    assert!(
        (LOG_RECORDS_RETAINED_MAX..2 * LOG_RECORDS_RETAINED_MAX).contains(&frames),
        "{frames} frames kept after {calls} records"
    );
    assert!((most as u64) < 2 * LOG_RECORDS_RETAINED_MAX, "the log reached {most} frames");
    assert_eq!(store.verify_log().unwrap(), frames, "the kept frames are dense and intact");
    store.close();
    let store = Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("mem://t").unwrap())
        .path(&path)
        .open()
        .await
        .unwrap();
    assert_eq!(store.get(&a).unwrap().unwrap().state, CheckpointState::Sealed);
    assert_eq!(store.pending().unwrap().checkpoints[0].results.len(), calls as usize);
}
