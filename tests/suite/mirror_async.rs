//! Proves the mirror modes, on a gate and a logical clock rather than wall time: in asynchronous
//! mode the lag never exceeds its bound in groups or in age (callers wait for room), a commit intent is in the mirror
//! before its call returns (a mark need not be: recovery finds it in the table), `flush` waits for everything; and in
//! every mode a committed group is exactly one PUT, never one object per call.
//!
//! Backends: InMemory and a local directory; the tests about conditional creates, listings or request counts
//! (`mirror_support::kinds_with_s3`) also on moto's S3 API.

use crate::mirror_support;

use std::sync::Arc;
use std::time::Duration;

use mirror_support::*;
use sinkpoint::CheckpointState;
use sinkpoint::limits::MIRROR_SLOTS_IN_FLIGHT_MAX;
use sinkpoint::mirror::{MirrorMode, MirrorSettings, MirrorView};
use sinkpoint::testkit::ManualClock;
use sinkpoint::testkit::RawProtocol;
use sinkpoint::testkit::limits::MIRROR_QUEUED_GROUPS_MAX;
use sinkpoint::{Attempt, Part, StagePart};

fn asynchronous(lag_batches_max: u32, lag_ms_max: u64) -> MirrorSettings {
    MirrorSettings { mode: MirrorMode::Asynchronous { lag_batches_max, lag_ms_max }, ..sync_settings() }
}

/// Waits (up to 2 s) until exactly one put is held at the gate: the first group's, with nothing queued behind it
/// yet; says whether it came to that.
async fn one_put_held(bucket: &Bucket) -> bool {
    for _ in 0..2_000 {
        if bucket.faults.held_puts() == 1 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

/// Gives a call that should be blocked every chance to finish (a wrong implementation shows here), then says
/// whether it did.
async fn finished<T>(task: &tokio::task::JoinHandle<T>) -> bool {
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.is_finished()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asynchronous_lag_stays_within_its_bound_in_groups() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "lag-groups");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let store = Arc::new(
            builder(&bucket, &dir.path().join("a.redb"), asynchronous(3, u64::MAX), &clock).open().await.unwrap(),
        );
        bucket.faults.hold_puts(true);
        for n in 0..3 {
            store.stage(&id(n), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(n)])).await.unwrap();
            assert_eq!(store.mirror_lag().groups, u64::from(n) + 1, "{kind:?}");
        }
        let fourth = {
            let store = store.clone();
            tokio::spawn(async move {
                store.stage(&id(3), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(3)])).await
            })
        };
        assert!(!finished(&fourth).await, "{kind:?}: a call was acked beyond the lag bound");
        assert_eq!(store.mirror_lag().groups, 3, "{kind:?}");
        bucket.faults.hold_puts(false);
        fourth.await.unwrap().unwrap();
        store.flush().await.unwrap();
        assert_eq!(store.mirror_lag(), Default::default(), "{kind:?}");
        Arc::try_unwrap(store).ok().unwrap().close();
        let restored = builder(&bucket, &dir.path().join("b.redb"), sync_settings(), &clock).open().await.unwrap();
        assert!((0..4).all(|n| restored.get(&id(n)).unwrap().is_some()), "{kind:?}");
        restored.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asynchronous_lag_stays_within_its_bound_in_age_on_the_logical_clock() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "lag-age");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(10_000);
        let store = Arc::new(
            builder(&bucket, &dir.path().join("a.redb"), asynchronous(1000, 500), &clock).open().await.unwrap(),
        );
        bucket.faults.hold_puts(true);
        store.stage(&id(0), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(0)])).await.unwrap();
        clock.advance(499);
        store.stage(&id(1), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(1)])).await.unwrap();
        assert_eq!(store.mirror_lag().oldest_ms, 499, "{kind:?}");
        clock.advance(1);
        let late = {
            let store = store.clone();
            tokio::spawn(async move {
                store.stage(&id(2), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(2)])).await
            })
        };
        assert!(!finished(&late).await, "{kind:?}: a call was acked with the oldest group at the age bound");
        assert_eq!(store.mirror_lag().oldest_ms, 500, "{kind:?}");
        bucket.faults.hold_puts(false);
        late.await.unwrap().unwrap();
        store.flush().await.unwrap();
        Arc::try_unwrap(store).ok().unwrap().close();
    }
}

/// A commit intent (and a commit of empty checkpoints) is in the mirror before its call returns in asynchronous
/// mode; `mark_committed` is not (the next test shows why it need not be), and ships in order ahead of the next
/// intent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_intents_are_in_the_mirror_before_they_return_in_asynchronous_mode() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "async-intent");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let store = Arc::new(
            builder(&bucket, &dir.path().join("a.redb"), asynchronous(64, u64::MAX), &clock).open().await.unwrap(),
        );
        seal(&store, 0).await;
        store.stage(&id(1), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(1)])).await.unwrap();
        store.seal(&id(1), 1).await.unwrap();
        let mirrored = || async { MirrorView::open(bucket.store(), bucket.prefix.clone()).await.unwrap().next_seq() };
        for step in 0..3 {
            bucket.faults.hold_puts(true);
            let before = mirrored().await;
            let call = {
                let store = store.clone();
                tokio::spawn(async move {
                    match step {
                        0 => store.begin_commit(0, &[id(0)], None, false).await,
                        1 => store.mark_committed(0).await,
                        _ => store.commit_empty(&[id(1)]).await,
                    }
                })
            };
            if step == 1 {
                let in_time = tokio::time::timeout(Duration::from_secs(10), call).await;
                assert!(in_time.is_ok(), "{kind:?}: mark_committed waited for the mirror");
                in_time.unwrap().unwrap().unwrap();
                assert_eq!(mirrored().await, before, "{kind:?}: the mark is acked before it is in the mirror");
                continue;
            }
            assert!(!finished(&call).await, "{kind:?}: protocol call {step} returned before the mirror had it");
            bucket.faults.hold_puts(false);
            call.await.unwrap().unwrap();
        }
        // Without a flush, a restore elsewhere sees every protocol record: the mark shipped before the intent.
        let restored = builder(&bucket, &dir.path().join("b.redb"), sync_settings(), &clock).open().await.unwrap();
        assert_eq!(restored.get(&id(0)).unwrap().unwrap().state, CheckpointState::Committed { key: Some(0) });
        assert_eq!(restored.get(&id(1)).unwrap().unwrap().state, CheckpointState::Committed { key: None });
        restored.close();
        Arc::try_unwrap(store).ok().unwrap().close();
    }
}

/// In either mode `mark_committed` returns before its put (the mark is never waited for), so a writer that loses
/// its disk right after it leaves the key `Committing` in the mirror: the crash point between the table commit and
/// the mark. The writer restored from the mirror finds the commit in the table by its key (F1) and marks it;
/// nothing is committed twice and no row is lost. (With the mark waited for, `mark_committed` does not return.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_lost_with_the_disk_is_found_again_in_the_table() {
    use sinkpoint::{CommitKey, DirTable, ErrorKind, Store};
    use sinkpoint::{CommitOutcome, Committer, Target, TargetCommit};
    for (kind, settings) in kinds().into_iter().flat_map(|k| [(k, sync_settings()), (k, asynchronous(64, u64::MAX))]) {
        let kind = (kind, settings.mode);
        let bucket = Bucket::new(kind.0, "mark-lost");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let table = DirTable::new(Arc::new(object_store::memory::InMemory::new()), "table".into());
        let store = builder(&bucket, &dir.path().join("a.redb"), settings, &clock).open().await.unwrap();
        let written = table.write_data_file("a-0", b"0:0\n".to_vec()).await.unwrap();
        store
            .stage(
                &id(0),
                StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(0)]).results(vec![written.clone()]),
            )
            .await
            .unwrap();
        store.seal(&id(0), 1).await.unwrap();
        store.begin_commit(0, &[id(0)], None, false).await.unwrap();
        let commit = TargetCommit {
            key: &CommitKey { job: job(), n: 0 },
            ids: &[id(0)],
            epoch: store.epoch(),
            results: &[written],
            final_commit: false,
            prepared_version: None,
        };
        assert_eq!(table.commit(&commit).await, CommitOutcome::Committed, "{kind:?}");
        bucket.faults.hold_puts(true);
        let mark = tokio::time::timeout(Duration::from_secs(10), store.mark_committed(0)).await;
        mark.expect("mark_committed waited for the mirror").unwrap();
        // The disk is lost with the mark's put still held: the process dies, its put never lands.
        bucket.faults.crash();
        bucket.faults.hold_puts(false);
        assert_eq!(store.flush().await.unwrap_err().kind(), ErrorKind::Poisoned, "{kind:?}");
        store.close();

        let restored = Store::builder(job(), target())
            .path(dir.path().join("b.redb"))
            .mirror(Arc::new(bucket.faults.fresh()), bucket.prefix.clone(), sync_settings())
            .clock(Arc::new(clock.clone()))
            .open()
            .await
            .unwrap();
        assert_eq!(restored.get(&id(0)).unwrap().unwrap().state, CheckpointState::Committing { key: 0 }, "{kind:?}");
        let report = Committer::new(&restored, &table).recover().await.unwrap();
        assert_eq!(report.marked_landed, Some(0), "{kind:?}: {report:?}");
        assert_eq!(restored.get(&id(0)).unwrap().unwrap().state, CheckpointState::Committed { key: Some(0) });
        assert_eq!(table.commits().await.unwrap().len(), 1, "{kind:?}: one table commit");
        assert_eq!(table.rows().await.unwrap(), vec!["0:0".to_owned()], "{kind:?}");
        restored.close();
    }
}

/// The frame count in a segment's header (bytes 12..16).
fn frames_in(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[12..16].try_into().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_put_per_group_never_one_object_per_call() {
    for kind in kinds_with_s3() {
        for settings in [sync_settings(), asynchronous(8, u64::MAX)] {
            let bucket = Bucket::new(kind, "one-put");
            let dir = tempfile::tempdir().unwrap();
            let clock = ManualClock::new(0);
            let store =
                Arc::new(builder(&bucket, &dir.path().join("a.redb"), settings.clone(), &clock).open().await.unwrap());
            let at_open = bucket.faults.put_paths().len();
            // Sequential calls: one group each; synchronous, one put each. Asynchronous calls do not wait for
            // their put, so the groups committed while one is in flight share the next (a slow store folds them).
            for n in 0..5 {
                store.stage(&id(n), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(n)])).await.unwrap();
            }
            store.flush().await.unwrap();
            let sequential = bucket.faults.put_paths().len() - at_open;
            if settings.mode == MirrorMode::Synchronous {
                assert_eq!(sequential, 5, "{kind:?}: synchronous sequential calls");
            } else {
                assert!((1..=5).contains(&sequential), "{kind:?}: {sequential} puts for 5 asynchronous groups");
            }
            // Concurrent calls while each put takes 20 ms: folded into few groups, still one put per group.
            bucket.faults.set_latency(Duration::from_millis(20));
            let calls: Vec<_> = (100..164)
                .map(|n| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        store.stage(&id(n), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(n)])).await
                    })
                })
                .collect();
            for call in calls {
                call.await.unwrap().unwrap();
            }
            store.flush().await.unwrap();
            bucket.faults.set_latency(Duration::ZERO);
            let puts: Vec<String> = bucket.faults.put_paths()[at_open + sequential..].to_vec();
            let mut frames = 0;
            for path in &puts {
                assert!(path.contains("/wal/"), "{kind:?}: {path}");
                let key = path.split_once("/wal/").map(|(_, slot)| format!("wal/{slot}")).unwrap();
                frames += frames_in(&bucket.read(&key).await);
            }
            assert_eq!(frames, 64, "{kind:?}: the groups hold {frames} records, not the 64 calls");
            assert!(puts.len() < 16, "{kind:?} {:?}: {} puts for 64 concurrent calls", settings.mode, puts.len());
            let mut unique = puts.clone();
            unique.dedup();
            assert_eq!(unique.len(), puts.len(), "{kind:?}: a slot was put twice");
            Arc::try_unwrap(store).ok().unwrap().close();
        }
    }
}

/// Issue 15's pipelined mirror, asynchronous mode: the groups committed while a put is in flight go to the
/// mirror as one object when it lands, not one object each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_queued_behind_a_put_are_shipped_as_one_object() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "fold");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let store =
            builder(&bucket, &dir.path().join("a.redb"), asynchronous(1_000, u64::MAX), &clock).open().await.unwrap();
        let at_open = bucket.faults.put_paths().len();
        bucket.faults.hold_puts(true);
        // Sequential calls, each its own group: the first group's put is held, the other 39 queue behind it.
        store.stage(&id(0), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(0)])).await.unwrap();
        assert!(one_put_held(&bucket).await, "{kind:?}: the first group's put never reached the store");
        for n in 1..40 {
            store.stage(&id(n), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(n)])).await.unwrap();
        }
        assert_eq!(store.mirror_lag().groups, 40, "{kind:?}");
        bucket.faults.hold_puts(false);
        store.flush().await.unwrap();
        let puts: Vec<String> = bucket.faults.put_paths()[at_open..].to_vec();
        assert_eq!(puts.len(), 2, "{kind:?}: 40 groups, one held put: {puts:?}");
        let mut frames = Vec::new();
        for path in &puts {
            let key = path.split_once("/wal/").map(|(_, slot)| format!("wal/{slot}")).unwrap();
            frames.push(frames_in(&bucket.read(&key).await));
        }
        assert_eq!(frames, vec![1, 39], "{kind:?}: the queued groups' records, in one segment");
        store.close();
        let restored = builder(&bucket, &dir.path().join("b.redb"), sync_settings(), &clock).open().await.unwrap();
        assert!((0..40).all(|n| restored.get(&id(n)).unwrap().is_some()), "{kind:?}");
        restored.close();
    }
}

/// Synchronous mode, several puts in flight: callers arriving while the first group's put is held are committed
/// and put in the next slots meanwhile (the writer does not wait on its thread, and the uploader does not wait for
/// the held put), yet none is acknowledged before the held slot lands, since a reader stops at the first absent
/// slot. Fails with one put in flight (every later call queues behind the held one: no slot after it is put)
/// and with acknowledgements out of slot order (the seven return while the first is held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronous_callers_arriving_during_a_put_go_on_in_the_next_slots() {
    for kind in kinds() {
        let puts_past_the_held = callers_behind_a_held_put(kind, sync_settings()).await;
        assert!(puts_past_the_held > 0, "{kind:?}: no slot after the held one was put while it was held");
    }
}

/// A synchronous call that changes nothing (a retried seal, a part staged again with the same bytes) promises
/// what the call it repeats promised: the state is in the mirror. So it is not acked before that call's group
/// is, though it has no group of its own. Found in review after the writer stopped waiting for a synchronous
/// group on its thread (several puts in flight): the retry returned at once while the original's put was held,
/// and a caller that deleted its source on that `Ok` lost the input with the disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_call_that_changes_nothing_waits_for_the_state_it_repeats() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "sync-no-op");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let store =
            Arc::new(builder(&bucket, &dir.path().join("a.redb"), sync_settings(), &clock).open().await.unwrap());
        // Past the slots right after the fence, which a new writer puts one at a time (they may hold voids).
        for n in 100..100 + MIRROR_SLOTS_IN_FLIGHT_MAX as u32 {
            store.stage(&id(n), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(n)])).await.unwrap();
        }
        // The same call twice, the second while the first's put is held: a stage, then a seal.
        for seal in [false, true] {
            let held = next_wal_slot(&bucket).await;
            bucket.faults.hold_puts_under(&wal_key(held));
            let call = || {
                let caller = store.clone();
                tokio::spawn(async move {
                    if seal {
                        caller.seal(&id(0), 1).await.map(drop)
                    } else {
                        let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(0)]);
                        caller.stage(&id(0), part).await.map(drop)
                    }
                })
            };
            let first = call();
            assert!(one_put_held(&bucket).await, "{kind:?}: the first call's put never started");
            let again = call();
            assert!(!finished(&again).await, "{kind:?}, seal {seal}: the repeat was acked before the first's put");
            assert!(!first.is_finished(), "{kind:?}");
            bucket.faults.hold_puts(false);
            first.await.unwrap().unwrap();
            again.await.unwrap().unwrap();
        }
        Arc::try_unwrap(store).ok().unwrap().close();
        let restored = builder(&bucket, &dir.path().join("b.redb"), sync_settings(), &clock).open().await.unwrap();
        assert!(restored.is_processed(&key(0)).unwrap(), "{kind:?}: the seal is not in the mirror");
        restored.close();
    }
}

/// With `puts_in_flight_max` 1, the callers arriving during the held put queue behind it and go in one segment
/// once it lands: the fewest puts, as before several were allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_put_in_flight_folds_the_callers_behind_it() {
    let settings = MirrorSettings { puts_in_flight_max: 1, ..sync_settings() };
    let puts_past_the_held = callers_behind_a_held_put(Kind::Memory, settings).await;
    assert_eq!(puts_past_the_held, 0, "a slot after the held one was put while it was held");
}

/// Settings outside 1..=MIRROR_SLOTS_IN_FLIGHT_MAX are refused at open, before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_in_flight_outside_the_format_bound_are_refused() {
    let bucket = Bucket::new(Kind::Memory, "puts-bound");
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    for bad in [0, MIRROR_SLOTS_IN_FLIGHT_MAX as u32 + 1] {
        let settings = MirrorSettings { puts_in_flight_max: bad, ..sync_settings() };
        let err = builder(&bucket, &dir.path().join("a.redb"), settings, &clock).open().await.unwrap_err();
        assert_eq!(err.kind(), sinkpoint::ErrorKind::InvalidInput, "{bad}: {err}");
        assert!(err.to_string().contains("puts_in_flight_max"), "{err}");
    }
    assert!(bucket.keys().await.is_empty(), "a refused open wrote to the mirror");
}

/// The writer does not wait for a synchronous group itself, so something must bound how far it runs ahead of
/// the mirror: with every put held, calls arriving one at a time are committed one group each until
/// `MIRROR_QUEUED_GROUPS_MAX` groups are queued (and one more, whose hand-over then waits), and then the writer
/// waits for room (the later calls queue and, once
/// the puts go, fold). Fails without the bound (every call is committed while the puts are held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_writer_runs_at_most_the_queue_bound_ahead_of_its_mirror() {
    let bound = MIRROR_QUEUED_GROUPS_MAX as u64;
    let bucket = Bucket::new(Kind::Memory, "queue-bound");
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let store = Arc::new(builder(&bucket, &dir.path().join("a.redb"), sync_settings(), &clock).open().await.unwrap());
    let at_open = store.stats().commits;
    bucket.faults.hold_puts(true);
    let mut calls = Vec::new();
    for n in 0..(bound as u32 + 16) {
        let caller = store.clone();
        let before = caller.stats().commits;
        calls.push(tokio::spawn(async move {
            caller.stage(&id(n), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(n)])).await
        }));
        // Each call alone in its group while the writer has room (once it has none, this waits out its 30 ms).
        for _ in 0..30 {
            if store.stats().commits > before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ahead = store.stats().commits - at_open;
    // The bound's groups queued, and one more committed whose hand-over waits for room.
    assert_eq!(ahead, bound + 1, "groups committed while every put was held");
    assert!(calls.iter().all(|c| !c.is_finished()), "a call was acked with its put held");
    bucket.faults.hold_puts(false);
    for call in calls {
        call.await.unwrap().unwrap();
    }
    Arc::try_unwrap(store).ok().unwrap().close();
}

/// Holds the first put after a writer's first slots, has seven more callers call meanwhile, and returns how many
/// slots after the held one were put while it was held; checks that no call was acked before the held slot
/// landed, and that all are there after.
async fn callers_behind_a_held_put(kind: Kind, settings: MirrorSettings) -> usize {
    let bucket = Bucket::new(kind, "sync-pipeline");
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let store = Arc::new(builder(&bucket, &dir.path().join("a.redb"), settings.clone(), &clock).open().await.unwrap());
    // Past the slots right after the fence, which a new writer puts one at a time (they may hold voids).
    for n in 100..100 + MIRROR_SLOTS_IN_FLIGHT_MAX as u32 {
        store.stage(&id(n), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(n)])).await.unwrap();
    }
    let held = next_wal_slot(&bucket).await;
    bucket.faults.hold_puts_under(&wal_key(held));
    let stage = |n: u32| {
        let caller = store.clone();
        tokio::spawn(async move {
            caller.stage(&id(n), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(n)])).await
        })
    };
    let first = stage(0);
    assert!(one_put_held(&bucket).await, "{kind:?}: the first group's put never started");
    let rest: Vec<_> = (1..8).map(stage).collect();
    let next = wal_key(held + 1);
    for _ in 0..100 {
        if bucket.keys().await.contains(&next) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(!finished(&first).await, "{kind:?}: a synchronous call was acked before its group was mirrored");
    assert!(rest.iter().all(|c| !c.is_finished()), "{kind:?}: a call was acked before the slot below its own");
    let past = bucket.keys().await.iter().filter(|k| k.starts_with("wal/") && **k > wal_key(held)).count();
    bucket.faults.hold_puts(false);
    first.await.unwrap().unwrap();
    for call in rest {
        call.await.unwrap().unwrap();
    }
    Arc::try_unwrap(store).ok().unwrap().close();
    let restored = builder(&bucket, &dir.path().join("b.redb"), settings, &clock).open().await.unwrap();
    assert!((0..8).all(|n| restored.get(&id(n)).unwrap().is_some()), "{kind:?}");
    restored.close();
    past
}

/// Issue 15, the awaited shapes: nobody waits for an asynchronous mirror's durable groups (nor for a mark), so
/// the uploader lingers on them as on unsynced ones, and a worker's stage calls, its seal and the previous
/// lifecycle's mark reach the mirror in the put that carries its `begin_commit` (which is waited for, and ends
/// the linger by arriving). Two lifecycles of 13 awaited calls took 26 puts before (one group, one put each, over
/// a store that answers at once), and take 2 here on a quiet machine; the bound leaves room for a loaded one,
/// whose calls may outlast a few lingers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_workers_awaited_calls_share_the_put_of_its_commit() {
    const LIFECYCLES: u32 = 2;
    for kind in kinds_with_s3() {
        let bucket = Bucket::new(kind, "async-linger");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let store =
            builder(&bucket, &dir.path().join("a.redb"), asynchronous(1_000, u64::MAX), &clock).open().await.unwrap();
        let at_open = bucket.faults.put_paths().len();
        for c in 0..LIFECYCLES {
            for n in 0..10 {
                let part =
                    StagePart::new(Attempt::FIRST, Part::new(n)).keys(vec![key(c * 10 + n)]).results(vec![result(n)]);
                store.stage(&id(c), part).await.unwrap();
            }
            store.seal(&id(c), 10).await.unwrap();
            store.begin_commit(u64::from(c), &[id(c)], None, false).await.unwrap();
            store.mark_committed(u64::from(c)).await.unwrap();
        }
        let puts = bucket.faults.put_paths().len() - at_open;
        println!("{kind:?}: {LIFECYCLES} lifecycles of 13 awaited calls, {puts} puts");
        assert!(puts <= 8 * LIFECYCLES as usize, "{kind:?}: {puts} puts for {LIFECYCLES} lifecycles");
        store.close();
        let restored = builder(&bucket, &dir.path().join("b.redb"), sync_settings(), &clock).open().await.unwrap();
        for c in 0..LIFECYCLES {
            let state = restored.get(&id(c)).unwrap().unwrap().state;
            assert_eq!(state, CheckpointState::Committed { key: Some(u64::from(c)) }, "{kind:?}");
        }
        restored.close();
    }
}

/// A writer waiting for room at the lag bound is counted as blocked on the uploader, which then puts what it
/// holds instead of lingering: 20 calls under a bound of one group take a few milliseconds each, not the 50 ms
/// linger each (over a second) they take when the uploader does not look. On the two stores that answer at once:
/// over moto each call also waits for an HTTP put, whose time under load would be measured instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::disallowed_methods, reason = "the wall time of the calls is what is checked")]
async fn a_writer_at_the_lag_bound_does_not_wait_for_the_linger() {
    for kind in [Kind::Memory, Kind::Local] {
        let bucket = Bucket::new(kind, "async-bound-linger");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let store =
            builder(&bucket, &dir.path().join("a.redb"), asynchronous(1, u64::MAX), &clock).open().await.unwrap();
        let started = std::time::Instant::now();
        for n in 0..20 {
            store.stage(&id(n), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(n)])).await.unwrap();
        }
        let elapsed = started.elapsed();
        println!("{kind:?}: 20 calls under a lag bound of one group in {elapsed:?}");
        assert!(elapsed < Duration::from_millis(500), "{kind:?}: the writer waited for the linger: {elapsed:?}");
        store.flush().await.unwrap();
        store.close();
    }
}
