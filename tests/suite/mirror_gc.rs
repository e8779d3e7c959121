//! Proves that deletes are made only by the holder of the newest epoch: a writer whose
//! collection falls due after a newer writer claimed the next epoch (while that writer's fence is still in
//! flight) deletes nothing, so every object the newest manifest references survives and a restore from it
//! works. With the holder check removed, this test loses the slots the newest claim reads from.
//!
//! And that the operator's collection (`sinkpoint gc`, `gc::find_mirror_garbage`) deletes only what no restore
//! reads: superseded objects once past the minimum age, never the manifest a stale claim takes its base from
//! (without that rule the mirror no longer restores: "a gap in the mirror's log").
//!
//! Backends: InMemory and a local directory; the tests about conditional creates, listings or request counts
//! (`mirror_support::kinds_with_s3`) also on moto's S3 API.

use crate::mirror_support;

use std::sync::Arc;

use mirror_support::*;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::testkit::{FaultStore, ManualClock, PutFault};
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{ErrorKind, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_newest_epoch_deletes() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "gc-holder");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let settings = MirrorSettings { snapshot_interval_records: 4, gc_age_ms_min: 1_000, ..sync_settings() };
        let old = builder(&bucket, &dir.path().join("a.redb"), settings.clone(), &clock).open().await.unwrap();
        // Records 0, 1 (Create, Open) and 2, 3: a snapshot at slot 3, referenced by manifest update 1.
        seal(&old, 0).await;
        old.flush().await.unwrap();
        wait_for(&bucket, "manifest/00000000000000000001.0000000001").await;

        // The new writer claims epoch 2 (copying first slot 3) and reads the log; its fence is held.
        let held = FaultStore::new(bucket.raw.clone());
        held.hold_puts_under("/wal/");
        let opening = {
            let builder = Store::builder(job(), target())
                .path(dir.path().join("b.redb"))
                .mirror(Arc::new(held.clone()), bucket.prefix.clone(), settings.clone())
                .clock(Arc::new(clock.clone()));
            tokio::spawn(async move { builder.open().await })
        };
        while held.held_puts() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        // Meanwhile the old writer wins the next slots and snapshots again: update 2 moves past slot 3.
        for n in 1..3 {
            seal(&old, n).await;
        }
        wait_for(&bucket, "manifest/00000000000000000001.0000000002").await;
        let before = bucket.keys().await;
        // Its collection falls due; one more group makes it run. A claim of epoch 2 exists: it deletes nothing,
        // and stops the old writer (fenced), so whether this stage is acknowledged is a race.
        clock.advance(1_000);
        let _ = old
            .stage(&id(3), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(3)]).results(vec![result(3)]))
            .await;
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = bucket.keys().await;
        let lost: Vec<&String> = before.iter().filter(|k| !after.contains(k)).collect();
        // Released before asserting, so that a failure reports instead of leaving the open blocked forever.
        held.hold_puts(false);
        assert!(lost.is_empty(), "{kind:?}: a writer that no longer holds the newest epoch deleted {lost:?}");
        let new = opening.await.unwrap().unwrap();
        assert_eq!(new.epoch(), 2, "{kind:?}");
        let err = old.stage(&id(9), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(9)])).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Fenced, "{kind:?}: {err}");
        let state = digest(&new);
        assert!((0..3).all(|n| new.is_processed(&key(n)).unwrap()), "{kind:?}: the takeover lost acked seals");
        old.close();
        new.close();
        let restored = builder(&bucket, &dir.path().join("c.redb"), settings, &clock).open().await.unwrap();
        assert_eq!(digest(&restored), state, "{kind:?}");
        restored.close();
    }
}

async fn wait_for(bucket: &Bucket, key: &str) {
    for _ in 0..2000 {
        if bucket.keys().await.iter().any(|k| k == key) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{key} never appeared: {:?}", bucket.keys().await);
}

/// Red-team 1: a takeover whose claim stalls (after it read the log) while the old holder snapshots past the
/// slot it read up to and collects everything below, must still fence the old holder. The claim is held, not
/// the fence: the holder's collection lists the manifests before the claim exists, so only the new writer's
/// re-list after its claim can notice the newer manifest and move its read and its fence past the collection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_stalled_past_collection_still_fences_the_old_writer() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "gc-stalled-claim");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let settings = MirrorSettings { snapshot_interval_records: 4, gc_age_ms_min: 1_000, ..sync_settings() };
        let held = FaultStore::new(bucket.raw.clone());
        let (old, opening) = stall_claim_past_collection(&bucket, dir.path(), &settings, &clock, &held).await;
        held.hold_puts(false);
        let new = opening.await.unwrap().unwrap();
        assert_eq!(new.epoch(), 2, "{kind:?}");
        // The redone read is named by update 1 of the new epoch, so no reader starts at the collected slot 3.
        let keys = bucket.keys().await;
        assert!(keys.iter().any(|k| k == "manifest/00000000000000000002.0000000001"), "{kind:?}: {keys:?}");
        let fenced = old.stage(&id(9), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(9)])).await;
        assert!(
            matches!(&fenced, Err(e) if e.kind() == ErrorKind::Fenced),
            "{kind:?}: the old writer was not fenced by the stalled takeover: {fenced:?}"
        );
        assert!(
            (0..6).all(|n| new.is_processed(&key(n)).unwrap()),
            "{kind:?}: the takeover lost seals the old writer acknowledged before it was fenced"
        );
        let state = digest(&new);
        old.close();
        new.close();
        let restored = builder(&bucket, &dir.path().join("c.redb"), settings, &clock).open().await;
        assert!(restored.is_ok(), "{kind:?}: the mirror can no longer be restored: {:?}", restored.err());
        let restored = restored.unwrap();
        assert_eq!(digest(&restored), state, "{kind:?}");
        restored.close();
    }
}

/// Defence in depth (red-team 1, step 3): an old holder whose collection finds a newer epoch's manifest stops
/// with `Fenced` at once, before the new writer's fence reaches it (the fence is held here), so none of its
/// later calls is acknowledged while it is no longer the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_holder_whose_collection_sees_a_newer_epoch_stops_fenced() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "gc-sees-newer");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let settings = MirrorSettings { snapshot_interval_records: 4, gc_age_ms_min: 1_000, ..sync_settings() };
        let old = builder(&bucket, &dir.path().join("a.redb"), settings.clone(), &clock).open().await.unwrap();
        seal(&old, 0).await;
        old.flush().await.unwrap();
        wait_for(&bucket, "manifest/00000000000000000001.0000000001").await;
        let held = FaultStore::new(bucket.raw.clone());
        held.hold_puts_under("/wal/");
        let opening = {
            let builder = Store::builder(job(), target())
                .path(dir.path().join("b.redb"))
                .mirror(Arc::new(held.clone()), bucket.prefix.clone(), settings.clone())
                .clock(Arc::new(clock.clone()));
            tokio::spawn(async move { builder.open().await })
        };
        while held.held_puts() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        // The claim of epoch 2 is in; its fence is held. The old writer's collection falls due and lists it.
        clock.advance(1_000);
        let mut late = Ok(sinkpoint::StageOutcome::Staged);
        for _ in 0..200 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            late = old.stage(&id(9), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(9)])).await;
            if late.is_err() {
                break;
            }
        }
        held.hold_puts(false);
        assert!(
            matches!(&late, Err(e) if e.kind() == ErrorKind::Fenced),
            "{kind:?}: the old writer went on after its collection saw epoch 2: {late:?}"
        );
        let new = opening.await.unwrap().unwrap();
        assert!(new.is_processed(&key(0)).unwrap(), "{kind:?}: an acked seal was lost");
        old.close();
        new.close();
    }
}

/// Opens the old writer, then a new one ("b.redb", through `held`) whose claim is held after it read the log
/// from slot 3, while the old writer snapshots at 7 and 11 and collects every slot below 11. Returns the old
/// writer (with checkpoints 0–5 sealed and acknowledged) and the held open.
async fn stall_claim_past_collection(
    bucket: &Bucket,
    dir: &std::path::Path,
    settings: &MirrorSettings,
    clock: &ManualClock,
    held: &FaultStore<Arc<dyn object_store::ObjectStore>>,
) -> (Store, tokio::task::JoinHandle<sinkpoint::Result<Store>>) {
    let old = builder(bucket, &dir.join("a.redb"), settings.clone(), clock).open().await.unwrap();
    // Slots 0–2 (Create + Open, stage, seal): a snapshot at slot 3, referenced by manifest update 1.
    seal(&old, 0).await;
    old.flush().await.unwrap();
    wait_for(bucket, "manifest/00000000000000000001.0000000001").await;

    // The new writer reads manifest 1.1 and the log from slot 3 (nothing there yet); its claim is held.
    held.hold_puts_under("/manifest/");
    let opening = {
        let builder = Store::builder(job(), target())
            .path(dir.join("b.redb"))
            .mirror(Arc::new(held.clone()), bucket.prefix.clone(), settings.clone())
            .clock(Arc::new(clock.clone()));
        tokio::spawn(async move { builder.open().await })
    };
    while held.held_puts() == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // The old writer fills slots 3–10 and snapshots at 7 and 11 (updates 2 and 3); then its collection falls
    // due, finds no newer epoch (the claim is still held) and deletes every slot below 11, slot 3 included.
    for n in 1..5 {
        seal(&old, n).await;
    }
    wait_for(bucket, "manifest/00000000000000000001.0000000003").await;
    clock.advance(1_000);
    seal(&old, 5).await;
    old.flush().await.unwrap();
    wait_gone(bucket, "wal/00000000000000000003").await;
    (old, opening)
}

/// Step 2 of the fix: a takeover that dies between its stale claim (base 3, collected) and the update naming
/// the newer base leaves the claim as the newest manifest. Readers take the previous epoch's newer base instead
/// (the history of slots is linear), so the next open restores, fences the old writer, and loses no ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_left_with_a_collected_base_by_a_crash_does_not_brick_the_mirror() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "gc-stale-claim");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let settings = MirrorSettings { snapshot_interval_records: 4, gc_age_ms_min: 1_000, ..sync_settings() };
        let held = FaultStore::new(bucket.raw.clone());
        // The update after the claim never lands: the takeover dies with its stale claim in the mirror.
        held.fail_puts(PutFault::FailBefore, "manifest/00000000000000000002.", 1_000);
        let (old, opening) = stall_claim_past_collection(&bucket, dir.path(), &settings, &clock, &held).await;
        held.hold_puts(false);
        let dead = opening.await.unwrap();
        assert!(dead.is_err(), "{kind:?}: the takeover's update was meant to fail");
        let keys = bucket.keys().await;
        assert!(keys.iter().any(|k| k == "manifest/00000000000000000002"), "{kind:?}: {keys:?}");
        assert!(!keys.iter().any(|k| k.starts_with("manifest/00000000000000000002.")), "{kind:?}: {keys:?}");

        let next = builder(&bucket, &dir.path().join("c.redb"), settings.clone(), &clock).open().await;
        assert!(next.is_ok(), "{kind:?}: a stale claim bricked the mirror: {:?}", next.err());
        let next = next.unwrap();
        assert_eq!(next.epoch(), 3, "{kind:?}");
        let fenced = old.stage(&id(9), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(9)])).await;
        assert!(matches!(&fenced, Err(e) if e.kind() == ErrorKind::Fenced), "{kind:?}: {fenced:?}");
        assert!((0..6).all(|n| next.is_processed(&key(n)).unwrap()), "{kind:?}: acked seals lost");
        let state = digest(&next);
        old.close();
        next.close();
        let restored = builder(&bucket, &dir.path().join("d.redb"), settings, &clock).open().await.unwrap();
        assert_eq!(digest(&restored), state, "{kind:?}");
        restored.close();
    }
}

async fn wait_gone(bucket: &Bucket, key: &str) {
    for _ in 0..2000 {
        if !bucket.keys().await.iter().any(|k| k == key) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{key} was never collected: {:?}", bucket.keys().await);
}

/// Red-team 17: every short-lived writer (gone before its own collection falls due) used to leave its claim
/// manifest behind, so listings grew forever. A writer now deletes older epochs' manifests superseded at least
/// `gc_age_ms_min` ago by the store's own timestamps (each writer here lives no time at all on its own clock,
/// so its own collection never falls due); younger ones stay, and the mirror still restores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_lived_writers_do_not_pile_up_manifests() {
    const WRITERS: u32 = 4;
    for kind in kinds_with_s3() {
        for (gc_age_ms_min, kept_max) in [(1_000, 2), (3_600_000, WRITERS as usize)] {
            let bucket = Bucket::new(kind, &format!("gc-claims-{gc_age_ms_min}"));
            let dir = tempfile::tempdir().unwrap();
            let clock = ManualClock::new(0);
            let settings = MirrorSettings { gc_age_ms_min, ..sync_settings() };
            for n in 0..WRITERS {
                if n > 0 {
                    // Real time, which the store's timestamps see (S3 keeps them to the second).
                    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
                }
                // Each run of the job on a new machine: a new local file, restored from the mirror.
                let file = dir.path().join(format!("{n}.redb"));
                let store = builder(&bucket, &file, settings.clone(), &clock).open().await.unwrap();
                seal(&store, n).await;
                store.flush().await.unwrap();
                store.close();
            }
            let manifests = bucket.keys().await.into_iter().filter(|k| k.starts_with("manifest/")).count();
            assert!(
                manifests <= kept_max,
                "{kind:?}, gc_age_ms_min {gc_age_ms_min}: {manifests} manifests after {WRITERS} short-lived writers"
            );
            if gc_age_ms_min > 1_000 {
                assert_eq!(
                    manifests, WRITERS as usize,
                    "{kind:?}: a manifest younger than the minimum age was deleted"
                );
            }
            let file = dir.path().join("restored.redb");
            let restored = builder(&bucket, &file, settings.clone(), &clock).open().await.unwrap();
            for n in 0..WRITERS {
                assert!(restored.is_processed(&key(n)).unwrap(), "{kind:?}: key {n} lost");
            }
            restored.close();
        }
    }
}

/// The operator's collection (`sinkpoint gc`) reads ages from the object store's clock against the caller's
/// wall time: this far ahead, everything garbage is due.
fn much_later_ms() -> u64 {
    use sinkpoint::Clock as _;
    sinkpoint::SystemClock.wall_ms() + 10 * 24 * 3600 * 1000
}

/// The operator's collection of a mirror whose writer never collected (it died first) deletes what the newest
/// manifest superseded, and only once that is past the minimum age; a restore afterwards has every checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_collection_deletes_only_what_no_restore_reads() {
    use sinkpoint::gc::{MirrorReason, delete_mirror_garbage, find_mirror_garbage, no_progress};
    for kind in kinds_with_s3() {
        let bucket = Bucket::new(kind, "gc-operator");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let settings = MirrorSettings { snapshot_interval_records: 4, gc_age_ms_min: u64::MAX, ..sync_settings() };
        let store = builder(&bucket, &dir.path().join("a.redb"), settings.clone(), &clock).open().await.unwrap();
        for n in 0..6 {
            seal(&store, n).await;
        }
        store.flush().await.unwrap();
        let state = digest(&store);
        store.close();
        let before = bucket.keys().await;

        use sinkpoint::Clock as _;
        let now = sinkpoint::SystemClock.wall_ms();
        let young = find_mirror_garbage(bucket.raw.clone(), bucket.prefix.clone(), now, 3_600_000, no_progress())
            .await
            .unwrap();
        assert!(young.due.is_empty(), "{kind:?}: due before the minimum age: {:?}", young.due);
        assert!(!young.young.is_empty(), "{kind:?}: the job left nothing superseded: {before:?}");

        let due =
            find_mirror_garbage(bucket.raw.clone(), bucket.prefix.clone(), much_later_ms(), 3_600_000, no_progress())
                .await
                .unwrap();
        assert_eq!(due.due.len(), young.young.len(), "{kind:?}");
        assert!(due.due.iter().all(|o| o.reason == MirrorReason::Superseded), "{kind:?}: {:?}", due.due);
        let wal0 = bucket.path("wal/00000000000000000000");
        assert!(due.due.iter().any(|o| o.path == wal0), "{kind:?}: slot 0 is below every snapshot: {:?}", due.due);
        assert!(!due.due.iter().any(|o| o.path == due.newest_manifest), "{kind:?}");
        let deleted =
            delete_mirror_garbage(bucket.raw.clone(), bucket.prefix.clone(), &due, no_progress()).await.unwrap();
        assert_eq!(deleted, due.due.len() as u64, "{kind:?}");
        let after = bucket.keys().await;
        assert_eq!(after.len(), before.len() - due.due.len(), "{kind:?}: {after:?}");

        let restored = builder(&bucket, &dir.path().join("b.redb"), settings, &clock).open().await.unwrap();
        assert_eq!(digest(&restored), state, "{kind:?}: the collection broke the restore");
        restored.close();
    }
}

/// A takeover that died between its stale claim and its update left a claim whose base was collected; readers
/// take the base of the manifest before the claim (`read_newest`). The operator's collection must keep that
/// manifest: deleting it (as "older than the newest") leaves readers with the claim's collected base, and the
/// mirror no longer restores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_collection_keeps_the_manifest_a_stale_claim_takes_its_base_from() {
    use sinkpoint::gc::{delete_mirror_garbage, find_mirror_garbage, no_progress};
    for kind in kinds() {
        let bucket = Bucket::new(kind, "gc-operator-claim");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let settings = MirrorSettings { snapshot_interval_records: 4, gc_age_ms_min: 1_000, ..sync_settings() };
        let held = FaultStore::new(bucket.raw.clone());
        held.fail_puts(PutFault::FailBefore, "manifest/00000000000000000002.", 1_000);
        let (old, opening) = stall_claim_past_collection(&bucket, dir.path(), &settings, &clock, &held).await;
        held.hold_puts(false);
        assert!(opening.await.unwrap().is_err(), "{kind:?}: the takeover's update was meant to fail");
        old.close();

        let garbage = find_mirror_garbage(bucket.raw.clone(), bucket.prefix.clone(), much_later_ms(), 0, no_progress())
            .await
            .unwrap();
        assert_eq!(garbage.newest_manifest, bucket.path("manifest/00000000000000000002"), "{kind:?}");
        assert_eq!(garbage.base_slot, 11, "{kind:?}: the base is the predecessor's");
        let predecessor = bucket.path("manifest/00000000000000000001.0000000003");
        assert!(!garbage.due.iter().any(|o| o.path == predecessor), "{kind:?}: {:?}", garbage.due);
        delete_mirror_garbage(bucket.raw.clone(), bucket.prefix.clone(), &garbage, no_progress()).await.unwrap();

        let next = builder(&bucket, &dir.path().join("c.redb"), settings, &clock).open().await;
        assert!(next.is_ok(), "{kind:?}: the collection bricked the mirror: {:?}", next.err());
        let next = next.unwrap();
        assert!((0..6).all(|n| next.is_processed(&key(n)).unwrap()), "{kind:?}: acked seals lost");
        next.close();
    }
}
