//! Proves the commit protocol's recovery from F1, F2 and U, each against a naive committer that shows the
//! duplicate or the loss the protocol prevents; the strict key sequence on a watermark target; a multi-key job
//! crashed after its third key; mismatches reported, never marked; lost state refused; the final fast path.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use sinkpoint::Committer;
use sinkpoint::commit::{Blocked, CrashHook, crash_points};
use sinkpoint::testkit::RawProtocol;
use sinkpoint::testkit::{CommitFault, CrashBackend, FaultyTarget, ProbeFault, WatermarkTable};
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{CheckpointState, CommitKey, ErrorKind, Store, Target, TargetCommit, WriteResult};

/// A hook that stops the committer the first time it reaches `point`.
fn crash_at(point: &'static str) -> CrashHook {
    Arc::new(move |at| at == point)
}

/// A hook that stops the committer the `nth` time (from 1) it reaches `point`.
fn crash_at_nth(point: &'static str, nth: usize) -> CrashHook {
    let seen = AtomicUsize::new(0);
    Arc::new(move |at| at == point && seen.fetch_add(1, Ordering::SeqCst) + 1 == nth)
}

/// What a checkpoint store without probes does on a rerun: everything not marked committed is committed again
/// under the next free key (Daft-like stores that assume an in-flight commit failed).
async fn naive_rerun(store: &Store, target: &dyn Target) {
    let pending = store.pending().unwrap();
    let results: Vec<WriteResult> = pending.checkpoints.iter().flat_map(|c| c.results.clone()).collect();
    let ids: Vec<_> = pending.checkpoints.iter().map(|c| c.info.id.clone()).collect();
    let key = CommitKey { job: job(), n: pending.next_key };
    let commit = TargetCommit {
        key: &key,
        ids: &ids,
        epoch: store.epoch(),
        results: &results,
        final_commit: true,
        prepared_version: None,
    };
    let _ = target.commit(&commit).await;
}

/// What a checkpoint store that assumes an in-flight commit landed does: it forgets the pending results.
async fn assume_landed(store: &Store) {
    if let Some(n) = store.pending().unwrap().in_flight.map(|c| c.key) {
        store.mark_committed(n).await.unwrap();
    }
}

async fn run_inputs(store: &Store, table: &sinkpoint::DirTable, range: std::ops::Range<usize>) {
    for i in range {
        process(store, table, i).await;
    }
}

/// Seals `inputs` into a new store, stops its committer at `point` of the commit (a crash: the store is poisoned),
/// and reopens the store as the next run does.
async fn crashed_at(
    backend: &CrashBackend,
    target: &dyn Target,
    table: &sinkpoint::DirTable,
    inputs: std::ops::Range<usize>,
    point: &'static str,
) -> Store {
    let store = open(backend).await;
    run_inputs(&store, table, inputs).await;
    let err = Committer::new(&store, target).with_crash_hook(crash_at(point)).commit_pending().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Poisoned, "{err}");
    store.close();
    open(backend).await
}

#[tokio::test]
async fn f1_a_landed_commit_is_only_marked_on_recovery() {
    for naive in [false, true] {
        let backend = CrashBackend::new();
        let table = memory_table();
        let store = open(&backend).await;
        run_inputs(&store, &table, 0..3).await;
        let err = Committer::new(&store, &table)
            .with_crash_hook(crash_at(crash_points::AFTER_TARGET_COMMIT_BEFORE_MARK))
            .finish()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Poisoned, "{err}");
        store.close();

        let store = open(&backend).await;
        if naive {
            naive_rerun(&store, &table).await;
            assert!(account(&table, 3).await.duplicates > 0, "the naive rerun should duplicate: the test is too weak");
            continue;
        }
        let report = Committer::new(&store, &table).recover().await.unwrap();
        assert_eq!(report.marked_landed, Some(0));
        assert!(report.finished, "the final key landed: the fast path applies");
        assert_eq!(account(&table, 3).await, exactly_once(3));
        for i in 0..3 {
            assert_eq!(store.get(&input_id(i)).unwrap().unwrap().state, CheckpointState::Committed { key: Some(0) });
        }
    }
}

#[tokio::test]
async fn f2_a_failed_commit_is_recommitted_under_the_same_key() {
    for naive in [false, true] {
        let backend = CrashBackend::new();
        let target = FaultyTarget::scripted(memory_table(), vec![CommitFault::FailBeforeCommit], vec![]);
        let store = open(&backend).await;
        run_inputs(&store, target.inner(), 0..4).await;
        let err = Committer::new(&store, &target).finish().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Target, "{err}");
        store.close();

        let store = open(&backend).await;
        if naive {
            assume_landed(&store).await;
            run_inputs(&store, target.inner(), 0..4).await;
            Committer::new(&store, &target).finish().await.unwrap();
            assert_eq!(
                account(target.inner(), 4).await.missing,
                4 * ROWS_PER_INPUT,
                "the naive rerun should lose rows"
            );
            continue;
        }
        let report = Committer::new(&store, &target).recover().await.unwrap();
        assert_eq!(report.recommitted, Some(0), "{:?}", target.calls());
        assert_eq!(account(target.inner(), 4).await, exactly_once(4));
        assert_eq!(target.inner().commits().await.unwrap().len(), 1, "one key, one commit");
    }
}

#[tokio::test]
async fn u_an_unknown_outcome_that_landed_is_found_by_the_probe() {
    for naive in [false, true] {
        let backend = CrashBackend::new();
        // The first probe is the check, before key 0 is begun, that the target does not hold it.
        let probes = vec![ProbeFault::Pass, ProbeFault::Unknown, ProbeFault::Unknown];
        let target = FaultyTarget::scripted(memory_table(), vec![CommitFault::LandThenLoseAck], probes);
        let store = open(&backend).await;
        run_inputs(&store, target.inner(), 0..2).await;
        let err = Committer::new(&store, &target).commit_pending().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Target, "{err}");
        assert_eq!(store.get(&input_id(0)).unwrap().unwrap().state, CheckpointState::CommitUnknown { key: 0 });
        // No later key may begin while key 0 is unknown.
        run_inputs(&store, target.inner(), 2..3).await;
        let err = Committer::new(&store, &target).commit_pending().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Target);
        assert_eq!(store.pending().unwrap().next_key, 1);
        store.close();

        let store = open(&backend).await;
        if naive {
            naive_rerun(&store, target.inner()).await;
            assert!(account(target.inner(), 3).await.duplicates > 0, "assuming NotCommitted should duplicate");
            continue;
        }
        let report = Committer::new(&store, &target).recover().await.unwrap();
        assert_eq!(report.marked_landed, Some(0), "{:?}", target.calls());
        assert_eq!(report.committed_keys, vec![1]);
        assert_eq!(account(target.inner(), 3).await, exactly_once(3));
    }
}

#[tokio::test]
async fn u_an_unknown_outcome_that_did_not_land_is_recommitted_under_the_same_key() {
    for naive in [false, true] {
        let backend = CrashBackend::new();
        // The first probe is the check, before key 0 is begun, that the target does not hold it.
        let probes = vec![ProbeFault::Pass, ProbeFault::Unknown];
        let target = FaultyTarget::scripted(memory_table(), vec![CommitFault::UnknownNotLanded], probes);
        let store = open(&backend).await;
        run_inputs(&store, target.inner(), 0..2).await;
        Committer::new(&store, &target).finish().await.unwrap_err();
        store.close();

        let store = open(&backend).await;
        if naive {
            assume_landed(&store).await;
            assert_eq!(account(target.inner(), 2).await.missing, 2 * ROWS_PER_INPUT, "assuming landed should lose");
            continue;
        }
        let report = Committer::new(&store, &target).recover().await.unwrap();
        assert_eq!(report.recommitted, Some(0), "{:?}", target.calls());
        assert!(report.finished);
        assert_eq!(account(target.inner(), 2).await, exactly_once(2));
    }
}

#[tokio::test]
async fn a_commit_that_lands_late_after_an_unknown_answer_is_not_duplicated() {
    let backend = CrashBackend::new();
    let target = FaultyTarget::scripted(memory_table(), vec![CommitFault::LandLateAfterUnknown], vec![]);
    let store = open(&backend).await;
    run_inputs(&store, target.inner(), 0..3).await;
    // The immediate probe lands the late commit first, then finds it.
    Committer::new(&store, &target).finish().await.unwrap();
    assert!(store.is_finished().unwrap());
    assert_eq!(account(target.inner(), 3).await, exactly_once(3));
}

#[tokio::test]
async fn a_watermark_target_never_sees_key_n_plus_1_while_key_n_is_unknown() {
    let backend = CrashBackend::new();
    let table = memory_table();
    let target = FaultyTarget::scripted(
        WatermarkTable::new(),
        vec![CommitFault::UnknownNotLanded],
        // The first probe is the check, before key 0 is begun, that the target does not hold it.
        vec![ProbeFault::Pass, ProbeFault::Unknown, ProbeFault::Unknown],
    );
    let store = open(&backend).await;
    run_inputs(&store, &table, 0..2).await;
    Committer::new(&store, &target).commit_pending().await.unwrap_err();
    // Later work arrives while key 0 is unknown; the committer must not begin key 1, or the watermark would
    // answer "version ≥ 0" for a key 0 that never landed.
    run_inputs(&store, &table, 2..4).await;
    let err = Committer::new(&store, &target).commit_pending().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Target);
    let pending = store.pending().unwrap();
    assert_eq!((pending.next_key, pending.in_flight.map(|c| c.key)), (1, Some(0)));
    assert!(target.inner().results().is_empty());
    // The probe now answers NotCommitted: key 0 is re-committed, then key 1 covers the later work.
    let report = Committer::new(&store, &target).finish().await.unwrap();
    assert_eq!(report.committed_keys, vec![0, 1]);
    let mut names: Vec<_> =
        target.inner().results().iter().map(|r| String::from_utf8(r.bytes().to_vec()).unwrap()).collect();
    names.sort();
    assert_eq!(names, (0..4).map(|i| format!("input-{i:04}-a0")).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_multi_key_job_crashed_after_its_third_key_skips_nothing() {
    let backend = CrashBackend::new();
    let table = memory_table();
    let store = open(&backend).await;
    let hook = crash_at_nth(crash_points::AFTER_TARGET_COMMIT_BEFORE_MARK, 3);
    let mut crashed = false;
    for round in 0..5 {
        run_inputs(&store, &table, round * 2..round * 2 + 2).await;
        if let Err(e) = Committer::new(&store, &table).with_crash_hook(hook.clone()).commit_pending().await {
            assert_eq!(e.kind(), ErrorKind::Poisoned);
            crashed = true;
            break;
        }
    }
    assert!(crashed, "the third key should have crashed");
    store.close();

    let store = open(&backend).await;
    let report = Committer::new(&store, &table).recover().await.unwrap();
    assert_eq!(report.marked_landed, Some(2));
    run_inputs(&store, &table, 0..10).await; // The rerun visits every input; the processed ones are skipped.
    Committer::new(&store, &table).finish().await.unwrap();
    assert_eq!(account(&table, 10).await, exactly_once(10));
    assert_eq!(table.commits().await.unwrap().len(), 4);
}

#[tokio::test]
async fn a_mismatch_is_reported_and_nothing_is_marked() {
    let backend = CrashBackend::new();
    let table = memory_table();
    let store = open(&backend).await;
    run_inputs(&store, &table, 0..2).await;
    let err = Committer::new(&store, &table)
        .with_crash_hook(crash_at(crash_points::AFTER_BEGIN_COMMIT))
        .commit_pending()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Poisoned);
    // Another writer lands key 0 with another set before we recover.
    let key = CommitKey { job: job(), n: 0 };
    let other = [input_id(9)];
    let commit =
        TargetCommit { key: &key, ids: &other, epoch: 1, results: &[], final_commit: false, prepared_version: None };
    assert_eq!(table.commit(&commit).await, sinkpoint::CommitOutcome::Committed);
    store.close();

    let store = open(&backend).await;
    let report = Committer::new(&store, &table).recover().await.unwrap();
    assert!(matches!(report.blocked, Some(Blocked::Mismatch { key: 0, .. })), "{report:?}");
    assert_eq!(store.get(&input_id(0)).unwrap().unwrap().state, CheckpointState::Committing { key: 0 });
    let err = Committer::new(&store, &table).finish().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CommitMismatch, "{err}");
    assert_eq!(account(&table, 2).await.missing, 2 * ROWS_PER_INPUT, "nothing of ours landed");
}

#[tokio::test]
async fn a_fresh_store_for_a_job_already_in_the_target_is_refused() {
    let table = memory_table();
    let store = open(&CrashBackend::new()).await;
    run_inputs(&store, &table, 0..2).await;
    Committer::new(&store, &table).finish().await.unwrap();
    store.close();
    // The local state is gone (a wrong path, a deleted file): starting afresh would duplicate everything.
    let store = open(&CrashBackend::new()).await;
    let err = Committer::new(&store, &table).recover().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongStore, "{err}");
}

/// A fresh store whose check of key 0 gets no answer from the target stops before it begins anything, and its
/// error says what happened and what to do: nothing was begun, retry. The retry commits every input once.
#[tokio::test]
async fn a_fresh_store_whose_key_0_check_gets_no_answer_begins_nothing_and_says_retry() {
    let target = FaultyTarget::scripted(memory_table(), Vec::new(), vec![ProbeFault::Unknown]);
    let store = open(&CrashBackend::new()).await;
    run_inputs(&store, target.inner(), 0..2).await;
    let err = Committer::new(&store, &target).commit_pending().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Target, "{err}");
    let message = err.to_string();
    for words in ["before its first commit", "Nothing was begun", "retry"] {
        assert!(message.contains(words), "{words:?} missing from: {message}");
    }
    assert!(store.pending().unwrap().in_flight.is_none());
    Committer::new(&store, &target).finish().await.unwrap();
    assert_eq!(account(target.inner(), 2).await, exactly_once(2));
}

/// Issue 15: a fresh job that recovers, then commits, probes key 0 once (at `recover`), not again before it
/// begins it: the open's handle remembers the answer, and a zombie's key 0 landing in between is still caught
/// when ours is refused (red-team 13).
#[tokio::test]
async fn a_fresh_job_probes_key_0_once() {
    let target = FaultyTarget::scripted(memory_table(), Vec::new(), Vec::new());
    let store = open(&CrashBackend::new()).await;
    Committer::new(&store, &target).recover().await.unwrap();
    run_inputs(&store, target.inner(), 0..2).await;
    Committer::new(&store, &target).finish().await.unwrap();
    let probes_of_key_0 = target.calls().iter().filter(|c| c.starts_with("probe key 0 ")).count();
    assert_eq!(probes_of_key_0, 1, "{:?}", target.calls());
}

/// Issue 15: the target is checked once an open, before the first key the open begins, not before every key:
/// a job of three keys probes once, and a reopened store probes the first key it begins once more (it may have
/// been restored from a mirror that went backwards), then none. Every probe here is a `refuse_*` check: nothing
/// is in flight.
#[tokio::test]
async fn the_target_is_checked_once_an_open_not_once_a_key() {
    let backend = CrashBackend::new();
    let target = FaultyTarget::scripted(memory_table(), Vec::new(), Vec::new());
    let probes = || target.calls().iter().filter(|c| c.starts_with("probe key ")).cloned().collect::<Vec<_>>();
    let store = open(&backend).await;
    Committer::new(&store, &target).recover().await.unwrap();
    for keys in [0..2, 2..4, 4..6] {
        run_inputs(&store, target.inner(), keys).await;
        Committer::new(&store, &target).commit_pending().await.unwrap();
    }
    assert_eq!(probes().len(), 1, "{:?}", target.calls());
    store.close();
    let store = open(&backend).await;
    Committer::new(&store, &target).recover().await.unwrap();
    for keys in [6..8, 8..10] {
        run_inputs(&store, target.inner(), keys).await;
        Committer::new(&store, &target).commit_pending().await.unwrap();
    }
    Committer::new(&store, &target).finish().await.unwrap();
    let probes = probes();
    assert_eq!(probes.len(), 2, "{:?}", target.calls());
    assert!(probes[1].starts_with("probe key 3 "), "the reopened store's first key: {probes:?}");
    assert_eq!(account(target.inner(), 10).await.duplicates, 0);
}

/// Found by the `crash_replay` fuzz target: a new store that committed key 0 itself was refused as "state
/// lost" by a later `recover` on the same handle, with an error that says never to go on.
#[tokio::test]
async fn a_new_store_that_committed_key_0_itself_is_not_refused_by_a_later_recover() {
    let table = memory_table();
    let store = open(&CrashBackend::new()).await;
    assert!(store.created());
    Committer::new(&store, &table).recover().await.unwrap();
    run_inputs(&store, &table, 0..2).await;
    Committer::new(&store, &table).commit_pending().await.unwrap();
    let report = Committer::new(&store, &table).recover().await.unwrap();
    assert!(report.blocked.is_none() && report.committed_keys.is_empty(), "{report:?}");
    // The same holds while its own key 0 is in flight: a job that retries after an unknown outcome, on the
    // same handle, has the key resolved, not taken for lost state.
    // Probes: recovery's check of key 0 (the handle remembers it, so none again before key 0 begins), the probe
    // after the lost ack.
    let probes = vec![ProbeFault::Pass, ProbeFault::Unknown];
    let faulty = FaultyTarget::scripted(memory_table(), vec![CommitFault::LandThenLoseAck], probes);
    let store = open(&CrashBackend::new()).await;
    Committer::new(&store, &faulty).recover().await.unwrap();
    run_inputs(&store, faulty.inner(), 0..1).await;
    let err = Committer::new(&store, &faulty).finish().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Target, "{err}");
    let report = Committer::new(&store, &faulty).recover().await.unwrap();
    assert_eq!(report.marked_landed, Some(0), "{report:?}");
    assert!(report.finished, "{report:?}");
}

/// A new store over lost state that skips `recover` and commits to a watermark target: the target's key 0 (a
/// lost run's) must not be taken for the store's own. Before the check moved in front of key 0, the second
/// `commit_pending` probed its own key 0, found the watermark past it, and marked results committed that never
/// landed.
#[tokio::test]
async fn key_0_is_begun_only_if_the_target_does_not_hold_it() {
    let table = WatermarkTable::new();
    let store = open(&CrashBackend::new()).await;
    run_inputs_on(&store, &table, 0..2).await;
    Committer::new(&store, &table).finish().await.unwrap();
    store.close();
    let store = open(&CrashBackend::new()).await;
    run_inputs_on(&store, &table, 2..4).await;
    for _ in 0..2 {
        let err = Committer::new(&store, &table).finish().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WrongStore, "{err}");
    }
    assert_eq!(store.get(&input_id(2)).unwrap().unwrap().state, CheckpointState::Sealed);
    assert_eq!(table.results().len(), 2);
    let err = Committer::new(&store, &table).recover().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongStore, "{err}");
}

/// Stages and seals inputs with one result each, for a target that is not a `DirTable`.
async fn run_inputs_on(store: &Store, _target: &dyn Target, range: std::ops::Range<usize>) {
    for i in range {
        let result = WriteResult::new(sinkpoint::Format::Parquet, format!("file-{i}").into_bytes()).unwrap();
        store
            .stage(
                &input_id(i),
                StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![input_key(i)]).results(vec![result]),
            )
            .await
            .unwrap();
        store.seal(&input_id(i), 1).await.unwrap();
    }
}

#[tokio::test]
async fn checkpoints_without_results_commit_without_a_target_commit() {
    let table = memory_table();
    let store = open(&CrashBackend::new()).await;
    let id = input_id(0);
    store.stage(&id, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![input_key(0)])).await.unwrap();
    store.seal(&id, 1).await.unwrap();
    let report = Committer::new(&store, &table).finish().await.unwrap();
    assert_eq!((report.committed_empty, report.committed_keys.len()), (1, 0));
    assert!(table.commits().await.unwrap().is_empty());
    assert_eq!(store.get(&id).unwrap().unwrap().state, CheckpointState::Committed { key: None });
}

#[tokio::test]
async fn a_rerun_after_the_final_commit_takes_the_fast_path() {
    let backend = CrashBackend::new();
    let table = memory_table();
    let store = open(&backend).await;
    run_inputs(&store, &table, 0..3).await;
    Committer::new(&store, &table).finish().await.unwrap();
    store.close();
    let store = open(&backend).await;
    let report = Committer::new(&store, &table).recover().await.unwrap();
    assert!(report.finished && report.committed_keys.is_empty());
    assert_eq!(account(&table, 3).await, exactly_once(3));
}

#[tokio::test]
async fn a_commit_over_the_results_limit_is_refused_and_the_committer_splits_it() {
    use sinkpoint::limits::{COMMIT_RESULTS_MAX, STAGE_RESULTS_MAX};
    let table = memory_table();
    let store = open(&CrashBackend::new()).await;
    // Two checkpoints whose results together exceed one commit's limit.
    let per_checkpoint = COMMIT_RESULTS_MAX / 2 + STAGE_RESULTS_MAX;
    let parts = (per_checkpoint / STAGE_RESULTS_MAX) as u32;
    for i in 0..2 {
        let id = input_id(i);
        for part in 0..parts {
            let results: Vec<WriteResult> = (0..STAGE_RESULTS_MAX)
                .map(|r| {
                    WriteResult::new(sinkpoint::Format::Parquet, format!("in{i}-p{part}-r{r}").into_bytes()).unwrap()
                })
                .collect();
            store.stage(&id, StagePart::new(Attempt::FIRST, Part::new(part)).results(results)).await.unwrap();
        }
        store.seal(&id, parts).await.unwrap();
    }
    let err = store.begin_commit(0, &[input_id(0), input_id(1)], None, false).await.unwrap_err();
    assert!(matches!(err.transition(), Some(sinkpoint::TransitionError::CommitTooLarge { .. })), "{err}");
    let pending = store.pending().unwrap();
    assert_eq!((pending.next_key, pending.in_flight), (0, None), "nothing was written");
    let report = Committer::new(&store, &table).finish().await.unwrap();
    assert_eq!(report.committed_keys, vec![0, 1]);
}

/// Without a mirror nothing fences a second driver of the same job: the first driver's key 0 landing between
/// the second's check of key 0 and its commit must not be taken for the second's (a watermark target's probe
/// cannot tell them apart), now or on any later call.
#[tokio::test]
async fn without_a_mirror_a_zombies_key_0_landing_after_the_probe_is_not_marked_as_ours() {
    /// Driver 2's view of the shared table: right after its first probe answered, driver 1 commits key 0.
    struct Race<'a> {
        table: &'a WatermarkTable,
        zombie: std::sync::Mutex<Option<Store>>,
    }
    #[async_trait::async_trait]
    impl Target for Race<'_> {
        async fn version(&self) -> sinkpoint::Result<Option<u64>> {
            self.table.version().await
        }
        async fn commit(&self, commit: &TargetCommit<'_>) -> sinkpoint::CommitOutcome {
            self.table.commit(commit).await
        }
        async fn probe(&self, key: &CommitKey, v: Option<u64>) -> sinkpoint::ProbeOutcome {
            let outcome = self.table.probe(key, v).await;
            let zombie = self.zombie.lock().unwrap().take();
            if let Some(zombie) = zombie {
                Committer::new(&zombie, self.table).commit_pending().await.unwrap();
                zombie.close();
            }
            outcome
        }
    }
    let table = WatermarkTable::new();
    let driver1 = open(&CrashBackend::new()).await;
    run_inputs_on(&driver1, &table, 0..1).await;
    let driver2 = open(&CrashBackend::new()).await;
    let race = Race { table: &table, zombie: std::sync::Mutex::new(Some(driver1)) };
    Committer::new(&driver2, &race).recover().await.unwrap();
    run_inputs_on(&driver2, &table, 0..2).await;
    for _ in 0..3 {
        let err = Committer::new(&driver2, &race).commit_pending().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WrongStore, "{err}");
    }
    let err = Committer::new(&driver2, &race).recover().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongStore, "{err}");
    for i in 0..2 {
        let state = driver2.get(&input_id(i)).unwrap().unwrap().state;
        assert!(!matches!(state, CheckpointState::Committed { .. }), "input {i} marked committed: {state:?}");
    }
    assert_eq!(table.results().len(), 1, "only driver 1's key 0 landed");
}

/// Red-team 13, the rest: after an unknown outcome whose probe proves our key did not land, another driver's
/// commit of that key landing before we send it again must not be taken for ours either (a watermark target's
/// probe cannot tell them apart): the key is sent again at once, and the refusal is another writer's.
#[tokio::test]
async fn a_zombies_key_landing_after_a_not_committed_probe_is_not_marked_as_ours() {
    /// Driver 2's view of the shared table: its first commit's outcome is lost (nothing lands), and right after
    /// the probe that proves it, driver 1 commits key 0.
    struct Race<'a> {
        table: &'a WatermarkTable,
        commits: AtomicUsize,
        zombie: std::sync::Mutex<Option<Store>>,
    }
    #[async_trait::async_trait]
    impl Target for Race<'_> {
        async fn version(&self) -> sinkpoint::Result<Option<u64>> {
            self.table.version().await
        }
        async fn commit(&self, commit: &TargetCommit<'_>) -> sinkpoint::CommitOutcome {
            if self.commits.fetch_add(1, Ordering::SeqCst) == 0 {
                return sinkpoint::CommitOutcome::Unknown { reason: "timed out".into() };
            }
            self.table.commit(commit).await
        }
        async fn probe(&self, key: &CommitKey, v: Option<u64>) -> sinkpoint::ProbeOutcome {
            let answer = self.table.probe(key, v).await;
            let zombie = (self.commits.load(Ordering::SeqCst) > 0).then(|| self.zombie.lock().unwrap().take());
            if let Some(Some(zombie)) = zombie {
                Committer::new(&zombie, self.table).commit_pending().await.unwrap();
                zombie.close();
            }
            answer
        }
    }
    let table = WatermarkTable::new();
    let driver1 = open(&CrashBackend::new()).await;
    run_inputs_on(&driver1, &table, 0..1).await;
    let driver2 = open(&CrashBackend::new()).await;
    let race = Race { table: &table, commits: AtomicUsize::new(0), zombie: std::sync::Mutex::new(Some(driver1)) };
    run_inputs_on(&driver2, &table, 0..2).await;
    for _ in 0..3 {
        let err = Committer::new(&driver2, &race).commit_pending().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WrongStore, "{err}");
    }
    for i in 0..2 {
        let state = driver2.get(&input_id(i)).unwrap().unwrap().state;
        assert!(!matches!(state, CheckpointState::Committed { .. }), "input {i} marked committed: {state:?}");
    }
    assert_eq!(table.results().len(), 1, "only driver 1's key 0 landed");
}

/// A probe may return the landed ids in any order (an adapter that keeps them as a set, or in the table's
/// order): the committer compares them as sets.
#[tokio::test]
async fn a_probe_returning_the_ids_in_another_order_is_not_a_mismatch() {
    struct Reversed(FaultyTarget<sinkpoint::DirTable>);
    #[async_trait::async_trait]
    impl Target for Reversed {
        async fn version(&self) -> sinkpoint::Result<Option<u64>> {
            self.0.version().await
        }
        async fn commit(&self, commit: &TargetCommit<'_>) -> sinkpoint::CommitOutcome {
            self.0.commit(commit).await
        }
        async fn probe(&self, key: &CommitKey, v: Option<u64>) -> sinkpoint::ProbeOutcome {
            match self.0.probe(key, v).await {
                sinkpoint::ProbeOutcome::Committed { ids: Some(mut ids) } => {
                    ids.reverse();
                    sinkpoint::ProbeOutcome::Committed { ids: Some(ids) }
                }
                other => other,
            }
        }
    }
    let target = Reversed(FaultyTarget::scripted(memory_table(), vec![CommitFault::LandThenLoseAck], vec![]));
    let store = open(&CrashBackend::new()).await;
    run_inputs(&store, target.0.inner(), 0..3).await;
    Committer::new(&store, &target).commit_pending().await.unwrap();
    assert_eq!(account(target.0.inner(), 3).await, exactly_once(3));
    assert_eq!(store.get(&input_id(2)).unwrap().unwrap().state, CheckpointState::Committed { key: Some(0) });
}

/// A key in flight whose probe finds another set under it (here a stray commit under our key 0) stays blocked
/// until the operator acts: `unbind` puts its checkpoints back to Sealed with their results. While the table
/// still holds the stray commit the store refuses to begin the key again (no duplicate); once the operator has
/// removed it, the next `commit_pending` commits every row exactly once.
#[tokio::test]
async fn a_mismatched_key_unbound_by_the_operator_commits_every_row_once() {
    let objects = Arc::new(object_store::memory::InMemory::new());
    let table = sinkpoint::DirTable::new(objects.clone(), "table".into());
    let backend = CrashBackend::new();
    let store = open(&backend).await;
    run_inputs(&store, &table, 0..2).await;
    let err = Committer::new(&store, &table)
        .with_crash_hook(crash_at(crash_points::AFTER_BEGIN_COMMIT))
        .commit_pending()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Poisoned, "{err}");
    store.close();
    // A stray commit (no rows) lands under key 0 with only input 0.
    let ids = vec![input_id(0)];
    let stray = TargetCommit {
        key: &CommitKey { job: job(), n: 0 },
        ids: &ids,
        epoch: 0,
        results: &[],
        final_commit: false,
        prepared_version: None,
    };
    assert_eq!(table.commit(&stray).await, sinkpoint::CommitOutcome::Committed);

    let store = open(&backend).await;
    let report = Committer::new(&store, &table).recover().await.unwrap();
    assert!(matches!(report.blocked, Some(Blocked::Mismatch { key: 0, .. })), "{report:?}");
    store.operator().unbind(0, "key 0 holds a stray commit, not ours").await.unwrap();
    assert_eq!(store.get(&input_id(1)).unwrap().unwrap().state, CheckpointState::Sealed);
    let err = Committer::new(&store, &table).commit_pending().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongStore, "the stray commit is still there: {err}");
    assert_eq!(account(&table, 2).await.rows, 0, "nothing was committed twice or marked");

    use object_store::ObjectStoreExt as _;
    objects.delete(&"table/_commits/job-1/00000000000000000000".into()).await.unwrap();
    let report = Committer::new(&store, &table).finish().await.unwrap();
    assert_eq!(report.committed_keys, vec![0]);
    assert_eq!(account(&table, 2).await, exactly_once(2));
    assert!(store.is_finished().unwrap());
}

/// Probes that never answer (the table's history expired): the first passes, for the key 0 check.
fn probes_forever_unknown() -> Vec<ProbeFault> {
    std::iter::once(ProbeFault::Pass).chain(std::iter::repeat_n(ProbeFault::Unknown, 64)).collect()
}

/// Commits inputs 0..2 under key 0 with the outcome `fault`, then leaves key 0 CommitUnknown: every probe is
/// Unknown.
async fn stuck_unknown(backend: &CrashBackend, fault: CommitFault) -> (Store, FaultyTarget<sinkpoint::DirTable>) {
    let target = FaultyTarget::scripted(memory_table(), vec![fault], probes_forever_unknown());
    let store = open(backend).await;
    run_inputs(&store, target.inner(), 0..2).await;
    let err = Committer::new(&store, &target).commit_pending().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Target, "{err}");
    let err = Committer::new(&store, &target).commit_pending().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Target, "still unknown: {err}");
    assert_eq!(store.get(&input_id(0)).unwrap().unwrap().state, CheckpointState::CommitUnknown { key: 0 });
    (store, target)
}

#[tokio::test]
async fn an_operators_not_committed_verdict_recommits_once_without_a_probe_even_after_a_crash() {
    let backend = CrashBackend::new();
    let (store, target) = stuck_unknown(&backend, CommitFault::UnknownNotLanded).await;
    store
        .operator()
        .resolve(0, sinkpoint::Resolution::NotCommitted, "checked the table: key 0 is not there")
        .await
        .unwrap();
    // A crash between the verdict and the re-commit must not lose the verdict.
    store.close();
    let store = open(&backend).await;
    let report = Committer::new(&store, &target).commit_pending().await.unwrap();
    assert_eq!(report.committed_keys, vec![0], "{:?}", target.calls());
    assert_eq!(store.get(&input_id(0)).unwrap().unwrap().state, CheckpointState::Committed { key: Some(0) });
    assert_eq!(account(target.inner(), 2).await, exactly_once(2));
}

#[tokio::test]
async fn an_operators_wrong_not_committed_verdict_does_not_duplicate_and_ends_committed() {
    let backend = CrashBackend::new();
    let (store, target) = stuck_unknown(&backend, CommitFault::LandThenLoseAck).await;
    store.operator().resolve(0, sinkpoint::Resolution::NotCommitted, "wrong: key 0 did land").await.unwrap();
    let report = Committer::new(&store, &target).commit_pending().await.unwrap();
    assert_eq!(report.committed_keys, vec![0], "{:?}", target.calls());
    assert_eq!(store.get(&input_id(1)).unwrap().unwrap().state, CheckpointState::Committed { key: Some(0) });
    assert_eq!(account(target.inner(), 2).await, exactly_once(2));
}

#[tokio::test]
async fn a_wrong_verdict_refused_by_the_target_after_a_reopen_is_dropped_and_the_probe_decides() {
    let backend = CrashBackend::new();
    // Two Unknown probes keep key 0 unknown; the probe after the refused re-send answers.
    let probes = vec![ProbeFault::Pass, ProbeFault::Unknown, ProbeFault::Unknown];
    let target = FaultyTarget::scripted(memory_table(), vec![CommitFault::LandThenLoseAck], probes);
    let store = open(&backend).await;
    run_inputs(&store, target.inner(), 0..2).await;
    Committer::new(&store, &target).commit_pending().await.unwrap_err();
    Committer::new(&store, &target).commit_pending().await.unwrap_err();
    store.operator().resolve(0, sinkpoint::Resolution::NotCommitted, "wrong: key 0 did land").await.unwrap();
    assert!(store.commit_info(0).unwrap().unwrap().awaits_recommit);
    store.close();
    // A new epoch: the target refuses the re-send (key 0 holds the old epoch's commit), the probe finds it.
    let store = open(&backend).await;
    let report = Committer::new(&store, &target).recover().await.unwrap();
    assert_eq!(report.marked_landed, Some(0), "{:?}", target.calls());
    assert!(!store.commit_info(0).unwrap().unwrap().awaits_recommit);
    assert_eq!(account(target.inner(), 2).await, exactly_once(2));
}

/// An operator's committed verdict on a key that is only being committed (the crash came before its send, so the
/// table holds nothing): refused with nothing logged, since it would lose every row; the run commits the key.
#[tokio::test]
async fn a_committed_verdict_on_a_key_only_being_committed_is_refused_and_the_run_commits_it() {
    let backend = CrashBackend::new();
    let table = memory_table();
    let store = crashed_at(&backend, &table, &table, 0..2, crash_points::AFTER_BEGIN_COMMIT).await;
    let frames = store.log_frames().unwrap().len();
    let err = store.operator().resolve(0, sinkpoint::Resolution::Committed, "sure it landed").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::IllegalTransition, "{err}");
    assert!(err.to_string().contains("running the job"), "the error says what settles it: {err}");
    assert_eq!(store.log_frames().unwrap().len(), frames, "a refused verdict logs nothing");
    assert_eq!(store.get(&input_id(0)).unwrap().unwrap().state, CheckpointState::Committing { key: 0 });
    let report = Committer::new(&store, &table).commit_pending().await.unwrap();
    assert_eq!(report.committed_keys, vec![0]);
    assert_eq!(account(&table, 2).await, exactly_once(2));
}

/// A key being committed whose probe cannot tell (the crash came after the send; the table's history is gone) is
/// recorded CommitUnknown by the run that probes it, so the verdict that settles it is taken.
#[tokio::test]
async fn a_key_being_committed_whose_probe_cannot_tell_is_recorded_unknown_and_takes_a_verdict() {
    let backend = CrashBackend::new();
    let target = FaultyTarget::scripted(memory_table(), vec![], probes_forever_unknown());
    let point = crash_points::AFTER_TARGET_COMMIT_BEFORE_MARK;
    let store = crashed_at(&backend, &target, target.inner(), 0..2, point).await;
    assert_eq!(store.get(&input_id(0)).unwrap().unwrap().state, CheckpointState::Committing { key: 0 });
    let report = Committer::new(&store, &target).recover().await.unwrap();
    assert!(matches!(report.blocked, Some(Blocked::Unknown { key: 0, .. })), "{report:?}");
    assert_eq!(store.get(&input_id(0)).unwrap().unwrap().state, CheckpointState::CommitUnknown { key: 0 });
    store.operator().resolve(0, sinkpoint::Resolution::Committed, "checked the table: key 0 is there").await.unwrap();
    assert_eq!(store.get(&input_id(1)).unwrap().unwrap().state, CheckpointState::Committed { key: Some(0) });
    assert_eq!(account(target.inner(), 2).await, exactly_once(2));
}

/// Two sealed checkpoints that need two commit keys (together over `COMMIT_RESULTS_MAX`).
async fn two_keys_of_work(store: &Store) {
    use sinkpoint::limits::{COMMIT_RESULTS_MAX, STAGE_RESULTS_MAX};
    let parts = ((COMMIT_RESULTS_MAX / 2 + STAGE_RESULTS_MAX) / STAGE_RESULTS_MAX) as u32;
    for i in 0..2 {
        for part in 0..parts {
            let results: Vec<WriteResult> = (0..STAGE_RESULTS_MAX)
                .map(|r| WriteResult::new(sinkpoint::Format::Parquet, format!("{i}-{part}-{r}").into_bytes()).unwrap())
                .collect();
            store
                .stage(
                    &input_id(i),
                    StagePart::new(Attempt::FIRST, Part::new(part))
                        .keys(vec![input_key(i)].into_iter().filter(|_| part == 0).collect())
                        .results(results),
                )
                .await
                .unwrap();
        }
        store.seal(&input_id(i), parts).await.unwrap();
    }
}

/// Reopens the store and returns what a rerun's `recover` reports as `finished`.
async fn finished_on_rerun(backend: &CrashBackend, store: Store, target: &dyn Target) -> bool {
    store.close();
    let store = open(backend).await;
    let finished = Committer::new(&store, target).recover().await.unwrap().finished;
    store.close();
    finished
}

#[tokio::test]
async fn the_fast_path_survives_a_crash_inside_a_multi_key_final_commit() {
    let backend = CrashBackend::new();
    let table = memory_table();
    let store = open(&backend).await;
    two_keys_of_work(&store).await;
    let err = Committer::new(&store, &table)
        .with_crash_hook(crash_at(crash_points::AFTER_TARGET_COMMIT_BEFORE_MARK))
        .finish()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Poisoned, "{err}");
    store.close();
    let store = open(&backend).await;
    let report = Committer::new(&store, &table).recover().await.unwrap();
    assert_eq!((report.marked_landed, report.committed_keys.clone()), (Some(0), vec![1]), "{report:?}");
    // The rerun ends the job as every run does.
    Committer::new(&store, &table).finish().await.unwrap();
    assert!(finished_on_rerun(&backend, store, &table).await, "the job ended: the rerun must take the fast path");
}

#[tokio::test]
async fn the_fast_path_holds_for_a_job_whose_checkpoints_carry_no_results() {
    let backend = CrashBackend::new();
    let table = memory_table();
    let store = open(&backend).await;
    store.stage(&input_id(0), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![input_key(0)])).await.unwrap();
    store.seal(&input_id(0), 1).await.unwrap();
    Committer::new(&store, &table).finish().await.unwrap();
    assert!(finished_on_rerun(&backend, store, &table).await);
}

#[tokio::test]
async fn the_fast_path_holds_when_a_periodic_commit_took_every_sealed_checkpoint() {
    let backend = CrashBackend::new();
    let table = memory_table();
    let store = open(&backend).await;
    run_inputs(&store, &table, 0..3).await;
    Committer::new(&store, &table).commit_pending().await.unwrap();
    let report = Committer::new(&store, &table).finish().await.unwrap();
    assert!(report.committed_keys.is_empty());
    assert!(finished_on_rerun(&backend, store, &table).await);
    assert_eq!(account(&table, 3).await, exactly_once(3));
}

#[tokio::test]
async fn the_end_of_a_job_is_refused_while_a_key_is_in_flight_and_recorded_once_it_is_committed() {
    let backend = CrashBackend::new();
    let table = memory_table();
    let store = open(&backend).await;
    run_inputs(&store, &table, 0..2).await;
    let err = store.mark_finished().await.unwrap_err();
    assert!(matches!(err.transition(), Some(sinkpoint::TransitionError::Unfinished { .. })), "{err}");
    let err = Committer::new(&store, &table)
        .with_crash_hook(crash_at(crash_points::AFTER_BEGIN_COMMIT))
        .finish()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Poisoned, "{err}");
    let err = store.mark_finished().await.unwrap_err();
    assert!(matches!(err.transition(), Some(sinkpoint::TransitionError::CommitInFlight { key: 0 })), "{err}");
    assert!(!store.is_finished().unwrap());
    Committer::new(&store, &table).finish().await.unwrap();
    assert!(finished_on_rerun(&backend, store, &table).await);
    assert_eq!(account(&table, 2).await, exactly_once(2));
}

#[tokio::test]
async fn the_retention_watermark_is_the_prepared_version_of_the_key_in_flight_and_none_otherwise() {
    let table = memory_table();
    let store = open(&CrashBackend::new()).await;
    assert_eq!(store.retention_watermark().unwrap(), None, "nothing in flight");
    run_inputs(&store, &table, 0..2).await;
    store.begin_commit(0, &[input_id(0), input_id(1)], Some(7), false).await.unwrap();
    assert_eq!(store.retention_watermark().unwrap(), Some(7), "key 0 in flight, prepared against version 7");
    store.mark_unknown(0, "timeout").await.unwrap();
    assert_eq!(store.retention_watermark().unwrap(), Some(7), "an unknown key still needs its probe");
    store.operator().resolve(0, sinkpoint::Resolution::Committed, "checked by hand").await.unwrap();
    assert_eq!(store.retention_watermark().unwrap(), None, "committed: nothing in flight");
}

/// A backlog over one commit's checkpoint limit goes out one page at a time (`Store::sealed_page`): key 0 holds
/// the first `COMMIT_CHECKPOINTS_MAX` by id, key 1 the rest and is the only one flagged final, and the
/// checkpoints without results met on the way are committed empty in the same call.
#[tokio::test]
async fn a_backlog_over_one_commits_limit_is_committed_page_by_page_and_only_the_last_key_is_final() {
    use sinkpoint::limits::COMMIT_CHECKPOINTS_MAX;
    let table = memory_table();
    let store = open(&CrashBackend::new()).await;
    let full = COMMIT_CHECKPOINTS_MAX + 5;
    for i in 0..full + 3 {
        let id = sinkpoint::CheckpointId::new(format!("backlog-{i:06}")).unwrap();
        let mut part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![format!("in/{i}").into_bytes()]);
        if i < full {
            part =
                part.results(vec![WriteResult::new(sinkpoint::Format::Parquet, format!("f{i}").into_bytes()).unwrap()]);
        }
        store.stage_and_seal(&id, part, 1).await.unwrap();
    }
    let report = Committer::new(&store, &table).finish().await.unwrap();
    assert_eq!((report.committed_keys.clone(), report.committed_empty), (vec![0, 1], 3), "{report:?}");
    let (zero, one) = (store.commit_info(0).unwrap().unwrap(), store.commit_info(1).unwrap().unwrap());
    assert_eq!((zero.ids.len(), zero.final_commit), (COMMIT_CHECKPOINTS_MAX, false));
    assert_eq!((one.ids.len(), one.final_commit), (5, true));
    assert!(zero.ids.windows(2).all(|w| w[0] < w[1]) && zero.ids.last() < one.ids.first(), "pages in id order");
    assert!(store.is_finished().unwrap());
}
