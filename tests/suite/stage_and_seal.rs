//! `Store::stage_and_seal` (issue 15): a checkpoint's last part staged and sealed in one durable commit, with
//! the rules of the two calls it replaces.

use std::time::Duration;

use sinkpoint::{
    Attempt, CheckpointId, CheckpointState, Format, Part, StageOutcome, StagePart, TransitionError, WriteResult,
};

use crate::common::plain_store as store;

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

/// Staging is linear in a checkpoint's parts: each stage checks its attempt's byte limit against the size the
/// stage before it left, not by summing every part again. 4,000 non-durable parts of one checkpoint take about
/// as long as 4,000 one-part checkpoints; summing the parts made it quadratic (see the ratio printed; the local
/// bench's stage rows, 50,000 parts a checkpoint, took 1.3 ms a call with the sum).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::disallowed_methods, reason = "the time of the stage calls is what is checked")]
async fn staging_many_parts_of_one_checkpoint_costs_what_as_many_checkpoints_cost() {
    const PARTS: u32 = 4_000;
    let dir = tempfile::tempdir().unwrap();
    let store =
        sinkpoint::Store::builder(sinkpoint::JobId::new("j").unwrap(), sinkpoint::TargetIdentity::new("t").unwrap())
            .path(dir.path().join("s.redb"))
            .staging_durability(sinkpoint::StagingDurability::None)
            .open()
            .await
            .unwrap();
    // Each shape timed twice, interleaved, and the faster run kept: a burst of load from the suite's other
    // tests then has to hit both runs of one shape to move the ratio.
    let (mut one_checkpoint, mut many_checkpoints) = (Duration::MAX, Duration::MAX);
    for round in 0..2 {
        let one = CheckpointId::new(format!("one-{round}")).unwrap();
        let started = std::time::Instant::now();
        for n in 0..PARTS {
            store.stage(&one, part(n, &format!("in/one-{round}/{n}"))).await.unwrap();
        }
        one_checkpoint = one_checkpoint.min(started.elapsed());
        let started = std::time::Instant::now();
        for n in 0..PARTS {
            let id = CheckpointId::new(format!("c-{round}-{n}")).unwrap();
            store.stage(&id, part(0, &format!("in/c-{round}/{n}"))).await.unwrap();
        }
        many_checkpoints = many_checkpoints.min(started.elapsed());
    }
    let ratio = one_checkpoint.as_secs_f64() / many_checkpoints.as_secs_f64();
    println!(
        "{PARTS} parts: one checkpoint {one_checkpoint:?}, as many checkpoints {many_checkpoints:?} ({ratio:.2}x)"
    );
    assert!(ratio < 2.0, "staging {PARTS} parts of one checkpoint took {ratio:.2}x as long as {PARTS} checkpoints");
}
