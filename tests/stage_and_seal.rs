//! `Store::stage_and_seal` (issue 15): a checkpoint's last part staged and sealed in one durable commit, with
//! the rules of the two calls it replaces.

use sinkpoint::{
    Attempt, CheckpointId, CheckpointState, Format, JobId, Part, StageOutcome, StagePart, Store, TargetIdentity,
    TransitionError, WriteResult,
};

async fn store(dir: &tempfile::TempDir) -> Store {
    let builder = Store::builder(JobId::new("j").unwrap(), TargetIdentity::new("t").unwrap());
    builder.path(dir.path().join("s.redb")).open().await.unwrap()
}

fn part(n: u32, key: &str) -> StagePart {
    let result = WriteResult::new(Format::Parquet, format!("{key}.parquet").into_bytes()).unwrap();
    StagePart::new(Attempt::FIRST, Part::new(n)).keys(vec![key.as_bytes().to_vec()]).results(vec![result])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_commit_instead_of_two_and_a_retry_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (a, b) = (CheckpointId::new("a").unwrap(), CheckpointId::new("b").unwrap());
    let before = store.stats().commits;
    store.stage(&a, part(0, "in/a")).await.unwrap();
    store.seal(&a, 1).await.unwrap();
    let two_calls = store.stats().commits - before;
    let before = store.stats().commits;
    assert_eq!(store.stage_and_seal(&b, part(0, "in/b"), 1).await.unwrap(), StageOutcome::Staged);
    let one_call = store.stats().commits - before;
    assert_eq!((two_calls, one_call), (2, 1));
    assert!(store.is_processed(b"in/b").unwrap());
    assert_eq!(store.get(&b).unwrap().unwrap().state, CheckpointState::Sealed);
    // The same call again (its ack lost): a no-op; with another part count: the seal's mismatch.
    assert_eq!(store.stage_and_seal(&b, part(0, "in/b"), 1).await.unwrap(), StageOutcome::AlreadyStaged);
    let err = store.stage_and_seal(&b, part(0, "in/b"), 2).await.unwrap_err();
    assert!(matches!(err.transition(), Some(TransitionError::SealMismatch { .. })), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_seal_leaves_the_part_staged_as_a_stage_alone_would() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let id = CheckpointId::new("multi").unwrap();
    let err = store.stage_and_seal(&id, part(0, "in/m0"), 2).await.unwrap_err();
    assert!(matches!(err.transition(), Some(TransitionError::MissingParts { .. })), "{err}");
    let info = store.get(&id).unwrap().unwrap();
    assert_eq!((info.state, info.results), (CheckpointState::Staged, 1));
    assert_eq!(store.stage_and_seal(&id, part(1, "in/m1"), 2).await.unwrap(), StageOutcome::Staged);
    assert!(store.is_processed(b"in/m0").unwrap() && store.is_processed(b"in/m1").unwrap());
    // A key another checkpoint owns: KeyConflict, and the part stays staged.
    let other = CheckpointId::new("other").unwrap();
    let err = store.stage_and_seal(&other, part(0, "in/m1"), 1).await.unwrap_err();
    assert!(matches!(err.transition(), Some(TransitionError::KeyConflict { .. })), "{err}");
    assert_eq!(store.get(&other).unwrap().unwrap().state, CheckpointState::Staged);
}
