//! Proves that group commit is safe under concurrency on a real, fsynced file: 32 tasks staging at once are all
//! acked durably and found again after reopen; concurrent calls are folded into shared redb commits; and two
//! seals claiming the same source key in one group commit leave exactly one owner, the loser refused with
//! nothing written.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sinkpoint::testkit::whitebox::Record;
use sinkpoint::testkit::whitebox::frame::decode_exact;
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{
    CheckpointId, CheckpointState, ErrorKind, Format, JobId, StageOutcome, Store, TargetIdentity, TransitionError,
    WriteResult,
};

const TASKS: usize = 32;
const PARTS: u32 = 8;

fn cid(s: &str) -> CheckpointId {
    CheckpointId::new(s).unwrap()
}

fn result(s: &str) -> WriteResult {
    WriteResult::new(Format::Parquet, s.as_bytes().to_vec()).unwrap()
}

async fn open(path: &std::path::Path) -> Store {
    Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("file:///t").unwrap())
        .path(path)
        .open()
        .await
        .unwrap()
}

/// Waits until `n` calls have been sent to the (held) writer.
#[expect(clippy::disallowed_methods, reason = "a bounded wait for another thread; the outcome does not depend on it")]
async fn wait_queued(store: &Store, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.stats().queued() < n {
        assert!(Instant::now() < deadline, "only {} of {n} calls reached the writer", store.stats().queued());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn task_id(t: usize) -> CheckpointId {
    cid(&format!("task-{t:02}"))
}

fn key(t: usize, p: u32) -> Vec<u8> {
    format!("key-{t:02}-{p}").into_bytes()
}

fn file(t: usize, p: u32) -> WriteResult {
    result(&format!("file-{t:02}-{p}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_tasks_staging_at_once_are_all_there_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Arc::new(open(&path).await);
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = task_id(t);
            let mut acked = 0;
            for p in 0..PARTS {
                let outcome = store
                    .stage(
                        &id,
                        StagePart::new(Attempt::FIRST, Part::new(p)).keys(vec![key(t, p)]).results(vec![file(t, p)]),
                    )
                    .await
                    .unwrap();
                assert_eq!(outcome, StageOutcome::Staged);
                acked += 1;
                if p % 3 == 0 {
                    // A retry after a lost ack, racing with everyone else's calls.
                    let again = store
                        .stage(
                            &id,
                            StagePart::new(Attempt::FIRST, Part::new(p))
                                .keys(vec![key(t, p)])
                                .results(vec![file(t, p)]),
                        )
                        .await
                        .unwrap();
                    assert_eq!(again, StageOutcome::AlreadyStaged);
                }
            }
            acked
        }));
    }
    let mut acked = 0;
    for task in tasks {
        acked += task.await.unwrap();
    }
    assert_eq!(acked, TASKS * PARTS as usize);
    let stats = store.stats();
    let retries = TASKS * (0..PARTS).filter(|p| p % 3 == 0).count();
    eprintln!("{TASKS} tasks: {stats:?}");
    assert_eq!(stats.calls, (acked + retries) as u64);
    assert_eq!(stats.queued(), 0);
    assert!(stats.commits < stats.calls, "group commit folded nothing: {stats:?}");
    Arc::try_unwrap(store).ok().unwrap().close();

    // Every acked part survived the reopen: the checkpoints are complete orphans now, which may be sealed.
    let store = Arc::new(open(&path).await);
    assert_eq!(store.epoch(), 2);
    assert_eq!(store.orphans(), (0..TASKS).map(task_id).collect::<Vec<_>>().as_slice());
    for t in 0..TASKS {
        let info = store.get(&task_id(t)).unwrap().unwrap();
        assert_eq!((info.state, info.results), (CheckpointState::Staged, PARTS), "{t}");
    }
    let seals: Vec<_> = (0..TASKS)
        .map(|t| {
            let store = store.clone();
            tokio::spawn(async move { store.seal(&task_id(t), PARTS).await })
        })
        .collect();
    for seal in seals {
        seal.await.unwrap().unwrap();
    }
    Arc::try_unwrap(store).ok().unwrap().close();

    let store = open(&path).await;
    let pending = store.pending().unwrap();
    assert_eq!(pending.checkpoints.len(), TASKS);
    for (t, checkpoint) in pending.checkpoints.iter().enumerate() {
        assert_eq!(checkpoint.info.id, task_id(t));
        assert_eq!(checkpoint.info.state, CheckpointState::Sealed);
        assert_eq!(checkpoint.results, (0..PARTS).map(|p| file(t, p)).collect::<Vec<_>>(), "{t}");
        for p in 0..PARTS {
            assert!(store.is_processed(&key(t, p)).unwrap(), "key {t} {p}");
        }
    }
    assert_eq!(store.processed_keys().count(), TASKS * PARTS as usize);
    store.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_made_while_the_writer_is_busy_share_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(&dir.path().join("s.redb")).await);
    let before = store.stats();
    let hold = store.hold_writer();
    let calls: Vec<_> = (0..TASKS)
        .map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                store.stage(&task_id(t), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(t, 0)])).await
            })
        })
        .collect();
    wait_queued(&store, TASKS as u64).await;
    drop(hold);
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), StageOutcome::Staged);
    }
    let after = store.stats();
    assert_eq!(after.calls - before.calls, TASKS as u64);
    assert_eq!((after.batches - before.batches, after.commits - before.commits), (1, 1), "{after:?}");
    Arc::try_unwrap(store).ok().unwrap().close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_seals_claiming_one_key_in_one_batch_leave_one_owner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Arc::new(open(&path).await);
    let (winner, loser) = (cid("input-a"), cid("input-b"));
    store
        .stage(
            &winner,
            StagePart::new(Attempt::FIRST, Part::FIRST)
                .keys(vec![b"shared".to_vec(), b"only-a".to_vec()])
                .results(vec![result("a")]),
        )
        .await
        .unwrap();
    store
        .stage(
            &loser,
            StagePart::new(Attempt::FIRST, Part::FIRST)
                .keys(vec![b"shared".to_vec(), b"only-b".to_vec()])
                .results(vec![result("b")]),
        )
        .await
        .unwrap();
    let frames = store.log_frames().unwrap().len();
    let before = store.stats();

    // Both seals queue behind the held writer, the winner's first, and then land in the same group commit.
    let hold = store.hold_writer();
    let first = tokio::spawn({
        let (store, id) = (store.clone(), winner.clone());
        async move { store.seal(&id, 1).await }
    });
    wait_queued(&store, 1).await;
    let second = tokio::spawn({
        let (store, id) = (store.clone(), loser.clone());
        async move { store.seal(&id, 1).await }
    });
    wait_queued(&store, 2).await;
    drop(hold);
    let (first, second) = (first.await.unwrap(), second.await.unwrap());

    let after = store.stats();
    assert_eq!((after.batches - before.batches, after.commits - before.commits), (1, 1), "not one batch: {after:?}");
    first.unwrap();
    let err = second.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::IllegalTransition);
    assert_eq!(
        err.transition(),
        Some(&TransitionError::KeyConflict { key: "shared".into(), id: loser.clone(), owner: winner.clone() })
    );
    let message = err.to_string();
    assert!(message.contains("input-a") && message.contains("input-b") && message.contains("shared"), "{message}");

    // Nothing of the loser was written: one new frame (the winner's seal), the loser still Staged, its own key
    // unprocessed, the shared key the winner's.
    let log = store.log_frames().unwrap();
    assert_eq!(log.len(), frames + 1);
    let last = decode_exact(log.last().unwrap(), "test").unwrap();
    assert_eq!(Record::from_payload(last.payload, "test").unwrap(), Record::Seal { id: winner.clone(), parts: 1 });
    let check = |store: &Store| {
        assert_eq!(store.get(&winner).unwrap().unwrap().state, CheckpointState::Sealed);
        let info = store.get(&loser).unwrap().unwrap();
        assert_eq!((info.state, info.parts, info.results), (CheckpointState::Staged, 0, 1));
        assert!(!store.is_processed(b"only-b").unwrap());
        let keys: Vec<Vec<u8>> = store.processed_keys().map(|k| k.unwrap()).collect();
        assert_eq!(keys, vec![b"only-a".to_vec(), b"shared".to_vec()]);
        let pending = store.pending().unwrap();
        assert_eq!(pending.checkpoints.iter().map(|c| c.info.id.clone()).collect::<Vec<_>>(), vec![winner.clone()]);
    };
    check(&store);
    Arc::try_unwrap(store).ok().unwrap().close();
    let store = open(&path).await;
    check(&store);

    // The loser's part is intact: once the operator frees the shared key, the loser seals with its own result.
    store.operator().force_abort(std::slice::from_ref(&winner), "the key belongs to input-b").await.unwrap();
    store.seal(&loser, 1).await.unwrap();
    let pending = store.pending().unwrap();
    assert_eq!(pending.checkpoints.len(), 1);
    assert_eq!(
        (pending.checkpoints[0].info.id.clone(), pending.checkpoints[0].results.clone()),
        (loser, vec![result("b")])
    );
    store.close();
}

/// An operator's `force_abort`, the task's `restart` and a re-seal, all while `commit_pending` waits for the
/// target's version: the committer must commit the attempt sealed when the key was begun, never the dropped
/// one it read before.
#[tokio::test]
async fn a_checkpoint_resealed_during_commit_pending_commits_its_sealed_attempt() {
    use sinkpoint::testkit::WatermarkTable;
    use sinkpoint::{CommitKey, Target, TargetCommit};
    use sinkpoint::{CommitOutcome, Committer, ProbeOutcome};

    /// A watermark table whose first `version()` runs the race on `store`.
    struct Racing<'a> {
        table: WatermarkTable,
        store: &'a Store,
        raced: std::sync::atomic::AtomicBool,
    }
    #[async_trait::async_trait]
    impl Target for Racing<'_> {
        async fn version(&self) -> sinkpoint::Result<Option<u64>> {
            if !self.raced.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let x = cid("x");
                let dropped = self.store.operator().force_abort(std::slice::from_ref(&x), "redo x").await.unwrap();
                assert_eq!(dropped, vec![result("rx-attempt0")]);
                self.store.restart(&x).await.unwrap();
                self.store
                    .stage(
                        &x,
                        StagePart::new(Attempt::new(1), Part::FIRST)
                            .keys(vec![b"kx".to_vec()])
                            .results(vec![result("rx-attempt1")]),
                    )
                    .await
                    .unwrap();
                self.store.seal(&x, 1).await.unwrap();
            }
            self.table.version().await
        }
        async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
            self.table.commit(commit).await
        }
        async fn probe(&self, key: &CommitKey, v: Option<u64>) -> ProbeOutcome {
            self.table.probe(key, v).await
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s.redb")).await;
    let x = cid("x");
    store
        .stage(
            &x,
            StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"kx".to_vec()]).results(vec![result("rx-attempt0")]),
        )
        .await
        .unwrap();
    store.seal(&x, 1).await.unwrap();
    let target = Racing { table: WatermarkTable::new(), store: &store, raced: false.into() };
    Committer::new(&store, &target).commit_pending().await.unwrap();
    assert_eq!(target.table.results(), vec![result("rx-attempt1")], "the sealed attempt, and only it");
    let info = store.get(&x).unwrap().unwrap();
    assert_eq!((info.state, info.attempt), (CheckpointState::Committed { key: Some(0) }, Attempt::new(1)));
    drop(target);
    store.close();
}
